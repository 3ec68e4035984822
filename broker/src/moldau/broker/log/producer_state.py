"""Producer state of one partition: per producer id, its epoch, last 5 batches and the first
offset of its ongoing transaction.

Used to reject out-of-order batches, to answer a retried batch with the offsets it got the
first time instead of appending it again, and to find the last stable offset (the first
offset of the oldest ongoing transaction). The state is a function of the batch headers in the
log, so it can always be rebuilt by scanning headers; snapshots only make that scan short.

Snapshot file `<20-digit offset>.snapshot` holds the state of all batches below that offset.
Binary, big-endian:

    magic      4 bytes  b"MPSS"
    version    int16    1
    crc        uint32   CRC32C of every byte after this field
    offset     int64    the snapshot's end offset (same as in the name)
    count      int32    number of producers, then for each:
        producer_id       int64
        epoch             int16
        coordinator_epoch int32
        txn_first_offset  int64    first offset of the ongoing transaction, -1 if none
        last_timestamp    int64
        batch_count       int8     up to 5, oldest first, each:
            first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64 |
            timestamp int64
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from moldau.records.control import EndTxnMarker

from .checkpoint import atomic_write

log = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"MPSS"
_VERSION = 1
_PREFIX = struct.Struct(">4shI")
_BODY_HEAD = struct.Struct(">qi")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
INT32_MAX = 0x7FFFFFFF


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class VerificationGuard:
    """Proof that the transaction coordinator was asked, for one producer on this partition,
    whether the partition is in its ongoing transaction (KIP-890). A marker replaces the
    producer's guard, so an answer obtained before a transaction ended cannot let a late
    write start a new one."""

    __slots__ = ("created_ms",)

    def __init__(self, created_ms: int) -> None:
        self.created_ms = created_ms


class ActiveProducer(NamedTuple):
    """What DescribeProducers tells of one producer of the partition."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int  # first offset of its ongoing transaction; -1 when none


class CompletedTxn(NamedTuple):
    """A transaction a marker just ended: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == (0 if last_seq == INT32_MAX else last_seq + 1)


class ProducerStateManager:
    def __init__(self, dir_path: str, expiration_ms: int) -> None:
        self.dir_path = dir_path
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its ongoing transaction (kept apart from `producers`
        # so the last stable offset costs nothing when there are no transactions).
        self.ongoing: dict[int, int] = {}
        # Producer id -> the guard of a transaction verification (see VerificationGuard).
        self.verifying: dict[int, VerificationGuard] = {}
        # The state reflects every batch below this offset.
        self.map_end_offset = 0
        self.last_snapshot_offset: int | None = None

    # -- validation and updates (leader appends) ---------------------------------------------

    def has_ongoing_txn(self, producer_id: int, epoch: int) -> bool:
        entry = self.producers.get(producer_id)
        return producer_id in self.ongoing and entry is not None and entry.epoch == epoch

    def verification_guard(self, producer_id: int, epoch: int,
                           now_ms: int) -> VerificationGuard | None:
        """None when the producer's transaction is ongoing here (nothing to verify); else the
        guard its verified append must bring (the one in place, or a new one)."""
        if self.has_ongoing_txn(producer_id, epoch):
            return None
        guard = self.verifying.get(producer_id)
        if guard is None:
            guard = self.verifying[producer_id] = VerificationGuard(now_ms)
        return guard

    def check(self, batches: Iterable[BatchHeader], *, verify: bool = False,
              guard: VerificationGuard | None = None) -> BatchMetadata | None:
        """Validate the producer fields of an append before it is written.

        Returns the cached metadata when the append retries a batch already in the log (the
        caller must then append nothing); raises KafkaError for fenced or out-of-order batches.
        With `verify`, a transactional batch that would start a transaction here needs
        `guard` to be the producer's current one (INVALID_TXN_STATE otherwise).
        """
        # (epoch, last sequence) after the batches seen so far in this append.
        pending: dict[int, tuple[int, int]] = {}
        for h in batches:
            pid = h.producer_id
            if pid < 0 or h.is_control:
                continue
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_seq
            else:
                epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
            if epoch != NO_PRODUCER_EPOCH and h.producer_epoch < epoch:
                raise KafkaError(ErrorCode.invalid_producer_epoch,
                                 f"producer {pid} epoch {h.producer_epoch} is older than "
                                 f"the current epoch {epoch}")
            if h.base_sequence == NO_SEQUENCE:
                pending[pid] = (h.producer_epoch, last_seq)
                continue
            if h.producer_epoch == epoch and entry is not None and pid not in pending:
                dup = entry.find_duplicate(h.base_sequence, h.last_sequence)
                if dup is not None:
                    return dup
            if not h.is_transactional and pid in self.ongoing:
                raise KafkaError(ErrorCode.invalid_txn_state,
                                 f"Expected transactional write from producer {pid}: its "
                                 f"transaction from offset {self.ongoing[pid]} is ongoing")
            if verify and h.is_transactional and pid not in pending \
                    and not self.has_ongoing_txn(pid, h.producer_epoch) \
                    and (guard is None or self.verifying.get(pid) is not guard):
                raise KafkaError(ErrorCode.invalid_txn_state,
                                 f"Record of producer {pid} was not part of an ongoing "
                                 "transaction")
            self._check_sequence(pid, h, epoch, last_seq)
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return None

    @staticmethod
    def _check_sequence(pid: int, h: BatchHeader, epoch: int, last_seq: int) -> None:
        first_seq = h.base_sequence
        if h.producer_epoch != epoch:
            # As Kafka since KIP-360: a producer the partition holds no state for may go on at
            # any sequence (its state may have gone with its records: retention, DeleteRecords,
            # expiry). On UNKNOWN_PRODUCER_ID librdkafka resets its producer id, or stops with
            # a fatal error when a message in flight may already be stored.
            if first_seq != 0 and epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 f"producer {pid} epoch {h.producer_epoch} must start at "
                                 f"sequence 0, got {first_seq}")
        elif last_seq != NO_SEQUENCE and not _in_sequence(last_seq, first_seq):
            raise KafkaError(ErrorCode.out_of_order_sequence_number,
                             f"producer {pid}: sequence {first_seq} does not follow {last_seq}")

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks on a transaction marker before the leader writes it."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"Producer {producer_id}'s epoch {epoch} in the transaction "
                             f"marker is older than the current epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.transaction_coordinator_fenced,
                             f"Invalid coordinator epoch for producer {producer_id}: "
                             f"{coordinator_epoch} (zombie), {entry.coordinator_epoch} "
                             "(current)")

    def record(self, h: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply a batch written to the log (with final offsets and timestamps).

        `marker` is what a control batch carries; the transaction it ends is returned.
        """
        pid = h.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if h.producer_epoch > entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.is_control:
            if marker is None:
                return None
            # As Kafka: a marker with no transaction open still completes an (empty) one.
            first = entry.txn_first_offset if entry.txn_first_offset >= 0 else h.base_offset
            entry.txn_first_offset = -1
            entry.coordinator_epoch = marker.coordinator_epoch
            self.ongoing.pop(pid, None)
            self.verifying.pop(pid, None)
            return CompletedTxn(pid, first, h.base_offset, marker.is_abort)
        if h.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = h.base_offset
            self.ongoing[pid] = h.base_offset
        if h.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset,
                                               h.last_offset, h.max_timestamp))
        return None

    def active(self) -> list[ActiveProducer]:
        return [ActiveProducer(e.producer_id, e.epoch, e.last_seq, e.last_timestamp,
                               e.coordinator_epoch, e.txn_first_offset)
                for e in self.producers.values()]

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle longer than the expiration time with no open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in expired:
            del self.producers[pid]
        for pid in [pid for pid, guard in self.verifying.items()
                    if now_ms - guard.created_ms >= self.expiration_ms]:
            del self.verifying[pid]
        return len(expired)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an ongoing transaction."""
        return min(self.ongoing.values()) if self.ongoing else None

    def stable_offset_after(self, txn: CompletedTxn) -> int:
        """The last stable offset once `txn` is complete, ignoring the high watermark:
        what Kafka records with an aborted transaction in the index."""
        first = self.first_unstable_offset()
        return txn.last_offset + 1 if first is None else first

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.verifying.clear()
        self.map_end_offset = offset

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir_path):
            if name.endswith(SNAPSHOT_SUFFIX):
                with contextlib.suppress(ValueError):
                    out.append(int(name[:-len(SNAPSHOT_SUFFIX)]))
        return sorted(out)

    def take_snapshot(self) -> None:
        """Write the current state as `<map_end_offset>.snapshot`."""
        offset = self.map_end_offset
        if self.last_snapshot_offset == offset and os.path.exists(self._path(offset)):
            return
        atomic_write(self._path(offset), self._encode(offset))
        self.last_snapshot_offset = offset

    def load(self, log_start_offset: int, log_end_offset: int, *,
             at_most: int | None = None) -> int:
        """Load the newest valid snapshot at or below the log end (and `at_most`).

        Removes snapshots past the log end and unreadable ones. Returns the offset the caller
        must rebuild from by scanning batch headers up to the log end.
        """
        self.reset(log_start_offset)
        for offset in reversed(self.snapshot_offsets()):
            path = self._path(offset)
            if offset > log_end_offset:
                log.info("%s: removing producer snapshot past the log end %d", path,
                         log_end_offset)
                os.remove(path)
                continue
            if at_most is not None and offset > at_most:
                continue
            try:
                with open(path, "rb") as f:
                    self._decode(f.read(), offset)
            except (OSError, ValueError, struct.error) as e:
                log.warning("%s: discarding unreadable producer snapshot: %s", path, e)
                self.reset(log_start_offset)
                os.remove(path)
                continue
            self.map_end_offset = max(offset, log_start_offset)
            self.last_snapshot_offset = offset
            return self.map_end_offset
        return log_start_offset

    def delete_snapshots_below(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap < offset:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(snap))

    def delete_snapshots_above(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap > offset:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(snap))
        if self.last_snapshot_offset is not None and self.last_snapshot_offset > offset:
            self.last_snapshot_offset = None

    def _path(self, offset: int) -> str:
        return os.path.join(self.dir_path, snapshot_name(offset))

    def _encode(self, offset: int) -> bytes:
        parts = [_BODY_HEAD.pack(offset, len(self.producers))]
        for e in self.producers.values():
            parts.append(_PRODUCER.pack(e.producer_id, e.epoch, e.coordinator_epoch,
                                        e.txn_first_offset, e.last_timestamp, len(e.batches)))
            for b in e.batches:
                parts.append(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset,
                                         b.last_offset, b.timestamp))
        body = b"".join(parts)
        return _PREFIX.pack(_MAGIC, _VERSION, crc32c.crc32c(body)) + body

    def _decode(self, data: bytes, expected_offset: int) -> None:
        magic, version, crc = _PREFIX.unpack_from(data, 0)
        body = memoryview(data)[_PREFIX.size:]
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"unknown snapshot format {magic!r} v{version}")
        if crc32c.crc32c(body) != crc:
            raise ValueError("CRC mismatch")
        offset, count = _BODY_HEAD.unpack_from(body, 0)
        if offset != expected_offset:
            raise ValueError(f"snapshot says offset {offset}, file name {expected_offset}")
        pos = _BODY_HEAD.size
        producers: dict[int, ProducerEntry] = {}
        for _ in range(count):
            pid, epoch, coord, txn, last_ts, n = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            entry = ProducerEntry(pid, epoch, last_timestamp=last_ts, coordinator_epoch=coord,
                                  txn_first_offset=txn)
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
        if pos != len(body):
            raise ValueError("trailing bytes")
        self.producers = producers
        self.ongoing = {pid: e.txn_first_offset for pid, e in producers.items()
                        if e.txn_first_offset >= 0}
