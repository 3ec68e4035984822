"""Append, read, roll and index lookups of PartitionLog."""

from __future__ import annotations

import os

import pytest
from log_helpers import SMALL, append, config, headers_of, make_batch, open_log, with_offsets

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import compute_crc, parse_header


def test_append_assigns_offsets_and_reads_back_byte_for_byte(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    batches = [make_batch(3), make_batch(1), make_batch(5)]
    infos = [append(plog, b) for b in batches]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 3), (4, 8)]
    assert not any(i.duplicate for i in infos)
    assert plog.log_end_offset == 9
    expected = b"".join(with_offsets(b, base) for b, base in zip(batches, (0, 3, 4),
                                                                  strict=True))
    assert plog.read_batches(0, 1 << 20) == expected
    # The CRC still matches: baseOffset and the leader epoch are outside it.
    pos = 0
    for h in headers_of(expected):
        assert compute_crc(expected, pos, h.size) == h.crc
        pos += h.size
    plog.close()


def test_multiple_batches_in_one_append(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    info = append(plog, make_batch(2), make_batch(3))
    assert (info.first_offset, info.last_offset) == (0, 4)
    hs = headers_of(plog.read_batches(0, 1 << 20))
    assert [(h.base_offset, h.last_offset) for h in hs] == [(0, 1), (2, 4)]
    plog.close()


def test_leader_epoch_is_stamped_and_checkpointed(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, make_batch(2), epoch=3)
    append(plog, make_batch(2), epoch=3)
    append(plog, make_batch(1), epoch=5)
    hs = headers_of(plog.read_batches(0, 1 << 20))
    assert [h.partition_leader_epoch for h in hs] == [3, 3, 5]
    text = (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n3 0\n5 4\n"
    assert plog.end_offset_for_epoch(3) == (3, 4)
    assert plog.end_offset_for_epoch(5) == (5, 5)
    assert plog.end_offset_for_epoch(4) == (3, 4)
    assert plog.end_offset_for_epoch(9) == (-1, -1)
    plog.close()


def test_log_append_time_is_applied(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    info = append(plog, make_batch(3, ts=10), log_append_time=777)
    assert info.log_append_time_ms == 777
    data = plog.read_batches(0, 1 << 20)
    h = parse_header(data)
    assert h.log_append_time and h.max_timestamp == 777
    assert compute_crc(data, 0, h.size) == h.crc
    assert plog.offset_for_timestamp(700) == (0, 777)
    plog.close()


def test_roll_by_size(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    batch = make_batch(4, value=b"x" * 40)
    for _ in range(20):
        append(plog, batch)
    assert plog.num_segments > 3
    names = sorted(os.listdir(tmp_path / "orders-0"))
    for base in plog.segment_base_offsets:
        assert f"{base:020d}.log" in names
        assert f"{base:020d}.index" in names
        assert f"{base:020d}.timeindex" in names
        assert os.path.getsize(tmp_path / "orders-0" / f"{base:020d}.log") <= 1000
    # One roll per full segment, a producer snapshot at each roll.
    assert any(n.endswith(".snapshot") for n in names)
    assert plog.read_batches(0, 1 << 20)[:len(batch)] == with_offsets(batch, 0)
    plog.close()



def test_roll_flush_can_run_in_the_background(tmp_path):
    """With a `background` runner the completed segment's fsync is handed to it instead of
    running inside the append (the broker does this for appends on its event loop)."""
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    batch = make_batch(4, value=b"x" * 40)
    deferred: list = []
    for _ in range(20):
        buf = bytearray(batch)
        plog.append_as_leader(buf, headers_of(buf), leader_epoch=0, log_append_time_ms=None,
                              background=deferred.append)
    assert plog.num_segments > 3 and len(deferred) == plog.num_segments - 1
    assert plog.recovery_point == 0  # nothing flushed yet
    for flush in deferred:
        flush()
    assert plog.recovery_point == plog.segment_base_offsets[-1]
    plog.close()

def test_roll_by_time_uses_the_first_batch_timestamp(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_ms=1000))
    append(plog, make_batch(1, ts=5_000))
    append(plog, make_batch(1, ts=5_900))
    assert plog.num_segments == 1
    append(plog, make_batch(1, ts=6_001))
    assert plog.segment_base_offsets == [0, 2]
    append(plog, make_batch(1, ts=6_500))
    assert plog.segment_base_offsets == [0, 2]
    plog.close()


def test_roll_when_index_is_full(tmp_path):
    plog = open_log(tmp_path / "orders-0",
                    config(segment_index_bytes=8 * 3, index_interval_bytes=0,
                           segment_bytes=1 << 20))
    for _ in range(10):
        append(plog, make_batch(1))
    # Three entries fit; the first batch of a segment gets none: a roll every 4 batches.
    assert plog.segment_base_offsets == [0, 4, 8]
    assert plog.read_batches(5, 1 << 20).count(b"value0") == 3
    plog.close()


def test_every_offset_is_found_across_segments(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=3000, index_interval_bytes=100))
    sizes = [1 + (i * 7) % 5 for i in range(120)]
    bases = [append(plog, make_batch(n, value=b"v" * (i % 30))).first_offset
             for i, n in enumerate(sizes)]
    assert plog.num_segments > 5
    for base, n in zip(bases, sizes, strict=True):
        for offset in range(base, base + n):
            h = parse_header(plog.read_batches(offset, 1))
            assert h.base_offset == base, offset
            assert h.last_offset == base + n - 1
    plog.close()


def test_read_limits(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1 << 20))
    b = make_batch(2, value=b"y" * 100)
    for _ in range(5):
        append(plog, b)
    size = len(b)
    assert plog.high_watermark == 0  # the broker moves it, not the append
    plog.high_watermark = plog.log_end_offset
    # max_bytes cuts inside a batch: the partial trailing batch is returned as is.
    r = plog.read(0, size + 10, max_offset=None, min_one_batch=True)
    assert r.size == size + 10
    assert (r.log_end_offset, r.log_start_offset, r.high_watermark) == (10, 0, 10)
    # min_one_batch returns the whole first batch even when max_bytes is smaller.
    assert plog.read(2, 10, max_offset=None, min_one_batch=True).size == size
    assert plog.read(2, 10, max_offset=None, min_one_batch=False).size == 10
    # max_offset is exclusive and bounds at the batch boundary.
    plog.high_watermark = 4
    r = plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True)
    assert r.size == 2 * size
    assert plog.read(4, 1 << 20, max_offset=4, min_one_batch=True).slices == []
    # At the log end: empty; past it or below the start: out of range.
    assert plog.read(10, 1 << 20, max_offset=None, min_one_batch=True).slices == []
    with pytest.raises(KafkaError) as e:
        plog.read(11, 100, max_offset=None, min_one_batch=True)
    assert e.value.code == ErrorCode.offset_out_of_range
    with pytest.raises(KafkaError):
        plog.read(-1, 100, max_offset=None, min_one_batch=True)
    plog.close()


def test_reads_stay_in_one_segment_and_slices_are_files(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=600))
    b = make_batch(1, value=b"z" * 200)
    for _ in range(6):
        append(plog, b)
    assert plog.num_segments >= 3
    r = plog.read(0, 1 << 20, max_offset=None, min_one_batch=True)
    assert len(r.slices) == 1
    s = r.slices[0]
    assert s.position == 0 and s.size % len(b) == 0 and s.size < 6 * len(b)
    assert s.file.fileno() >= 0 and "b" in s.file.mode
    assert os.pread(s.file.fileno(), s.size, s.position) == s.read()
    plog.close()


def test_high_watermark_is_clamped(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, make_batch(3))
    plog.high_watermark = 99
    assert plog.high_watermark == 3
    plog.high_watermark = -5
    assert plog.high_watermark == 0
    plog.close()


def test_tail_reads_follow_appends(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=700))
    for i in range(40):
        info = append(plog, make_batch(2, value=b"p" * 50))
        plog.high_watermark = plog.log_end_offset
        data = plog.read(info.first_offset, 1 << 20, max_offset=plog.high_watermark,
                         min_one_batch=True).read_bytes()
        h = parse_header(data)
        assert h.base_offset == info.first_offset and len(data) == h.size, i
    plog.close()


def test_reopen_after_clean_close_keeps_everything(tmp_path):
    plog = open_log(tmp_path / "orders-0", SMALL)
    for i in range(50):
        append(plog, make_batch(1 + i % 3, ts=1000 + i))
    before = plog.read_batches(0, 1 << 20)
    leo, segments = plog.log_end_offset, plog.segment_base_offsets
    plog.close()
    again = open_log(tmp_path / "orders-0", SMALL)
    assert again.log_end_offset == leo
    assert again.segment_base_offsets == segments
    assert again.read_batches(0, 1 << 20) == before
    assert again.offset_of_max_timestamp() == (leo - 1, 1050)
    again.close()


def test_closed_log_refuses_work(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    plog.close()
    with pytest.raises(KafkaError) as e:
        append(plog, make_batch(1))
    assert e.value.code == ErrorCode.kafka_storage_error


def test_flush_messages_moves_the_recovery_point(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(flush_messages=3))
    append(plog, make_batch(2))
    assert plog.recovery_point == 0
    append(plog, make_batch(2))
    assert plog.recovery_point == 4  # 4 unflushed messages >= 3: flushed with the append
    append(plog, make_batch(1))
    assert plog.recovery_point == 4
    assert not plog.maybe_flush(0)  # flush.ms has not passed
    plog.flush()
    assert plog.recovery_point == 5
    plog.close()


def test_roll_flushes_the_previous_segment(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=500))
    for _ in range(8):
        append(plog, make_batch(2, value=b"f" * 60))
    assert plog.num_segments > 1
    assert plog.recovery_point == plog.segment_base_offsets[-1]
    plog.close()


def test_follower_append_and_truncation(tmp_path):
    leader = open_log(tmp_path / "leader-0")
    append(leader, make_batch(2), epoch=1)
    append(leader, make_batch(3), epoch=2)
    data = leader.read_batches(0, 1 << 20)
    follower = open_log(tmp_path / "orders-0")
    info = follower.append_as_follower(data, headers_of(data))
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert follower.read_batches(0, 1 << 20) == data
    assert follower.end_offset_for_epoch(1) == (1, 2)
    with pytest.raises(ValueError):
        follower.append_as_follower(data, headers_of(data))
    follower.truncate_to(2)
    assert follower.log_end_offset == 2
    assert follower.end_offset_for_epoch(2) == (-1, -1)
    leader.close()
    follower.close()


def test_truncating_at_the_log_end_forgets_epochs_starting_there(tmp_path):
    """As Kafka's truncateTo: no batch to remove, but an epoch begun (as leader) at the log
    end without records is dropped; older epochs stay."""
    plog = open_log(tmp_path / "orders-0")
    append(plog, make_batch(2), epoch=1)
    plog.assign_leader_epoch(3)
    assert plog.latest_epoch == 3
    plog.truncate_to(plog.log_end_offset)
    assert plog.log_end_offset == 2
    assert plog.latest_epoch == 1
    assert plog.end_offset_for_epoch(1) == (1, 2)
    plog.close()


def test_topic_id_is_kept_in_partition_metadata(tmp_path):
    import uuid
    topic_id = uuid.uuid4()
    plog = open_log(tmp_path / "orders-0", topic_id=topic_id)
    assert plog.topic_id == topic_id
    plog.close()
    again = open_log(tmp_path / "orders-0")
    assert again.topic_id == topic_id
    with pytest.raises(KafkaError) as e:
        again.set_topic_id(uuid.uuid4())
    assert e.value.code == ErrorCode.inconsistent_topic_id
    again.close()
    with pytest.raises(KafkaError):
        open_log(tmp_path / "orders-0", topic_id=uuid.uuid4())
