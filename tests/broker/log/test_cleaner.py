"""Log compaction: results, delete horizon, compression, crash safety, bounded map, producers."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from pathlib import Path

import pytest
from log_helpers import append, config, headers_of, make_batch, open_log, segment_files

from moldau.broker.log.checkpoint import read_offsets
from moldau.broker.log.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    OffsetMap,
    key_digest,
)
from moldau.broker.log.log import PartitionLog
from moldau.broker.log.manager import LogManager
from moldau.broker.log.segment import CLEANED_SUFFIX, LogSegment
from moldau.records.batch import DELETE_HORIZON_FLAG, Compression
from moldau.records.codec import build_batch, decode_records, iter_batches

NOW = int(time.time() * 1000)
DAY = 86_400_000
COMPACT = config(cleanup_policy=("compact",), segment_bytes=8192, min_cleanable_dirty_ratio=0.5,
                 delete_retention_ms=DAY)

Row = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def records_batch(rows: list[tuple[bytes | None, bytes | None]], *, ts: int = NOW,
                  compression: int = 0, **kwargs: object) -> bytes:
    return build_batch([(k, v, None, ts + i) for i, (k, v) in enumerate(rows)],
                       compression=compression, **kwargs)  # type: ignore[arg-type]


def read_all(plog: PartitionLog) -> list[Row]:
    """Every record of the log, in order, through the ordinary read path."""
    out: list[Row] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read_batches(offset, 1 << 20)
        if not data:
            break
        for pos, h in iter_batches(data):
            for r in decode_records(data[pos:pos + h.size], verify_crc=True):
                ts = h.max_timestamp if h.log_append_time else h.base_timestamp + r.timestamp_delta
                out.append((h.base_offset + r.offset_delta, r.key, r.value, ts))
            offset = h.next_offset
    return out


def all_batches(plog: PartitionLog) -> list:
    data = b"".join(plog.read_batches(base, 1 << 20) for base in plog.segment_base_offsets
                    if base < plog.log_end_offset)
    return [h for _, h in iter_batches(data)]


def latest_per_key(rows: list[Row]) -> dict[bytes, Row]:
    latest: dict[bytes, Row] = {}
    for row in rows:
        if row[1] is not None:
            latest[row[1]] = row
    return latest


def clean_all(cleaner: LogCleaner, now_ms: int) -> int:
    passes = 0
    while cleaner.clean_once(now_ms) is not None:
        passes += 1
        assert passes < 100
    return passes


def fill(plog: PartitionLog, keys: int, versions: int, *, rng: random.Random, batch: int = 25,
         ts: int = NOW, compression: int = 0, tombstones: int = 0) -> list[Row]:
    """Write `versions` values of each key in a shuffled order, then tombstones for the first
    `tombstones` keys; returns what was written, with offsets."""
    order = [k for _ in range(versions) for k in range(keys)]
    rng.shuffle(order)
    rows: list[tuple[bytes, bytes | None]] = [
        (b"key-%d" % k, b"value-%d-%d" % (k, i)) for i, k in enumerate(order)]
    rows += [(b"key-%d" % k, None) for k in range(tombstones)]
    written: list[Row] = []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        info = append(plog, records_batch(chunk, ts=ts + i, compression=compression))
        written += [(info.first_offset + j, k, v, ts + i + j) for j, (k, v) in enumerate(chunk)]
    return written


def seal(plog: PartitionLog) -> None:
    plog.roll()
    plog.high_watermark = plog.log_end_offset


def assert_increasing(rows: list[Row]) -> None:
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))


# -- the offset map --------------------------------------------------------------------------


def test_offset_map_keeps_the_latest_offset_and_respects_its_budget():
    m = OffsetMap(24 * 100)
    assert m.memory <= 24 * 100 and m.capacity < m.slots
    digests = [key_digest(b"k%d" % i) for i in range(m.capacity)]
    for i, d in enumerate(digests):
        assert m.put(d, i)
    assert m.put(digests[3], 1000)  # updating a key takes no room
    assert not m.put(key_digest(b"one too many"), 5)
    assert m.get(digests[3]) == 1000 and m.get(digests[7]) == 7
    assert m.get(key_digest(b"absent")) == -1
    assert m.size == m.capacity
    # A map sized for a small log stays small whatever the budget.
    assert OffsetMap(1 << 27, expected_keys=10).memory < 1024


# -- compaction results ----------------------------------------------------------------------


def test_compaction_keeps_the_latest_value_of_each_key(tmp_path):
    rng = random.Random(7)
    plog = open_log(tmp_path / "orders-0", COMPACT)
    written = fill(plog, 2000, 5, rng=rng, tombstones=200)
    # Records without a key are dropped by compaction.
    written += [(append(plog, records_batch([(None, b"no key")])).first_offset, None,
                 b"no key", NOW)]
    seal(plog)
    # Data in the active segment stays as it is, duplicates included.
    tail = fill(plog, 10, 2, rng=rng, ts=NOW + 10**6)
    plog.high_watermark = plog.log_end_offset
    active_base = plog.segment_base_offsets[-1]
    active_path = tmp_path / "orders-0" / f"{active_base:020d}.log"
    active_bytes = active_path.read_bytes()
    segments_before = plog.num_segments
    size_before = plog.size_in_bytes

    cleaner = LogCleaner(lambda: [plog])
    result = cleaner.clean_once(NOW)
    assert result is not None and result.first_dirty_offset == 0
    assert result.end_offset == active_base
    assert result.records_removed > 0 and result.bytes_after < result.bytes_before
    expected = latest_per_key([r for r in written if r[0] < active_base])
    rows = read_all(plog)
    assert_increasing(rows)
    cleaned = [r for r in rows if r[0] < active_base]
    # Exactly the latest record of each key, at its original offset; tombstones still there.
    assert cleaned == sorted(expected.values())
    assert sum(1 for r in cleaned if r[2] is None) == 200
    assert [r for r in rows if r[0] >= active_base] == tail
    assert active_path.read_bytes() == active_bytes
    assert plog.segment_base_offsets[-1] == active_base
    assert plog.num_segments < segments_before and plog.size_in_bytes < size_before / 3
    # Batches holding kept tombstones carry the delete horizon; timestamps are unchanged.
    assert any(h.attributes & DELETE_HORIZON_FLAG for h in all_batches(plog))
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).exists()
    assert cleaner.checkpoint_of(plog) == active_base

    # Nothing is dirty and no tombstone is due yet.
    assert cleaner.clean_once(NOW + DAY - 1) is None
    # Past delete.retention.ms after that pass, the tombstones go.
    result = cleaner.clean_once(NOW + DAY)
    assert result is not None and result.records_removed == 200
    rows = read_all(plog)
    assert_increasing(rows)
    assert [r for r in rows if r[0] < active_base] == sorted(
        r for r in expected.values() if r[2] is not None)
    assert [r for r in rows if r[0] >= active_base] == tail
    # The now small segments are merged on the next pass.
    assert plog.num_segments < segments_before / 3
    assert cleaner.clean_once(NOW + 2 * DAY) is None
    plog.close()

    # The cleaned log reopens to the same content, after a clean or an unclean shutdown.
    for clean in (True, False):
        plog = open_log(tmp_path / "orders-0", COMPACT, clean=clean)
        assert [r for r in read_all(plog) if r[0] < active_base] == sorted(
            r for r in expected.values() if r[2] is not None)
        plog.close()


def test_tombstone_horizon_starts_when_the_tombstone_is_first_cleaned(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(cleanup_policy=("compact",),
                                                  min_cleanable_dirty_ratio=0.0,
                                                  delete_retention_ms=DAY))
    # The tombstone itself is old: its own timestamp does not count, the cleaning time does.
    append(plog, records_batch([(b"a", b"1"), (b"b", b"2")], ts=NOW - 10 * DAY))
    append(plog, records_batch([(b"a", None)], ts=NOW - 10 * DAY))
    seal(plog)
    cleaner = LogCleaner(lambda: [plog])
    assert cleaner.clean_once(NOW) is not None
    assert [(r[1], r[2], r[3]) for r in read_all(plog)] == [
        (b"b", b"2", NOW - 10 * DAY + 1), (b"a", None, NOW - 10 * DAY)]
    # New data arrives and is cleaned before the horizon: the tombstone stays.
    append(plog, records_batch([(b"b", b"3")]))
    seal(plog)
    assert cleaner.clean_once(NOW + DAY - 1) is not None
    assert [(r[1], r[2]) for r in read_all(plog)] == [(b"a", None), (b"b", b"3")]
    assert cleaner.clean_once(NOW + DAY) is not None
    assert [(r[1], r[2]) for r in read_all(plog)] == [(b"b", b"3")]
    plog.close()


def test_min_compaction_lag_keeps_recent_records_dirty(tmp_path):
    cfg = config(cleanup_policy=("compact",), segment_bytes=4096,
                 min_compaction_lag_ms=60_000, min_cleanable_dirty_ratio=0.0)
    plog = open_log(tmp_path / "orders-0", cfg)
    rng = random.Random(3)
    old = fill(plog, 50, 4, rng=rng, ts=NOW - 3_600_000)
    plog.roll()
    recent_base = plog.log_end_offset
    recent = fill(plog, 50, 4, rng=rng, ts=NOW - 1_000)
    seal(plog)
    recent_files = {name: (tmp_path / "orders-0" / name).read_bytes()
                    for name in segment_files(tmp_path / "orders-0")
                    if int(name[:20]) >= recent_base}
    cleaner = LogCleaner(lambda: [plog])
    result = cleaner.clean_once(NOW)
    assert result is not None and result.end_offset == recent_base
    rows = read_all(plog)
    assert [r for r in rows if r[0] < recent_base] == sorted(latest_per_key(old).values())
    # The recent records, duplicates and all, are untouched.
    assert [r for r in rows if r[0] >= recent_base] == recent
    for name, data in recent_files.items():
        assert (tmp_path / "orders-0" / name).read_bytes() == data
    assert cleaner.clean_once(NOW) is None
    # Once they are old enough they are compacted too.
    assert cleaner.clean_once(NOW + 120_000) is not None
    assert read_all(plog) == sorted(latest_per_key(old + recent).values())
    plog.close()


def test_dirty_ratio_and_max_compaction_lag_decide_when_to_clean(tmp_path):
    cfg = config(cleanup_policy=("compact",), segment_bytes=4096,
                 min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY)
    plog = open_log(tmp_path / "orders-0", cfg)
    rng = random.Random(5)
    fill(plog, 100, 3, rng=rng)
    seal(plog)
    cleaner = LogCleaner(lambda: [plog])
    assert cleaner.clean_once(NOW) is not None  # all dirty: ratio 1
    fill(plog, 5, 1, rng=rng)
    seal(plog)
    assert cleaner.clean_once(NOW) is None  # a little dirty data, below the ratio
    # ... but once it is older than max.compaction.lag.ms it is cleaned anyway.
    assert cleaner.clean_once(NOW + DAY + 1000) is not None
    # Logs without compact in their policy are never touched.
    other = open_log(tmp_path / "orders-1", config(segment_bytes=4096))
    fill(other, 100, 3, rng=rng)
    seal(other)
    assert LogCleaner(lambda: [other]).clean_once(NOW) is None
    other.close()
    plog.close()


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD, Compression.GZIP,
                                   Compression.SNAPPY])
def test_compressed_batches_keep_their_codec(tmp_path, codec):
    plog = open_log(tmp_path / "orders-0", COMPACT)
    written = fill(plog, 300, 3, rng=random.Random(11), compression=codec, batch=40)
    seal(plog)
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    assert read_all(plog) == sorted(latest_per_key(written).values())
    batches = all_batches(plog)
    assert batches and all(h.compression == codec for h in batches)
    # Batches were rebuilt with only some of their records, keeping offsets and the delta.
    assert any(h.record_count < h.last_offset_delta + 1 for h in batches)
    plog.close()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_large_records_headers_and_odd_timestamps_survive_rebuilding(tmp_path, codec):
    cfg = config(cleanup_policy=("compact",), segment_bytes=1 << 20, max_message_bytes=1 << 20,
                 delete_retention_ms=1000)
    plog = open_log(tmp_path / "orders-0", cfg)
    rng = random.Random(21)
    records = []
    for i in range(300):
        key = b"k%d" % rng.randrange(40) + b"x" * rng.choice([0, 200, 9000])
        value = None if i % 17 == 0 else bytes([i % 256]) * rng.choice([1, 150, 20_000])
        headers = [("h", b"%d" % i), ("empty", None)] if i % 3 else []
        records.append((key, value, headers, NOW - rng.randrange(10**9)))
    for i in range(0, 300, 150):
        buf = build_batch(records[i:i + 150], compression=codec)
        append(plog, buf)
    seal(plog)
    cleaner = LogCleaner(lambda: [plog])
    assert cleaner.clean_once(NOW) is not None  # stamps the horizon: timestamps re-based
    latest = {}
    for offset, (key, value, headers, ts) in enumerate(records):
        latest[key] = (offset, key, value, headers, ts)
    expected = sorted(latest.values())

    def decoded() -> list:
        out = []
        offset = 0
        while offset < plog.log_end_offset:
            data = plog.read_batches(offset, 1 << 24)
            for pos, h in iter_batches(data):
                assert h.compression == codec
                for r in decode_records(data[pos:pos + h.size], verify_crc=True):
                    out.append((h.base_offset + r.offset_delta, r.key, r.value, r.headers,
                                h.base_timestamp + r.timestamp_delta))
                offset = h.next_offset
        return out

    assert decoded() == expected
    assert cleaner.clean_once(NOW + 1000) is not None  # the tombstones go
    assert decoded() == [r for r in expected if r[2] is not None]
    plog.close()


def test_grouping_merges_small_cleaned_segments(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(cleanup_policy=("compact",),
                                                  segment_bytes=2048))
    rng = random.Random(2)
    written = fill(plog, 20, 30, rng=rng, batch=10)
    seal(plog)
    before = plog.num_segments
    assert before > 5
    cleaner = LogCleaner(lambda: [plog])
    cleaner.clean_once(NOW)
    # Each segment's survivors are added to what the ones before left, up to segment.bytes.
    assert plog.num_segments < before
    written += fill(plog, 20, 30, rng=rng, batch=10)
    seal(plog)
    cleaner.clean_once(NOW)
    # 20 keys fit one segment: the cleaned part ends up in very few segments.
    assert plog.num_segments <= 3
    assert read_all(plog) == sorted(latest_per_key(written).values())
    plog.close()


# -- the offset map bound --------------------------------------------------------------------


def test_tiny_dedupe_buffer_cleans_in_several_passes(tmp_path):
    cfg = config(cleanup_policy=("compact",), segment_bytes=8192, min_cleanable_dirty_ratio=0.0)
    plog = open_log(tmp_path / "orders-0", cfg)
    written = fill(plog, 1000, 3, rng=random.Random(5), tombstones=100)
    seal(plog)
    cleaner = LogCleaner(lambda: [plog], CleanerConfig(dedupe_buffer_size=24 * 150,
                                                       io_buffer_size=4096))
    ends = []
    while (result := cleaner.clean_once(NOW)) is not None:
        ends.append(result.end_offset)
        assert len(ends) < 100
    # At most ~135 keys per pass: many passes, each one further along.
    assert len(ends) >= 5 and ends == sorted(ends)
    assert ends[-1] == plog.segment_base_offsets[-1]
    expected = sorted(latest_per_key(written).values())
    rows = read_all(plog)
    assert_increasing(rows)
    assert rows == expected
    clean_all(cleaner, NOW + DAY)
    assert read_all(plog) == [r for r in expected if r[2] is not None]
    plog.close()


# -- crash safety ----------------------------------------------------------------------------


class Crash(Exception):
    pass


def crash_at(step: str):
    def hook(name: str) -> None:
        if name == step:
            raise Crash(step)
    return hook


@pytest.mark.parametrize("step", ["cleaned", "swap", "deleted"])
def test_crash_during_the_swap_loses_nothing(tmp_path, step):
    path = tmp_path / "orders-0"
    plog = open_log(path, COMPACT)
    rng = random.Random(13)
    written = fill(plog, 30, 20, rng=rng, batch=10)
    seal(plog)
    # A first pass leaves small cleaned segments that the next pass merges, so the crashing
    # swap replaces several segments at once.
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    written += fill(plog, 30, 20, rng=rng, batch=10)
    seal(plog)
    before = read_all(plog)
    crashing = LogCleaner(lambda: [plog], swap_hook=crash_at(step))
    with pytest.raises(Crash):
        crashing.clean_once(NOW)
    names = os.listdir(path)
    if step == "cleaned":
        assert any(n.endswith(".log" + CLEANED_SUFFIX) for n in names)
    else:
        assert any(n.endswith(".log.swap") for n in names)
    # The process dies here: the log object is abandoned (never closed) and the directory
    # is opened afresh.
    reopened = open_log(path, COMPACT, clean=False)
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned", ".deleted"))]
    rows = read_all(reopened)
    assert_increasing(rows)
    originals = {r[0]: r for r in written}
    assert all(originals[r[0]] == r for r in rows)  # every record is an original one
    latest = latest_per_key(written)
    assert set(latest.values()) <= set(rows)  # nothing that matters was lost
    if step == "cleaned":
        assert rows == before  # rolled back
    else:
        # Rolled forward: the swapped segment replaced what it covers.
        assert len(rows) <= len(before)
    # The log cleans on normally afterwards.
    clean_all(LogCleaner(lambda: [reopened]), NOW)
    assert read_all(reopened) == sorted(latest.values())
    reopened.close()


def test_leftover_swap_of_an_emptied_segment_replaces_it(tmp_path):
    path = tmp_path / "orders-0"
    plog = open_log(path, COMPACT)
    append(plog, records_batch([(b"a", b"1"), (b"b", b"1")]))
    plog.roll()
    append(plog, records_batch([(b"a", b"2"), (b"b", b"2")]))
    seal(plog)
    # As a crash after renaming to .swap leaves it: an emptied segment 0 about to replace
    # the old one.
    swap = LogSegment.create(str(path), 0, index_interval_bytes=4096, max_index_bytes=1024,
                             suffix=".swap")
    swap.close()
    plog.close()
    reopened = open_log(path, COMPACT, clean=False)
    assert [(r[0], r[2]) for r in read_all(reopened)] == [(2, b"2"), (3, b"2")]
    assert reopened.segment_base_offsets == [0, 2, 4]
    reopened.close()


def test_swap_is_refused_when_the_log_changed(tmp_path):
    plog = open_log(tmp_path / "orders-0", COMPACT)
    fill(plog, 100, 3, rng=random.Random(1))
    seal(plog)
    view = plog.cleaner_view()
    plog.truncate_to(50)
    new = LogSegment.create(plog.dir_path, 0, index_interval_bytes=4096, max_index_bytes=1024,
                            suffix=CLEANED_SUFFIX)
    assert not plog.replace_segments(new, view.segments[:1], view.generation)
    new.discard()
    assert plog.log_end_offset == 50
    assert len(read_all(plog)) == 50
    plog.close()


def test_readers_of_replaced_segments_keep_working(tmp_path):
    plog = open_log(tmp_path / "orders-0", COMPACT)  # file.delete.delay.ms=0: unlinked at once
    fill(plog, 50, 10, rng=random.Random(4))
    seal(plog)
    held = plog.read(0, 1 << 20, max_offset=None, min_one_batch=True)
    data = held.read_bytes()
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "orders-0"))
    assert held.read_bytes() == data
    plog.close()


# -- producers -------------------------------------------------------------------------------


PID = 777


def test_idempotent_producer_state_survives_cleaning(tmp_path):
    path = tmp_path / "orders-0"
    plog = open_log(path, COMPACT)
    seq = 0
    for i in range(6):
        rows = [(b"p%d" % k, b"v%d" % i) for k in range(5)]
        append(plog, records_batch(rows, producer_id=PID, producer_epoch=0, base_sequence=seq))
        seq += len(rows)
    last_batch = records_batch([(b"p%d" % k, b"v5") for k in range(5)], producer_id=PID,
                               producer_epoch=0, base_sequence=seq - 5)
    # Another producer overwrites every key the idempotent one wrote.
    append(plog, records_batch([(b"p%d" % k, b"later") for k in range(5)]))
    seal(plog)
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    producer_batches = [h for h in all_batches(plog) if h.producer_id == PID]
    # Only its newest batch is left (superseded, but kept whole for the producer state).
    assert [(h.base_offset, h.base_sequence, h.record_count) for h in producer_batches] == [
        (25, 25, 5)]
    assert latest_per_key(read_all(plog))[b"p0"][2] == b"later"
    plog.close()
    # Producer state is rebuilt from the log alone (no snapshots): retries still dedupe.
    for name in os.listdir(path):
        if name.endswith(".snapshot"):
            os.remove(path / name)
    plog = open_log(path, COMPACT)
    dup = append(plog, last_batch)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (25, 29)
    info = append(plog, records_batch([(b"p0", b"next")], producer_id=PID, producer_epoch=0,
                                      base_sequence=seq))
    assert not info.duplicate
    plog.close()


def test_control_batches_are_kept(tmp_path):
    plog = open_log(tmp_path / "orders-0", COMPACT)
    append(plog, records_batch([(b"k", b"1")]))
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None, NOW)],
                          producer_id=9, producer_epoch=0, is_control=True,
                          is_transactional=True)
    buf = bytearray(control)
    plog.append_as_leader(buf, headers_of(buf), leader_epoch=0, log_append_time_ms=None)
    append(plog, records_batch([(b"k", b"2")]))
    seal(plog)
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    batches = all_batches(plog)
    assert [(h.base_offset, h.is_control) for h in batches] == [(1, True), (2, False)]
    plog.close()


# -- running in the broker -------------------------------------------------------------------


def test_log_manager_runs_the_cleaner_in_the_background(tmp_path):
    cfg = config(cleanup_policy=("compact",), segment_bytes=4096)
    m = LogManager([str(tmp_path / "data")], default_config=cfg,
                   cleaner_config=CleanerConfig(backoff_ms=20))
    m.load()
    assert m.cleaner.running
    plog = m.create("orders", 0, uuid.uuid4(), cfg)
    written = fill(plog, 40, 10, rng=random.Random(8))
    seal(plog)
    deadline = time.monotonic() + 10
    while m.cleaner.checkpoint_of(plog) != plog.segment_base_offsets[-1]:
        assert time.monotonic() < deadline, "the cleaner did not run"
        time.sleep(0.02)
    assert read_all(plog) == sorted(latest_per_key(written).values())
    m.shutdown()
    assert not m.cleaner.running
    checkpoint = Path(tmp_path / "data" / CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert f"orders 0 {written[-1][0] + 1}" in checkpoint

    # After a restart the checkpoint says the log is clean; deleting the log forgets it.
    m = LogManager([str(tmp_path / "data")], default_config=cfg,
                   cleaner_config=CleanerConfig(enable=False))
    m.load()
    assert not m.cleaner.running
    plog = m.get("orders", 0)
    assert m.cleaner.checkpoint_of(plog) == written[-1][0] + 1
    assert m.cleaner.clean_once() is None
    m.delete("orders", 0)
    assert Path(tmp_path / "data" / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
    m.shutdown()


def test_cleaning_runs_alongside_appends_and_reads(tmp_path):
    cfg = config(cleanup_policy=("compact",), segment_bytes=2048, min_cleanable_dirty_ratio=0.0)
    plog = open_log(tmp_path / "orders-0", cfg)
    cleaner = LogCleaner(lambda: [plog], CleanerConfig(threads=2, backoff_ms=1))
    cleaner.start()
    written: list[Row] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                assert_increasing(read_all(plog))
                time.sleep(0.001)  # leave the writer room
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    rng = random.Random(17)
    try:
        for _ in range(40):
            written += fill(plog, 30, 3, rng=rng, batch=9)
            plog.high_watermark = plog.log_end_offset
    finally:
        done.set()
        t.join()
        cleaner.shutdown()
    assert not errors
    seal(plog)
    clean_all(cleaner, NOW)
    assert read_all(plog) == sorted(latest_per_key(written).values())
    plog.close()


def test_checkpoint_follows_truncation(tmp_path):
    plog = open_log(tmp_path / "orders-0", COMPACT)
    rng = random.Random(9)
    fill(plog, 50, 4, rng=rng)
    seal(plog)
    cleaner = LogCleaner(lambda: [plog])
    plog.truncation_listener = cleaner.note_truncation
    end = cleaner.clean_once(NOW).end_offset
    plog.truncate_to(end - 20)
    # The lowered checkpoint is on disk right away (a crash now must not trust the old one).
    assert plog.log_end_offset <= end - 20
    assert read_offsets(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)) == {
        ("orders", 0): plog.log_end_offset}
    written = fill(plog, 50, 4, rng=rng)
    seal(plog)
    result = cleaner.clean_once(NOW)
    assert result is not None and result.first_dirty_offset <= end - 20
    rows = read_all(plog)
    assert_increasing(rows)
    latest = latest_per_key(written)
    assert all(latest[r[1]] == r for r in rows if r[1] in latest)
    plog.close()


def test_records_without_keys_are_dropped(tmp_path):
    plog = open_log(tmp_path / "orders-0", COMPACT)
    append(plog, make_batch(5))  # no keys
    append(plog, records_batch([(b"x", b"1")]))
    seal(plog)
    assert LogCleaner(lambda: [plog]).clean_once(NOW) is not None
    assert [(r[0], r[1]) for r in read_all(plog)] == [(5, b"x")]
    assert headers_of(plog.read_batches(0, 1 << 20))[0].base_offset == 5
    plog.close()
