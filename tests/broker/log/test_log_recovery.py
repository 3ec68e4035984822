"""Start-up recovery: torn tails, garbage, bad CRCs, corrupt indexes, clean shutdowns."""

from __future__ import annotations

import logging
import os

from log_helpers import append, config, headers_of, make_batch, open_log, segment_files

from moldau.broker.log.segment import LogSegment

CFG = config(segment_bytes=1200, index_interval_bytes=100)


def build(tmp_path, batches: int = 20):
    """A log with several segments, abandoned without close (a crash)."""
    plog = open_log(tmp_path / "orders-0", CFG)
    sizes = []
    for i in range(batches):
        b = make_batch(1 + i % 3, value=b"d" * (20 + i))
        sizes.append(len(b))
        append(plog, b)
    data = {base: plog.read_batches(base, 1 << 20) for base in plog.segment_base_offsets}
    return plog, data


def last_segment(tmp_path) -> str:
    return str(tmp_path / "orders-0" / segment_files(tmp_path / "orders-0")[-1])


def reopen(tmp_path, **kwargs):
    return open_log(tmp_path / "orders-0", CFG, clean=False, recovery_point=0, **kwargs)


def all_batches(plog) -> bytes:
    return b"".join(plog.read_batches(base, 1 << 20) for base in plog.segment_base_offsets
                    if base < plog.log_end_offset)


def test_torn_tail_is_cut_at_the_last_whole_batch(tmp_path, caplog):
    plog, data = build(tmp_path)
    leo = plog.log_end_offset
    path = last_segment(tmp_path)
    size = os.path.getsize(path)
    last = headers_of(data[max(data)])[-1]
    os.truncate(path, size - 7)  # cut inside the last batch
    with caplog.at_level(logging.WARNING, logger="moldau.broker.log"):
        again = reopen(tmp_path)
    assert again.log_end_offset == leo - (last.last_offset_delta + 1)
    assert os.path.getsize(path) == size - last.size
    assert f"truncating {last.size - 7} bytes" in caplog.text
    expected = b"".join(data.values())[: -last.size]
    assert all_batches(again) == expected
    info = append(again, make_batch(1))
    assert info.first_offset == again.log_end_offset - 1 == last.base_offset
    again.close()


def test_garbage_after_the_last_batch_is_removed(tmp_path):
    plog, data = build(tmp_path)
    leo = plog.log_end_offset
    path = last_segment(tmp_path)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 30 + os.urandom(100))
    again = reopen(tmp_path)
    assert again.log_end_offset == leo
    assert os.path.getsize(path) == size
    assert all_batches(again) == b"".join(data.values())
    again.close()


def test_zero_filled_tail_is_removed(tmp_path):
    plog, data = build(tmp_path)
    path = last_segment(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)
    again = reopen(tmp_path)
    assert all_batches(again) == b"".join(data.values())
    again.close()


def test_bad_crc_truncates_from_that_batch(tmp_path):
    plog, data = build(tmp_path)
    base = sorted(data)[-1]
    hs = headers_of(data[base])
    victim = hs[1]
    pos = hs[0].size
    path = last_segment(tmp_path)
    with open(path, "r+b") as f:
        f.seek(pos + 70)
        byte = f.read(1)
        f.seek(pos + 70)
        f.write(bytes([byte[0] ^ 0x55]))
    again = reopen(tmp_path)
    assert again.log_end_offset == victim.base_offset
    assert os.path.getsize(path) == pos
    assert all_batches(again) == b"".join(data[b] for b in sorted(data))[
        : sum(len(data[b]) for b in sorted(data)[:-1]) + pos]
    again.close()


def test_corruption_in_an_earlier_segment_drops_later_segments(tmp_path):
    plog, data = build(tmp_path)
    bases = sorted(data)
    assert len(bases) >= 3
    middle = bases[1]
    path = tmp_path / "orders-0" / f"{middle:020d}.log"
    hs = headers_of(data[middle])
    with open(path, "r+b") as f:
        f.seek(hs[0].size + hs[1].size - 3)
        f.write(b"\xff\xff\xff")
    again = reopen(tmp_path)
    assert again.segment_base_offsets == bases[:2]
    assert again.log_end_offset == hs[1].base_offset  # the damaged batch and all after it
    assert not (tmp_path / "orders-0" / f"{bases[2]:020d}.log").exists()
    again.close()


def test_recovery_starts_at_the_recovery_point(tmp_path):
    plog, data = build(tmp_path)
    bases = sorted(data)
    first = tmp_path / "orders-0" / f"{bases[0]:020d}.log"
    # Damage below the recovery point is not looked at (those segments were flushed).
    with open(first, "r+b") as f:
        f.seek(70)
        f.write(b"\xee")
    again = open_log(tmp_path / "orders-0", CFG, clean=False, recovery_point=bases[-1])
    assert again.log_end_offset == plog.log_end_offset
    again.close()


def test_clean_shutdown_skips_recovery(tmp_path):
    plog, data = build(tmp_path)
    plog.close()
    path = last_segment(tmp_path)
    hs = headers_of(data[max(data)])
    with open(path, "r+b") as f:  # a payload byte: only a CRC check notices
        f.seek(hs[0].size - 2)
        f.write(b"\x99")
    clean = open_log(tmp_path / "orders-0", CFG, clean=True)
    assert clean.log_end_offset == plog.log_end_offset
    clean.close()
    dirty = reopen(tmp_path)
    assert dirty.log_end_offset == hs[0].base_offset
    dirty.close()


def test_corrupt_index_is_rebuilt(tmp_path, caplog):
    plog, data = build(tmp_path)
    plog.close()
    bases = sorted(data)
    index = tmp_path / "orders-0" / f"{bases[0]:020d}.index"
    good = index.read_bytes()
    assert len(good) >= 16
    index.write_bytes(good[8:16] + good[:8] + good[16:] + b"\x01")  # unordered and torn
    timeindex = tmp_path / "orders-0" / f"{bases[1]:020d}.timeindex"
    timeindex.write_bytes(b"\x00" * 5)
    os.remove(tmp_path / "orders-0" / f"{bases[2]:020d}.index")
    with caplog.at_level(logging.WARNING, logger="moldau.broker.log"):
        again = open_log(tmp_path / "orders-0", CFG, clean=True)
    assert "rebuilding its indexes" in caplog.text
    assert index.read_bytes() == good
    assert (tmp_path / "orders-0" / f"{bases[2]:020d}.index").exists()
    for base in bases:
        assert again.read_batches(base, 1 << 20) == data[base]
    for offset in range(again.log_end_offset):
        assert headers_of(again.read_batches(offset, 1))[0].last_offset >= offset
    again.close()


def test_index_pointing_past_the_segment_is_rebuilt(tmp_path):
    plog, data = build(tmp_path)
    plog.close()
    base = sorted(data)[0]
    index = tmp_path / "orders-0" / f"{base:020d}.index"
    index.write_bytes(index.read_bytes() + (10_000).to_bytes(4, "big") * 2)
    again = open_log(tmp_path / "orders-0", CFG, clean=True)
    assert again.read_batches(base, 1 << 20) == data[base]
    again.close()


def test_segment_recover_reports_truncated_bytes(tmp_path):
    d = tmp_path / "seg"
    d.mkdir()
    seg = LogSegment.create(str(d), 0, index_interval_bytes=0, max_index_bytes=1024)
    batches = [make_batch(2), make_batch(3)]
    offset = 0
    for b in batches:
        buf = bytearray(b)
        buf[0:8] = offset.to_bytes(8, "big")
        h = headers_of(buf)[0]
        seg.append(offset, h.last_offset, h.max_timestamp, offset, buf)
        offset = h.next_offset
    os.pwrite(seg.fd, b"junk", seg.size)
    seg.size += 4
    assert seg.recover(1 << 20) == 4
    assert seg.size == sum(len(b) for b in batches)
    assert seg.next_offset == 5
    assert seg.find_position(3)[0] == len(batches[0])
    seg.close()


def test_leftover_files_are_cleaned(tmp_path):
    plog, _ = build(tmp_path)
    plog.close()
    d = tmp_path / "orders-0"
    (d / "00000000000000000999.log.deleted").write_bytes(b"x")
    (d / "00000000000000000999.index").write_bytes(b"")
    (d / "leader-epoch-checkpoint.tmp").write_bytes(b"")
    again = open_log(d, CFG)
    names = os.listdir(d)
    assert "00000000000000000999.log.deleted" not in names
    assert "00000000000000000999.index" not in names
    assert "leader-epoch-checkpoint.tmp" not in names
    again.close()
