"""Transactions on a partition log: LSO, markers, the `.txnindex` files, their recovery."""

from __future__ import annotations

import os
import struct
import uuid

import pytest
from log_helpers import SMALL, append, config, headers_of, make_batch, open_log

from moldau.broker.log.cleaner import LogCleaner
from moldau.broker.log.log import PartitionLog
from moldau.broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from moldau.broker.log.txn_index import AbortedTxn
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import parse_header
from moldau.records.control import ControlType, EndTxnMarker, build_end_txn_marker

P1, P2 = 1000, 2000


def txn_batch(pid: int, seq: int, count: int, *, epoch: int = 0) -> bytes:
    return make_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                      transactional=True, value=b"t" * 40)


def end_txn(plog: PartitionLog, pid: int, *, commit: bool, epoch: int = 0,
            coordinator_epoch: int = 0, replicate: bool = True) -> int:
    buf = bytearray(build_end_txn_marker(pid, epoch, coordinator_epoch, commit=commit,
                                         timestamp_ms=5_000))
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    info = plog.append_as_leader(buf, [parse_header(buf)], leader_epoch=0,
                                 log_append_time_ms=None,
                                 marker=EndTxnMarker(kind, coordinator_epoch))
    if replicate:
        plog.high_watermark = plog.log_end_offset
    return info.first_offset


def produce(plog: PartitionLog, batch: bytes) -> int:
    info = append(plog, batch)
    plog.high_watermark = plog.log_end_offset
    return info.first_offset


def txnindex_bytes(plog: PartitionLog) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(plog.dir_path)):
        if name.endswith(".txnindex"):
            with open(os.path.join(plog.dir_path, name), "rb") as f:
                out[name] = f.read()
    return out


def two_transactions(plog: PartitionLog) -> None:
    """P1 at 0-1 and P2 at 2-4 open, a plain batch at 5, P1 commits at 6, P2 aborts at 7."""
    assert produce(plog, txn_batch(P1, 0, 2)) == 0
    assert plog.last_stable_offset == 0
    assert produce(plog, txn_batch(P2, 0, 3)) == 2
    assert plog.last_stable_offset == 0
    assert produce(plog, make_batch(1)) == 5
    assert plog.last_stable_offset == 0
    assert end_txn(plog, P1, commit=True) == 6
    assert plog.last_stable_offset == 2  # P2's transaction is still open
    assert end_txn(plog, P2, commit=False) == 7
    assert plog.last_stable_offset == 8


def test_lso_follows_the_oldest_open_transaction_and_aborts_are_indexed(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    two_transactions(plog)
    # Kafka's layout: version, producer id, first offset, last offset, last stable offset.
    assert txnindex_bytes(plog) == {
        f"{0:020d}.txnindex": struct.pack(">hqqqq", 0, P2, 2, 7, 8)}
    result = plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                       read_committed=True)
    assert result.last_stable_offset == 8
    assert result.aborted == [AbortedTxn(P2, 2, 7, 8)]
    # READ_UNCOMMITTED gets no aborted list, and past the committed one nothing overlaps.
    assert plog.read(0, 1 << 20, max_offset=8, min_one_batch=True).aborted is None
    assert plog.read(8, 1 << 20, max_offset=8, min_one_batch=True,
                     read_committed=True).aborted == []
    plog.close()


def test_an_abort_records_the_start_of_a_transaction_still_open_as_its_stable_offset(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, txn_batch(P1, 0, 2))  # 0-1, stays open
    produce(plog, txn_batch(P2, 0, 3))  # 2-4
    assert end_txn(plog, P2, commit=False) == 5
    assert plog.last_stable_offset == 0
    assert txnindex_bytes(plog) == {
        f"{0:020d}.txnindex": struct.pack(">hqqqq", 0, P2, 2, 5, 0)}
    result = plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                       read_committed=True)
    assert result.slices == [] and result.aborted == []  # nothing below the LSO yet
    end_txn(plog, P1, commit=True)
    result = plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                       read_committed=True)
    assert result.aborted == [AbortedTxn(P2, 2, 5, 0)]
    plog.close()


def test_read_committed_stops_at_the_lso_while_a_transaction_is_open(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, make_batch(2))
    produce(plog, txn_batch(P1, 0, 2))
    produce(plog, make_batch(1))
    assert plog.last_stable_offset == 2 and plog.high_watermark == 5
    committed = plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                          read_committed=True)
    assert [h.base_offset for h in headers_of(committed.read_bytes())] == [0]
    assert plog.read(2, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                     read_committed=True).slices == []
    end_txn(plog, P1, commit=True)
    committed = plog.read(2, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                          read_committed=True)
    assert [h.base_offset for h in headers_of(committed.read_bytes())] == [2, 4, 5]
    plog.close()


def test_a_marker_is_unstable_until_replicated(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, txn_batch(P1, 0, 2))
    produce(plog, make_batch(3))
    plog.high_watermark = 1
    end_txn(plog, P1, commit=True, replicate=False)  # marker at 5
    plog.high_watermark = 4
    assert plog.last_stable_offset == 0  # the commit is not replicated yet
    plog.high_watermark = 6
    assert plog.last_stable_offset == 6
    plog.close()


def test_markers_check_the_producer_and_coordinator_epochs(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, txn_batch(P1, 0, 1, epoch=3))
    end_txn(plog, P1, commit=True, epoch=3, coordinator_epoch=5)
    with pytest.raises(KafkaError) as stale:
        end_txn(plog, P1, commit=False, epoch=2, coordinator_epoch=5)
    assert stale.value.code is ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as fenced:
        end_txn(plog, P1, commit=False, epoch=3, coordinator_epoch=4)
    assert fenced.value.code is ErrorCode.transaction_coordinator_fenced
    assert plog.log_end_offset == 2
    plog.close()


def test_a_plain_batch_from_a_producer_in_a_transaction_is_rejected(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, txn_batch(P1, 0, 1))
    with pytest.raises(KafkaError) as err:
        produce(plog, make_batch(1, producer_id=P1, producer_epoch=0, base_sequence=1))
    assert err.value.code is ErrorCode.invalid_txn_state
    plog.close()


def test_index_and_lso_are_rebuilt_when_the_indexes_are_lost(tmp_path):
    path = tmp_path / "orders-0"
    plog = open_log(path, config(segment_bytes=600))
    two_transactions(plog)
    produce(plog, txn_batch(P1, 2, 1))  # P1 opens a new transaction at 8
    for _ in range(3):
        produce(plog, make_batch(2, value=b"x" * 60))
    assert plog.num_segments > 2
    before, lso = txnindex_bytes(plog), plog.last_stable_offset
    assert lso == 8
    plog.close()
    for name in os.listdir(path):
        if name.endswith((".index", ".txnindex")):
            os.remove(path / name)
    plog = open_log(path, config(segment_bytes=600))
    assert txnindex_bytes(plog) == before
    assert plog.last_stable_offset == lso
    plog.close()


def test_crash_recovery_rebuilds_the_index_of_what_survives(tmp_path):
    logs = LogManager([str(tmp_path)], default_config=SMALL)
    logs.load()
    plog = logs.create("orders", 0, uuid.uuid4(), SMALL)
    two_transactions(plog)
    produce(plog, txn_batch(P1, 2, 2))  # P1's second transaction: 8-9
    end_txn(plog, P1, commit=False)  # aborted at 10, entry (P1, 8, 10, 11)
    produce(plog, make_batch(1))
    assert len(txnindex_bytes(plog)[f"{0:020d}.txnindex"]) == 2 * 34
    logs.shutdown()
    # A crash: no clean-shutdown marker, the last batch torn, P1's abort never durable.
    os.remove(tmp_path / CLEAN_SHUTDOWN_FILE)
    log_file = tmp_path / "orders-0" / f"{0:020d}.log"
    os.truncate(log_file, os.path.getsize(log_file) - len(make_batch(1)) - 5)
    logs = LogManager([str(tmp_path)], default_config=SMALL)
    (plog,) = logs.load()
    assert plog.log_end_offset == 10
    assert txnindex_bytes(plog) == {
        f"{0:020d}.txnindex": struct.pack(">hqqqq", 0, P2, 2, 7, 8)}
    plog.high_watermark = plog.log_end_offset
    assert plog.last_stable_offset == 8  # P1's transaction from 8 is open again
    logs.shutdown()


def test_snapshot_keeps_an_open_transaction_across_a_clean_restart(tmp_path):
    path = tmp_path / "orders-0"
    plog = open_log(path)
    produce(plog, make_batch(3))
    produce(plog, txn_batch(P2, 0, 2))
    plog.close()
    plog = open_log(path)
    assert plog.producer_state.first_unstable_offset() == 3
    assert plog.last_stable_offset == 3
    end_txn(plog, P2, commit=False)
    assert plog.last_stable_offset == 6
    assert txnindex_bytes(plog) == {
        f"{0:020d}.txnindex": struct.pack(">hqqqq", 0, P2, 3, 5, 6)}
    plog.close()


def test_truncation_drops_index_entries_past_the_new_end(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    two_transactions(plog)
    plog.truncate_to(7)
    assert txnindex_bytes(plog) == {}
    assert plog.producer_state.first_unstable_offset() == 2
    plog.close()


@pytest.mark.parametrize("how", ["DeleteRecords", "retention.ms"])
def test_retention_deletes_the_index_with_its_segment(tmp_path, how):
    path = tmp_path / "orders-0"
    plog = open_log(path, config(segment_bytes=600, retention_ms=60_000))
    two_transactions(plog)
    while plog.num_segments < 3:
        produce(plog, make_batch(2, value=b"x" * 60, ts=10**9))
    first = f"{0:020d}.txnindex"
    assert first in txnindex_bytes(plog)
    if how == "DeleteRecords":
        plog.delete_records(plog.segment_base_offsets[1])
    else:  # the first segment's newest record (the markers, at 5 s) is past retention.ms
        assert plog.apply_retention(5_000 + 60_001) >= 1
    assert plog.log_start_offset > 0
    assert not [n for n in os.listdir(path) if n.startswith(f"{0:020d}.")]
    plog.close()


def test_compaction_drops_aborted_records_then_their_marker_after_the_horizon(tmp_path):
    compact = config(cleanup_policy=("compact",), segment_bytes=600,
                     min_cleanable_dirty_ratio=0.01, delete_retention_ms=1_000)
    plog = open_log(tmp_path / "orders-0", compact)
    keyed = {"key": b"k", "value": b"v" * 30}
    produce(plog, make_batch(1, **keyed))  # 0: committed value of k
    produce(plog, make_batch(1, producer_id=P1, producer_epoch=0, base_sequence=0,
                             transactional=True, **keyed))  # 1: aborted, same key
    end_txn(plog, P1, commit=False)  # 2
    # P1's next transaction, so the aborted batch is not its newest (kept for dedup).
    produce(plog, make_batch(1, producer_id=P1, producer_epoch=0, base_sequence=1,
                             transactional=True, key=b"j"))  # 3
    end_txn(plog, P1, commit=True)  # 4
    while plog.num_segments < 3:
        produce(plog, make_batch(2, value=b"x" * 60, key=b"other"))
    before = txnindex_bytes(plog)
    cleaner = LogCleaner(lambda: [plog])
    now = 10**13
    assert cleaner.clean_once(now) is not None
    first = headers_of(plog.read_batches(0, 1 << 20))
    # The aborted record is gone without superseding offset 0; its marker stays for now.
    assert [h.base_offset for h in first[:4]] == [0, 2, 3, 4]
    assert first[1].is_control and first[3].is_control
    assert txnindex_bytes(plog) == before
    assert cleaner.clean_once(now + 999) is None
    # delete.retention.ms later the marker of the emptied transaction goes, with its entry;
    # the commit marker of a transaction that still has data stays.
    assert cleaner.clean_once(now + 1_000) is not None
    first = headers_of(plog.read_batches(0, 1 << 20))
    assert [h.base_offset for h in first[:3]] == [0, 3, 4]
    assert txnindex_bytes(plog) == {}
    assert plog.read(0, 1 << 20, max_offset=plog.high_watermark, min_one_batch=True,
                     read_committed=True).aborted == []
    plog.close()
    reopened = open_log(tmp_path / "orders-0", compact)
    assert reopened.last_stable_offset == reopened.log_end_offset
    reopened.close()


def test_a_fetch_lists_only_the_aborted_transactions_from_its_offset_on(tmp_path):
    plog = open_log(tmp_path / "orders-0")
    produce(plog, txn_batch(P2, 0, 3))  # 0-2
    end_txn(plog, P2, commit=False)  # 3
    produce(plog, txn_batch(P1, 0, 2))  # 4-5
    end_txn(plog, P1, commit=False)  # 6
    produce(plog, make_batch(1))  # 7
    listed = {start: plog.read(start, 1 << 20, max_offset=plog.high_watermark,
                               min_one_batch=True, read_committed=True).aborted
              for start in (0, 3, 4, 7)}
    assert listed == {0: [AbortedTxn(P2, 0, 3, 4), AbortedTxn(P1, 4, 6, 7)],
                      3: [AbortedTxn(P2, 0, 3, 4), AbortedTxn(P1, 4, 6, 7)],
                      4: [AbortedTxn(P1, 4, 6, 7)], 7: []}
    plog.close()


def test_active_producers_for_describe_producers(tmp_path):
    """What DescribeProducers reports: epoch, last sequence and timestamp, the coordinator
    epoch of the last marker, and the start of the ongoing transaction (-1 when none)."""
    plog = open_log(tmp_path / "orders-0")
    assert plog.active_producers() == []
    produce(plog, txn_batch(P1, 0, 2))
    produce(plog, txn_batch(P2, 0, 3, epoch=1))
    end_txn(plog, P1, commit=True, coordinator_epoch=7)
    produce(plog, make_batch(1))  # no producer id: not a producer to describe
    active = {p.producer_id: p for p in plog.active_producers()}
    assert {pid: (p.epoch, p.last_sequence, p.coordinator_epoch, p.txn_start_offset)
            for pid, p in active.items()} == {P1: (0, 1, 7, -1), P2: (1, 2, -1, 2)}
    assert active[P1].last_timestamp == 5_000  # the marker's
    assert active[P2].last_timestamp == 1_002  # the batch's newest record
    plog.close()


def verified_append(plog: PartitionLog, batch: bytes, guard: object) -> int:
    buf = bytearray(batch)
    info = plog.append_as_leader(buf, headers_of(buf), leader_epoch=0,
                                 log_append_time_ms=None, verify_txn=True,
                                 guard=guard)  # type: ignore[arg-type]
    plog.high_watermark = plog.log_end_offset
    return info.first_offset


def test_a_transaction_starts_only_with_the_producers_verification_guard(tmp_path):
    """KIP-890: the first transactional batch of a producer needs the guard of its
    verification; once the transaction is ongoing no guard is asked for."""
    plog = open_log(tmp_path / "orders-0")
    guard = plog.verification_guard(P1, 0)
    assert guard is not None and plog.verification_guard(P1, 0) is guard  # reused
    for wrong in (None, object()):
        with pytest.raises(KafkaError) as refused:
            verified_append(plog, txn_batch(P1, 0, 2), wrong)
        assert refused.value.code is ErrorCode.invalid_txn_state
    assert plog.log_end_offset == 0
    assert verified_append(plog, txn_batch(P1, 0, 2), guard) == 0
    assert plog.verification_guard(P1, 0) is None  # ongoing: nothing to verify
    assert verified_append(plog, txn_batch(P1, 2, 1), None) == 2
    # Without verification (a broker with it disabled, the coordinators' own writes) no
    # guard is needed.
    assert produce(plog, txn_batch(P2, 0, 1)) == 3


def test_a_marker_voids_a_verification_in_flight(tmp_path):
    """A guard obtained before the transaction's marker cannot start a transaction after it:
    the late write of an aborted transaction is refused."""
    plog = open_log(tmp_path / "orders-0")
    first = plog.verification_guard(P1, 0)
    assert verified_append(plog, txn_batch(P1, 0, 1), first) == 0
    late = plog.verification_guard(P2, 0)  # P2's verification is out ...
    assert late is not None
    end_txn(plog, P2, commit=False)  # ... when an abort for P2 is written
    with pytest.raises(KafkaError) as refused:
        verified_append(plog, txn_batch(P2, 0, 1), late)
    assert refused.value.code is ErrorCode.invalid_txn_state
    fresh = plog.verification_guard(P2, 0)
    assert fresh is not None and fresh is not late
    assert verified_append(plog, txn_batch(P2, 0, 1), fresh) == 2
