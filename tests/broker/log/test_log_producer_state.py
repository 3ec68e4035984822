"""Idempotent producer deduplication and sequence checks, across restarts and crashes."""

from __future__ import annotations

import os
import time

import pytest
from log_helpers import append, config, make_batch, open_log

from moldau.broker.log.producer_state import ProducerStateManager
from moldau.errors import ErrorCode, KafkaError

PID = 4242
# Producers idle for longer than producer.id.expiration.ms (judged by their batches'
# timestamps) are forgotten at load, so the batches here carry current timestamps.
NOW = int(time.time() * 1000)


def idem(seq: int, count: int = 2, *, epoch: int = 0, pid: int = PID, ts: int = NOW) -> bytes:
    return make_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, ts=ts)


def error_of(plog, batch) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        append(plog, batch)
    return e.value.code


def test_duplicate_batch_is_not_appended_again(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    first = append(plog, idem(0))
    second = append(plog, idem(2, 3))
    leo = plog.log_end_offset
    dup = append(plog, idem(0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    dup = append(plog, idem(2, 3))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (2, 4)
    assert plog.log_end_offset == leo
    assert not first.duplicate and not second.duplicate
    plog.close()


def test_only_the_last_five_batches_are_remembered(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    for i in range(7):
        append(plog, idem(i, 1))
    assert append(plog, idem(2, 1)).duplicate
    # Sequence 1 has left the window: no longer a duplicate, and out of order.
    assert error_of(plog, idem(1, 1)) == ErrorCode.out_of_order_sequence_number
    plog.close()


def test_sequence_rules(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    # No state: any sequence goes, as in Kafka since KIP-360 (the state may have gone with
    # the records); from there on the sequence is checked.
    append(plog, idem(5, pid=9))
    assert error_of(plog, idem(8, pid=9)) == ErrorCode.out_of_order_sequence_number
    append(plog, idem(7, pid=9))
    append(plog, idem(0))
    assert error_of(plog, idem(3)) == ErrorCode.out_of_order_sequence_number
    assert error_of(plog, idem(1)) == ErrorCode.out_of_order_sequence_number
    append(plog, idem(2))
    # A new epoch must start over at 0; an old epoch is fenced.
    assert error_of(plog, idem(4, epoch=1)) == ErrorCode.out_of_order_sequence_number
    append(plog, idem(0, epoch=1))
    assert error_of(plog, idem(4, epoch=0)) == ErrorCode.invalid_producer_epoch
    # Other producers and non-idempotent batches are independent.
    append(plog, idem(0, pid=7))
    append(plog, make_batch(3))
    plog.close()


def test_sequence_wraps_around(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, idem(0, 1))
    state = plog.producer_state.producers[PID]
    state.batches[-1].last_seq = 2**31 - 1  # as if the producer had sent 2^31 records
    append(plog, idem(0, 1))
    assert plog.log_end_offset == 2
    plog.close()


def test_state_survives_clean_restart(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    for i in range(3):
        append(plog, idem(2 * i))
    plog.close()
    assert any(n.endswith(".snapshot") for n in os.listdir(tmp_path / "orders-0"))
    again = open_log(tmp_path / "orders-0")
    dup = append(again, idem(4))
    assert dup.duplicate and dup.first_offset == 4
    assert error_of(again, idem(7)) == ErrorCode.out_of_order_sequence_number
    append(again, idem(6))
    again.close()


@pytest.mark.parametrize("keep_snapshots", [True, False])
def test_state_survives_a_crash(tmp_path, keep_snapshots):
    cfg = config(segment_bytes=300)
    plog = open_log(tmp_path / "orders-0", cfg)
    for i in range(12):
        append(plog, idem(2 * i, ts=NOW + i))
    assert plog.num_segments > 2
    leo = plog.log_end_offset
    # Crash: no close, files left as they are (the OS still has the writes). Roll-time
    # snapshots cover part of the log; without them the whole log is scanned.
    snaps = [n for n in os.listdir(tmp_path / "orders-0") if n.endswith(".snapshot")]
    assert snaps
    if not keep_snapshots:
        for n in snaps:
            os.remove(tmp_path / "orders-0" / n)
    again = open_log(tmp_path / "orders-0", cfg, clean=False, recovery_point=0)
    assert again.log_end_offset == leo
    dup = append(again, idem(22))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (22, 23)
    dup = append(again, idem(16))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (16, 17)
    assert error_of(again, idem(30)) == ErrorCode.out_of_order_sequence_number
    append(again, idem(24))
    again.close()
    del plog  # the "crashed" instance is abandoned, never closed


def test_corrupt_snapshot_falls_back_to_scanning(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    append(plog, idem(0))
    append(plog, idem(2))
    plog.close()
    snaps = [n for n in os.listdir(tmp_path / "orders-0") if n.endswith(".snapshot")]
    assert snaps
    for n in snaps:
        path = tmp_path / "orders-0" / n
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    again = open_log(tmp_path / "orders-0")
    assert append(again, idem(2)).duplicate
    again.close()


def test_snapshot_round_trip_and_expiry(tmp_path):
    mgr = ProducerStateManager(str(tmp_path), expiration_ms=1_000)
    buf = bytearray(idem(0, 3, ts=500) + idem(0, 1, pid=9, ts=5_000))
    from log_helpers import headers_of
    for h in headers_of(buf):
        mgr.record(h)
    mgr.map_end_offset = 4
    mgr.take_snapshot()
    other = ProducerStateManager(str(tmp_path), expiration_ms=1_000)
    assert other.load(0, 4) == 4
    assert other.producers.keys() == {PID, 9}
    assert other.producers[PID].batches[-1].last_seq == 2
    assert other.remove_expired(5_600) == 1
    assert other.producers.keys() == {9}
    # Snapshots past the log end are dropped.
    assert ProducerStateManager(str(tmp_path), 1_000).load(0, 3) == 0
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".snapshot")]
