"""ListOffsets lookups: offset_for_timestamp and offset_of_max_timestamp."""

from __future__ import annotations

import random

from log_helpers import append, config, make_batch, open_log

from moldau.records.batch import Compression


def brute_force(records: list[tuple[int, int]], target: int) -> tuple[int, int] | None:
    for offset, ts in records:
        if ts >= target:
            return offset, ts
    return None


def test_offset_for_timestamp_matches_a_linear_scan(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=2000, index_interval_bytes=150))
    records: list[tuple[int, int]] = []
    # Timestamps go up overall but not monotonically inside batches.
    for i in range(60):
        stamps = [10_000 + i * 100 + d for d in (30, 10, 50, 20)][: 1 + i % 4]
        info = append(plog, make_batch(timestamps=stamps, compression=Compression.GZIP * (i % 2)))
        records += [(info.first_offset + j, ts) for j, ts in enumerate(stamps)]
    assert plog.num_segments > 2
    for target in list(range(9_990, 16_100, 37)) + [0, 10_030, 15_950, 99_999]:
        assert plog.offset_for_timestamp(target) == brute_force(records, target), target
    plog.close()


def test_offset_for_timestamp_respects_log_start(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, make_batch(timestamps=[100, 500, 300]))
    append(plog, make_batch(timestamps=[200, 600]))
    plog.high_watermark = plog.log_end_offset
    assert plog.offset_for_timestamp(400) == (1, 500)
    plog.delete_records(2)
    assert plog.offset_for_timestamp(400) == (4, 600)
    assert plog.offset_for_timestamp(50) == (2, 300)
    assert plog.offset_for_timestamp(601) is None
    plog.close()


def test_offset_of_max_timestamp_is_the_exact_record(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    assert plog.offset_of_max_timestamp() is None
    append(plog, make_batch(timestamps=[10, 20, 30]))
    append(plog, make_batch(timestamps=[40, 900, 50, 900]))  # offsets 3..6
    for _ in range(10):
        append(plog, make_batch(timestamps=[60, 70], value=b"x" * 100))
    assert plog.num_segments > 1
    assert plog.offset_of_max_timestamp() == (4, 900)
    plog.close()
    again = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    assert again.offset_of_max_timestamp() == (4, 900)
    again.close()


def test_max_timestamp_with_log_append_time(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, make_batch(3), log_append_time=5_000)
    append(plog, make_batch(2), log_append_time=5_000)
    append(plog, make_batch(2), log_append_time=4_000)
    assert plog.offset_of_max_timestamp() == (0, 5_000)
    assert plog.offset_for_timestamp(4_500) == (0, 5_000)
    assert plog.offset_for_timestamp(5_001) is None
    plog.close()


def test_offset_for_timestamp_with_timestamps_going_backwards(tmp_path):
    rng = random.Random(7)
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1500, index_interval_bytes=100))
    records: list[tuple[int, int]] = []
    for _ in range(80):
        stamps = [rng.randrange(0, 5_000) for _ in range(rng.randrange(1, 5))]
        info = append(plog, make_batch(timestamps=stamps))
        records += [(info.first_offset + j, ts) for j, ts in enumerate(stamps)]
    for target in range(0, 5_100, 23):
        assert plog.offset_for_timestamp(target) == brute_force(records, target), target
    best = max(ts for _, ts in records)
    assert plog.offset_of_max_timestamp() == brute_force(records, best)
    plog.close()
