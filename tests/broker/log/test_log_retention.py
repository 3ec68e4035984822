"""Retention, DeleteRecords, truncation and deferred file deletion."""

from __future__ import annotations

import os
import time

import pytest
from log_helpers import append, config, make_batch, open_log, segment_files

from moldau.broker.log.segment import DeletionScheduler
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import parse_header


def fill(plog, batches: int, *, ts: int = 1_000, step: int = 1_000):
    for i in range(batches):
        append(plog, make_batch(2, ts=ts + i * step, value=b"r" * 150))
    plog.high_watermark = plog.log_end_offset


def test_retention_by_time_deletes_old_segments_only(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000, retention_ms=10_000))
    fill(plog, 12)
    bases = plog.segment_base_offsets
    assert len(bases) >= 4
    newest = 1_000 + 11 * 1_000 + 1
    # Nothing is old enough yet.
    assert plog.apply_retention(newest) == 0
    # Segments whose largest timestamp is more than 10 s before "now" go, oldest first.
    deleted = plog.apply_retention(newest + 10_000 - 3_000)
    assert deleted >= 1
    assert plog.segment_base_offsets == bases[deleted:]
    assert plog.log_start_offset == bases[deleted]
    assert segment_files(tmp_path / "orders-0")[0] == f"{bases[deleted]:020d}.log"
    with pytest.raises(KafkaError):
        plog.read(0, 100, max_offset=None, min_one_batch=True)
    plog.close()


def test_retention_of_the_only_segment_rolls_first(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(retention_ms=1_000))
    fill(plog, 3)
    assert plog.num_segments == 1
    assert plog.apply_retention(1_000_000) == 1
    assert plog.segment_base_offsets == [6]
    assert plog.log_start_offset == plog.log_end_offset == 6
    assert plog.read(6, 100, max_offset=None, min_one_batch=True).slices == []
    # An empty active segment is never deleted.
    assert plog.apply_retention(10_000_000) == 0
    append(plog, make_batch(1))
    assert plog.log_end_offset == 7
    plog.close()


def test_retention_waits_for_the_high_watermark(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000, retention_ms=1))
    fill(plog, 8)
    plog.high_watermark = 0
    assert plog.apply_retention(10**9) == 0
    plog.high_watermark = plog.segment_base_offsets[2]
    assert plog.apply_retention(10**9) == 2
    plog.close()


def test_retention_by_size(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000, retention_bytes=2500))
    fill(plog, 15)
    sizes = [os.path.getsize(tmp_path / "orders-0" / n)
             for n in segment_files(tmp_path / "orders-0")]
    total = sum(sizes)
    deleted = plog.apply_retention(0)
    assert deleted >= 1
    # Oldest first, only while what is left stays at or above the limit.
    assert total - sum(sizes[:deleted]) >= 2500
    assert total - sum(sizes[:deleted + 1]) < 2500
    assert plog.size_in_bytes == total - sum(sizes[:deleted])
    plog.close()


def test_no_retention_without_delete_policy(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000, retention_ms=1,
                                                    cleanup_policy=("compact",)))
    fill(plog, 10)
    assert plog.apply_retention(10**12) == 0
    plog.close()


def test_delete_records(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    fill(plog, 12)
    bases = plog.segment_base_offsets
    target = bases[2] + 1
    assert plog.delete_records(target) == target
    assert plog.log_start_offset == target
    assert plog.segment_base_offsets == bases[2:]
    # The batch holding the new start is still served whole; below it is out of range.
    assert parse_header(plog.read_batches(target, 1)).base_offset == bases[2]
    with pytest.raises(KafkaError) as e:
        plog.read(target - 1, 100, max_offset=None, min_one_batch=True)
    assert e.value.code == ErrorCode.offset_out_of_range
    # Never past the high watermark; moving backwards is a no-op.
    plog.high_watermark = plog.log_end_offset - 2
    with pytest.raises(KafkaError) as e:
        plog.delete_records(plog.log_end_offset)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert plog.delete_records(1) == target
    assert plog.offset_for_timestamp(0)[0] == target
    plog.close()
    again = open_log(tmp_path / "orders-0", config(segment_bytes=1000),
                     log_start_offset=target)
    assert again.log_start_offset == target
    again.close()


def test_deleted_segment_stays_readable_for_inflight_slices(tmp_path):
    scheduler = DeletionScheduler()
    cfg = config(segment_bytes=1000, retention_ms=1, file_delete_delay_ms=60_000)
    plog = open_log(tmp_path / "orders-0", cfg, scheduler=scheduler)
    fill(plog, 10)
    result = plog.read(0, 1 << 20, max_offset=None, min_one_batch=True)
    expected = result.read_bytes()
    base = plog.segment_base_offsets[0]
    assert plog.apply_retention(10**9) >= 1
    names = os.listdir(tmp_path / "orders-0")
    assert f"{base:020d}.log.deleted" in names and f"{base:020d}.log" not in names
    assert scheduler.pending >= 1
    # The file object in the slice is still open and readable.
    assert result.read_bytes() == expected
    scheduler.run_pending()
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "orders-0"))
    assert result.read_bytes() == expected
    plog.close()


def test_scheduled_deletion_runs_after_the_delay(tmp_path):
    scheduler = DeletionScheduler()
    done = []
    scheduler.schedule(50, lambda: done.append(time.monotonic()))
    start = time.monotonic()
    deadline = start + 5
    while not done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done and done[0] - start >= 0.04


def test_truncate_to(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=1000))
    fill(plog, 12)
    bases = plog.segment_base_offsets
    before = plog.read_batches(bases[1], 1 << 20)
    plog.truncate_to(bases[2] + 2)  # a batch boundary inside the third segment
    assert plog.log_end_offset == bases[2] + 2
    assert plog.segment_base_offsets == bases[:3]
    assert plog.high_watermark == bases[2] + 2
    assert plog.read_batches(bases[1], 1 << 20) == before
    info = append(plog, make_batch(1))
    assert info.first_offset == bases[2] + 2
    plog.truncate_to(1)  # inside the first batch: the whole batch goes
    assert plog.log_end_offset == 0
    assert plog.segment_base_offsets == [0]
    plog.close()
