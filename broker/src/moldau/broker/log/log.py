"""The log of one partition: a directory `<topic>-<partition>` of segments.

All mutation happens under one lock; fsync runs outside it (under a separate flush lock) so a
slow disk does not stall readers. The hot paths (append, read) parse batch headers only.

Reads return file regions (`FileSlice`) for sendfile. Segment files that a read may still be
using are never closed by deletion: their names get a `.deleted` suffix, they are unlinked after
`file.delete.delay.ms`, and the descriptor closes when the last reference goes away.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import random
import shutil
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import BinaryIO, NamedTuple

from moldau.errors import ErrorCode, KafkaError
from moldau.records import codec
from moldau.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    MAX_TIMESTAMP_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from moldau.records.control import EndTxnMarker, read_end_txn_marker

from .checkpoint import (
    PARTITION_METADATA,
    CheckpointError,
    fsync_dir,
    read_partition_metadata,
    write_partition_metadata,
)
from .config import LogConfig
from .leader_epoch import LeaderEpochCache
from .producer_state import (
    ActiveProducer,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
)
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    CorruptSegmentError,
    DeletionScheduler,
    LogSegment,
    default_scheduler,
    segment_file_name,
)
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

_POSITION_CACHE_SIZE = 64


class FileSlice(NamedTuple):
    """A region of a segment file to send as is (socket.sendfile / loop.sendfile)."""

    file: BinaryIO
    position: int
    size: int

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.size, self.position)


class LogReadResult(NamedTuple):
    slices: list[FileSlice]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    # READ_COMMITTED reads only: aborted transactions overlapping the data read.
    aborted: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slices)

    def read_bytes(self) -> bytes:
        """Copy the slices into memory (tests, and transports without sendfile)."""
        return b"".join(s.read() for s in self.slices)


class CleanerView(NamedTuple):
    """What the log cleaner needs to know about a log, taken at one moment under its lock."""

    segments: list[LogSegment]  # every segment, the active one last
    sizes: list[int]  # their sizes at that moment
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    first_unstable_offset: int | None
    # Producer id -> base offset of its newest batch: kept by the cleaner even when every
    # record in it is superseded, so producer state rebuilt from the log stays right.
    producer_last_batches: dict[int, int]
    # Lowest offset the log was truncated to since the previous view (None if it was not).
    truncated_to: int | None
    generation: int  # changes with every truncation; replace_segments checks it
    config: LogConfig


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) for a directory named `<topic>-<partition>`, else None."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """Segments, indexes, producer state and leader epochs of one partition."""

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig, *,
                 producer_id_expiration_ms: int, scheduler: DeletionScheduler) -> None:
        self._dir_path = dir_path
        self.topic = topic
        self.partition = partition
        self._config = config
        self._scheduler = scheduler
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._last_flush_ms = _now_ms()
        self._dir_dirty = False  # segment files created since the directory was last synced
        # offset -> (segment, position) of recent batch boundaries: a consumer at the tail
        # and the high watermark bound are found without an index lookup.
        self._positions: dict[int, tuple[LogSegment, int]] = {}
        self._producers = ProducerStateManager(dir_path, producer_id_expiration_ms)
        # (first offset, marker offset) of transactions whose marker is above the high
        # watermark: as in Kafka they stay unstable until the marker is replicated.
        self._unreplicated: deque[tuple[int, int]] = deque()
        self._epochs: LeaderEpochCache | None = None
        self._topic_id: uuid.UUID | None = None
        self._closed = False
        # Bumped by every truncation so that a cleaning started before one is not swapped in.
        self._generation = 0
        self._truncated_to: int | None = None
        # Told (under the lock) of every truncation: the log cleaner lowers and saves its
        # checkpoint, so records written again after it never pass for clean.
        self.truncation_listener: Callable[[PartitionLog, int], None] | None = None

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, dir_path: str, topic: str, partition: int, config: LogConfig, *,
             recovery_point: int, log_start_offset: int, clean_shutdown: bool,
             producer_id_expiration_ms: int = 86400000, topic_id: uuid.UUID | None = None,
             high_watermark: int | None = None,
             scheduler: DeletionScheduler | None = None) -> PartitionLog:
        """Open (creating if needed) the log in `dir_path`, recovering an unclean tail.

        After an unclean shutdown every segment from the one holding `recovery_point` on is
        validated batch by batch and cut at the first bad batch. The high watermark starts at
        `high_watermark` if given, else at the log end.
        """
        os.makedirs(dir_path, exist_ok=True)
        plog = cls(dir_path, topic, partition, config,
                   producer_id_expiration_ms=producer_id_expiration_ms,
                   scheduler=scheduler or default_scheduler())
        try:
            plog._load(recovery_point, log_start_offset, clean_shutdown, high_watermark)
            plog._load_topic_id(topic_id)
        except BaseException:
            plog._close_segments()
            raise
        return plog

    def _segment_args(self) -> dict[str, int]:
        cfg = self._config
        jitter = min(cfg.segment_jitter_ms, cfg.segment_ms)
        return {"index_interval_bytes": cfg.index_interval_bytes,
                "max_index_bytes": cfg.segment_index_bytes,
                "roll_jitter_ms": random.randrange(jitter) if jitter > 0 else 0}

    def _max_batch_bytes(self) -> int:
        return max(self._config.max_message_bytes, self._config.segment_bytes)

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool,
              high_watermark: int | None) -> None:
        self._complete_interrupted_swaps()
        self._remove_leftover_files()
        for base in self._segment_bases_on_disk():
            self._add_segment(LogSegment.open(self._dir_path, base, **self._segment_args()))
        # After a crash, segments from the one holding the recovery point on may hold
        # unflushed, torn data: validate them batch by batch instead of trusting the indexes.
        unflushed_from = len(self._segments)
        if not clean_shutdown and self._segments:
            unflushed_from = max(bisect.bisect_right(self._bases, recovery_point) - 1, 0)
        recovered: set[int] = set()
        for i, seg in enumerate(list(self._segments)):
            if seg not in self._segments:
                break  # dropped after an earlier segment was cut short
            if i < unflushed_from:
                reason = seg.load()
                if reason is None:
                    continue
                log.warning("%s: segment %d: %s; rebuilding its indexes", self.name,
                            seg.base_offset, reason)
            elif i == unflushed_from:
                log.info("%s: unclean shutdown: recovering %d segment(s) from offset %d "
                         "(recovery point %d)", self.name, len(self._segments) - i,
                         seg.base_offset, recovery_point)
            recovered.add(seg.base_offset)
            if self._recover_segment(seg):
                break
        if not self._segments:
            self._add_segment(LogSegment.create(self._dir_path, max(log_start_offset, 0),
                                                **self._segment_args()))
        self._log_end_offset = self._segments[-1].next_offset
        self._log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self._log_start_offset > self._log_end_offset:
            log.warning("%s: log start offset %d is past the log end %d; starting the log "
                        "afresh at %d", self.name, self._log_start_offset,
                        self._log_end_offset, self._log_start_offset)
            self._truncate_fully_and_start_at(self._log_start_offset)
        for seg in self._segments:
            if seg.base_offset in recovered:
                seg.flush()
            if seg is not self._segments[-1]:
                seg.close_index_files()
        # Everything on disk is now consistent: after a clean shutdown it was flushed at
        # close, after a crash it was just validated and flushed.
        self._recovery_point = self._log_end_offset
        self._high_watermark = self._log_end_offset
        if high_watermark is not None:
            self._set_high_watermark(high_watermark)
        self._epochs = LeaderEpochCache(self._dir_path)
        self._epochs.truncate_from_end(self._log_end_offset)
        self._epochs.truncate_from_start(self._log_start_offset)
        self._rebuild_producer_state(reindex={s for s in self._segments
                                              if s.base_offset in recovered})
        active = self._segments[-1]
        self._note_position(self._log_end_offset, active, active.size)

    def _recover_segment(self, seg: LogSegment) -> bool:
        """Recover one segment; when it was cut short, drop every later segment (returns True)."""
        truncated = seg.recover(self._max_batch_bytes())
        if not truncated:
            log.info("%s: segment %d is intact (%d bytes, offsets up to %d)", self.name,
                     seg.base_offset, seg.size, seg.next_offset - 1)
            return False
        log.warning("%s: segment %d: truncated %d invalid bytes at position %d; log now "
                    "ends at offset %d", self.name, seg.base_offset, truncated, seg.size,
                    seg.next_offset)
        later = [s for s in self._segments if s.base_offset > seg.base_offset]
        for s in later:
            log.warning("%s: deleting segment %d that followed the truncation point",
                        self.name, s.base_offset)
            self._remove_segment(s)
        return True

    def _remove_leftover_files(self) -> None:
        # `.cleaned` files are a cleaning that never reached its swap: the segments they were
        # built from are all still in place. Index `.swap` files left after the swaps were
        # completed are stale (the completed segments get their indexes rebuilt).
        for name in os.listdir(self._dir_path):
            if name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                os.remove(os.path.join(self._dir_path, name))

    def _complete_interrupted_swaps(self) -> None:
        """Finish segment replacements (log cleaning) that a crash interrupted.

        A `<base>.log.swap` file is only ever created once the cleaned data is complete and
        synced, so it always wins: every segment whose base offset falls in the offset range
        it covers is deleted (some may already be `.deleted`) and it takes its final name.
        Its indexes are rebuilt when the segment is loaded, as the index files are removed.

        Old segments of the swap's group that start past its last offset (the cleaning
        removed all their records) are not identified and stay if not yet renamed. That is
        still a consistent log: they are a tail of the group, so whatever superseded their
        records lies after them and is still there; the next cleaning removes them again.
        """
        names = os.listdir(self._dir_path)
        swap_suffix = LOG_SUFFIX + SWAP_SUFFIX
        bases = sorted(int(n[:-len(swap_suffix)]) for n in names
                       if n.endswith(swap_suffix) and n[:-len(swap_suffix)].isdigit())
        for base in bases:
            swap = LogSegment(self._dir_path, base, suffix=SWAP_SUFFIX, **self._segment_args())
            end = base
            try:
                for _, h in swap.iter_headers():
                    end = h.next_offset
            except CorruptSegmentError as e:
                # Cannot happen short of disk damage (the file was synced before its rename);
                # the valid prefix is kept and the load validates it.
                log.error("%s: swap segment %d: %s", self.name, base, e)
            finally:
                swap.close()
            upper = max(end, base + 1)  # an emptied segment still replaces the one at `base`
            replaced = []
            for name in os.listdir(self._dir_path):
                for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
                    stem = name[:-len(suffix)]
                    if name.endswith(suffix) and stem.isdigit() and base <= int(stem) < upper:
                        os.remove(os.path.join(self._dir_path, name))
                        if suffix == LOG_SUFFIX:
                            replaced.append(int(stem))
            os.rename(os.path.join(self._dir_path, segment_file_name(base, swap_suffix)),
                      os.path.join(self._dir_path, segment_file_name(base, LOG_SUFFIX)))
            log.warning("%s: completed an interrupted segment swap: segment %d (offsets below "
                        "%d) replaces segment(s) %s", self.name, base, upper, sorted(replaced))
        if bases:
            fsync_dir(self._dir_path)

    def _segment_bases_on_disk(self) -> list[int]:
        names = os.listdir(self._dir_path)
        bases = sorted(int(n[:-len(LOG_SUFFIX)]) for n in names
                       if n.endswith(LOG_SUFFIX) and n[:-len(LOG_SUFFIX)].isdigit())
        known = set(bases)
        for n in names:
            for suffix in INDEX_SUFFIXES:
                stem = n[:-len(suffix)]
                if n.endswith(suffix) and stem.isdigit() and int(stem) not in known:
                    log.info("%s: removing orphan index %s", self.name, n)
                    os.remove(os.path.join(self._dir_path, n))
        return bases

    def _rebuild_producer_state(self, reindex: set[LogSegment] | None = None) -> None:
        """Latest snapshot plus a scan of the batch headers written after it.

        The segments in `reindex` (just recovered) get their aborted transaction index
        re-derived on the way, so the scan starts at a snapshot no later than the first.
        """
        producers = self._producers
        first = min((s.base_offset for s in reindex), default=None) if reindex else None
        start = producers.load(self._log_start_offset, self._log_end_offset, at_most=first)
        if start < self._log_end_offset:
            count = 0
            for seg, pos, h in self._iter_batches_from(start):
                done = producers.record(h, self._marker_at(seg, pos, h))
                if done is not None and reindex and seg in reindex:
                    self._index_completed(seg, done)
                count += 1
            log.info("%s: rebuilt producer state from offset %d (%d batches scanned)",
                     self.name, start, count)
        producers.map_end_offset = self._log_end_offset
        producers.remove_expired(_now_ms())
        producers.delete_snapshots_below(self._segments[0].base_offset)

    def _load_topic_id(self, topic_id: uuid.UUID | None) -> None:
        path = os.path.join(self._dir_path, PARTITION_METADATA)
        try:
            stored = read_partition_metadata(path)
        except CheckpointError as e:
            log.warning("%s: %s; rewriting it", self.name, e)
            stored = None
        if topic_id is not None and stored is not None and stored != topic_id:
            raise KafkaError(ErrorCode.inconsistent_topic_id,
                             f"{self.name} belongs to topic id {stored}, not {topic_id}")
        if topic_id is not None and stored is None:
            write_partition_metadata(path, topic_id)
            stored = topic_id
        self._topic_id = stored

    # -- properties --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def dir_path(self) -> str:
        return self._dir_path

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config

    @property
    def topic_id(self) -> uuid.UUID | None:
        return self._topic_id

    def set_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the topic id in `partition.metadata` (once; a different id is an error)."""
        with self._lock:
            if self._topic_id == topic_id:
                return
            if self._topic_id is not None:
                raise KafkaError(ErrorCode.inconsistent_topic_id,
                                 f"{self.name} belongs to topic id {self._topic_id}")
            write_partition_metadata(os.path.join(self._dir_path, PARTITION_METADATA),
                                     topic_id)
            self._topic_id = topic_id

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        with self._lock:
            self._set_high_watermark(value)

    def _set_high_watermark(self, value: int) -> None:
        # Clamped: never past the log end, never below the log start.
        self._high_watermark = max(min(value, self._log_end_offset), self._log_start_offset)
        self._forget_replicated_markers()

    def _forget_replicated_markers(self) -> None:
        pending, hw = self._unreplicated, self._high_watermark
        while pending and pending[0][1] < hw:
            pending.popleft()

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch if self._epochs else None

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def generation(self) -> int:
        """Changes with every truncation (cleaning started before one is not swapped in)."""
        return self._generation

    def __repr__(self) -> str:
        return (f"PartitionLog({self.name}, start={self._log_start_offset}, "
                f"end={self._log_end_offset}, hw={self._high_watermark})")

    # -- appending ---------------------------------------------------------------------------

    def verification_guard(self, producer_id: int, epoch: int) -> VerificationGuard | None:
        """None when the producer has a transaction ongoing here; else the guard a verified
        transactional append must bring (see ProducerStateManager.verification_guard)."""
        with self._lock:
            return self._producers.verification_guard(producer_id, epoch, _now_ms())

    def append_as_leader(self, buf: bytearray, batches: list[BatchHeader], *,
                         leader_epoch: int, log_append_time_ms: int | None,
                         background: Callable[[Callable[[], None]], object] | None = None,
                         marker: EndTxnMarker | None = None, verify_txn: bool = False,
                         guard: VerificationGuard | None = None) -> AppendInfo:
        """Assign offsets to validated batches in `buf` (patched in place) and write them.

        A retry of a batch already in the log (same producer, epoch and sequences) appends
        nothing and returns the original offsets with `duplicate` set. `marker` says that
        `buf` is the one control batch of a transaction marker, checked against the
        producer's epoch and coordinator epoch instead. With `verify_txn`, a transactional
        batch that starts a transaction needs the verification `guard` (see
        ProducerStateManager.check).
        """
        if not batches:
            raise ValueError("nothing to append")
        total = sum(h.size for h in batches)
        if total != len(buf):
            raise ValueError(f"batch headers cover {total} bytes, the buffer has {len(buf)}")
        flush_needed = False
        with self._lock:
            self._check_open()
            if marker is not None:
                h = batches[0]
                self._producers.check_marker(h.producer_id, h.producer_epoch,
                                             marker.coordinator_epoch)
                dup = None
            else:
                dup = self._producers.check(batches, verify=verify_txn, guard=guard)
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset, -1,
                                  self._log_start_offset, True)
            first = offset = self._log_end_offset
            pos = 0
            placed: list[BatchHeader] = []
            max_ts, offset_of_max = -1, first
            for h in batches:
                set_base_offset(buf, pos, offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                if log_append_time_ms is not None:
                    # Validation may have stamped the batch already; skip a second CRC pass.
                    if _stamped_at(buf, pos) != log_append_time_ms:
                        set_log_append_time(buf, pos, h.size, log_append_time_ms)
                    h = h._replace(base_offset=offset, partition_leader_epoch=leader_epoch,
                                   max_timestamp=log_append_time_ms,
                                   attributes=h.attributes | TIMESTAMP_TYPE_MASK)
                else:
                    h = h._replace(base_offset=offset, partition_leader_epoch=leader_epoch)
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, offset
                placed.append(h)
                pos += h.size
                offset = h.next_offset
            rolled = self._append_locked(buf, placed, max_ts, offset_of_max)
            if leader_epoch >= 0 and self._epochs is not None:
                self._epochs.assign(leader_epoch, first)
            flush_needed = self._flush_due(_now_ms())
            info = AppendInfo(first, offset - 1,
                              -1 if log_append_time_ms is None else log_append_time_ms,
                              self._log_start_offset, False)
        if flush_needed:
            self.flush()
        elif rolled is not None:
            # The previous segment is complete: make it durable (in the background when the
            # caller must not wait for an fsync, as Kafka schedules it).
            if background is None:
                self.flush(rolled)
            else:
                background(partial(self.flush, rolled))
        return info

    def append_as_follower(self, buf: bytes | bytearray | memoryview,
                           batches: list[BatchHeader], *,
                           guard: Callable[[], bool] | None = None) -> AppendInfo:
        """Write batches whose offsets the leader already assigned.

        `guard` is checked under the log lock: a replica fetcher whose partition changed role
        meanwhile must not write (see `_check_guard`).
        """
        if not batches:
            raise ValueError("nothing to append")
        with self._lock:
            self._check_open()
            self._check_guard(guard)
            if batches[0].base_offset < self._log_end_offset:
                raise ValueError(f"{self.name}: follower append at {batches[0].base_offset} "
                                 f"is below the log end {self._log_end_offset}")
            max_ts, offset_of_max = -1, batches[0].base_offset
            for h in batches:
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, h.base_offset
            rolled = self._append_locked(buf, batches, max_ts, offset_of_max)
            if self._epochs is not None:
                for h in batches:
                    self._epochs.assign(h.partition_leader_epoch, h.base_offset)
            flush_needed = self._flush_due(_now_ms())
            info = AppendInfo(batches[0].base_offset, batches[-1].last_offset, -1,
                              self._log_start_offset, False)
        if flush_needed:
            self.flush()
        elif rolled is not None:
            self.flush(rolled)
        return info

    def _append_locked(self, data: bytes | bytearray | memoryview,
                       placed: Sequence[BatchHeader], max_ts: int,
                       offset_of_max: int) -> int | None:
        """Write under the lock; returns the old log end when a segment was rolled."""
        first = placed[0].base_offset
        last = placed[-1].last_offset
        seg = self._segments[-1]
        cfg = self._config
        rolled = None
        try:
            reason = seg.should_roll(len(data), max_ts, last, _now_ms(), cfg.segment_bytes,
                                     cfg.segment_ms)
            if reason is not None:
                rolled = self._log_end_offset
                seg = self._roll(reason, first)
            position = seg.size
            seg.append(first, last, max_ts, offset_of_max, data, placed)
        except OSError as e:
            log.error("%s: write failed: %s", self.name, e)
            raise KafkaError(ErrorCode.kafka_storage_error, f"{self.name}: {e}") from e
        self._log_end_offset = last + 1
        producers = self._producers
        pos = 0
        for h in placed:
            if h.producer_id >= 0:
                marker = _marker_in(data, pos, h) if h.is_control else None
                done = producers.record(h, marker)
                if done is not None:
                    self._index_completed(seg, done)
                    if done.last_offset >= self._high_watermark:
                        self._unreplicated.append((done.first_offset, done.last_offset))
            pos += h.size
        producers.map_end_offset = self._log_end_offset
        self._note_position(first, seg, position)
        self._note_position(self._log_end_offset, seg, seg.size)
        return rolled

    def _index_completed(self, seg: LogSegment, txn: CompletedTxn) -> None:
        """Record an aborted transaction in the index of the segment holding its marker."""
        if txn.aborted:
            seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset,
                                            txn.last_offset,
                                            self._producers.stable_offset_after(txn)))

    def _marker_at(self, seg: LogSegment, pos: int, h: BatchHeader) -> EndTxnMarker | None:
        if not h.is_control or h.producer_id < 0:
            return None
        return _marker_in(seg.read(pos, h.size), 0, h)

    def _roll(self, reason: str, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or `base_offset` for followers)."""
        old = self._segments[-1]
        new_base = self._log_end_offset if base_offset is None else base_offset
        old.on_roll()
        new = LogSegment.create(self._dir_path, new_base, **self._segment_args())
        self._add_segment(new)
        self._positions.pop(self._log_end_offset, None)
        self._note_position(new_base, new, 0)
        log.info("%s: rolled new segment at offset %d (%s; previous segment %d holds %d "
                 "bytes)", self.name, new_base, reason, old.base_offset, old.size)
        try:
            self._producers.take_snapshot()
        except OSError as e:  # only costs a longer header scan at the next start-up
            log.warning("%s: could not write the producer snapshot: %s", self.name, e)
        return new

    def _flush_due(self, now_ms: int) -> bool:
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed <= 0:
            return False
        return (unflushed >= self._config.flush_messages
                or now_ms - self._last_flush_ms >= self._config.flush_ms)

    def roll(self) -> None:
        """Force a new active segment (no-op when the active one is empty)."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size:
                self._roll("requested")

    # -- reading -----------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None,
             min_one_batch: bool, read_committed: bool = False) -> LogReadResult:
        """File regions holding batches from the one containing `fetch_offset`.

        `max_offset` is exclusive (the high watermark for consumers). The result stays within
        one segment and may end with a partial batch; with `min_one_batch`, a first batch
        larger than `max_bytes` is returned whole. `read_committed` also stops at the last
        stable offset and lists the aborted transactions the data may hold.
        """
        with self._lock, self._storage_errors():
            self._check_open()
            start_offset, leo = self._log_start_offset, self._log_end_offset
            hw, stable = self._high_watermark, self._last_stable_offset()
            if fetch_offset < start_offset or fetch_offset > leo:
                raise KafkaError(ErrorCode.offset_out_of_range,
                                 f"{self.name}: offset {fetch_offset} is outside "
                                 f"[{start_offset}, {leo}]")
            limit = leo if max_offset is None else min(max_offset, leo)
            if read_committed:
                limit = min(limit, stable)
            empty = LogReadResult([], hw, start_offset, leo, stable,
                                  [] if read_committed else None)
            if fetch_offset >= limit or (max_bytes <= 0 and not min_one_batch):
                return empty
            start = self._locate(fetch_offset)
            if start is None:
                return empty
            seg, pos = start
            end = self._bound(seg, limit)
            available = end - pos
            if available <= 0:
                return empty
            size = min(max_bytes, available)
            if min_one_batch and size < available:
                first_size = parse_header(seg.read(pos, HEADER_SIZE)).size
                size = min(max(size, first_size), available)
            aborted = self._collect_aborted(seg, fetch_offset, limit) if read_committed \
                else None
            return LogReadResult([FileSlice(seg.file, pos, size)], hw, start_offset, leo,
                                 stable, aborted)

    def _collect_aborted(self, seg: LogSegment, fetch_offset: int,
                         limit: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping what a read from `seg` may return, from the
        indexes of `seg` and the segments after it (their markers come later). As Kafka,
        stop at an entry whose stable offset reaches the bound: every transaction begun
        before it had ended by then."""
        i = bisect.bisect_left(self._bases, seg.base_offset)
        upper = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else limit
        upper = min(upper, limit)
        found: list[AbortedTxn] = []
        for s in self._segments[i:]:
            for txn in s.txn_index.ending_at_or_after(fetch_offset):
                if txn.first_offset < upper:
                    found.append(txn)
                if txn.last_stable_offset >= upper:
                    return found
        return found

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are decided: no transaction is open there."""
        with self._lock:
            return self._last_stable_offset()

    def _last_stable_offset(self) -> int:
        hw = self._high_watermark
        self._forget_replicated_markers()  # the log start may have moved the mark up
        pending = self._unreplicated
        first = self._producers.first_unstable_offset()
        if pending:
            first = pending[0][0] if first is None else min(first, pending[0][0])
        return hw if first is None else max(min(first, hw), self._log_start_offset)

    def read_batches(self, start_offset: int, max_bytes: int, *,
                     max_offset: int | None = None) -> bytes:
        """Bytes of the batches from `start_offset`, read through `read` (min one batch)."""
        return self.read(start_offset, max_bytes, max_offset=max_offset,
                         min_one_batch=True).read_bytes()

    def _locate(self, offset: int) -> tuple[LogSegment, int] | None:
        """Segment and position of the batch holding `offset`, or the first batch after it."""
        hit = self._positions.get(offset)
        if hit is not None and hit[1] < hit[0].size:
            return hit
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for seg in self._segments[i:]:
            found = seg.find_position(offset)
            if found is not None:
                return seg, found[0]
        return None

    def _bound(self, seg: LogSegment, offset: int) -> int:
        """Position in `seg` where batches at or after `offset` start (its size if none)."""
        if offset >= self._log_end_offset:
            return seg.size
        hit = self._positions.get(offset)
        if hit is not None:
            hit_seg, hit_pos = hit
            if hit_seg is seg:
                return hit_pos
            return seg.size if hit_seg.base_offset > seg.base_offset else 0
        i = self._segments.index(seg)
        if i + 1 < len(self._segments) and offset >= self._segments[i + 1].base_offset:
            return seg.size
        found = seg.find_position(offset)
        pos = seg.size if found is None else found[0]
        self._note_position(offset, seg, pos)
        return pos

    def _note_position(self, offset: int, seg: LogSegment, position: int) -> None:
        positions = self._positions
        positions.pop(offset, None)
        positions[offset] = (seg, position)
        if len(positions) > _POSITION_CACHE_SIZE:
            del positions[next(iter(positions))]

    def _iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, position, header) of all batches whose last offset is >= `offset`."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for seg in self._segments[i:]:
            for pos, h in seg.iter_headers(seg.offset_index.lookup(offset)):
                if h.last_offset >= offset:
                    yield seg, pos, h

    # -- timestamps --------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start whose timestamp
        is >= `timestamp_ms`; None when there is none."""
        with self._lock, self._storage_errors():
            self._check_open()
            lso = self._log_start_offset
            for seg in self._segments:
                if seg.max_timestamp < timestamp_ms or seg.next_offset <= lso:
                    continue
                for pos, h in seg.find_timestamp(timestamp_ms, lso):
                    hit = _first_record(seg.read(pos, h.size), h,
                                        lambda off, ts: off >= lso and ts >= timestamp_ms)
                    if hit is not None:
                        return hit
            return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (earliest on ties)."""
        with self._lock, self._storage_errors():
            self._check_open()
            best: LogSegment | None = None
            for seg in self._segments:
                if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None or best.max_timestamp < 0:
                return None
            target = best.max_timestamp
            found = best.find_position(best.offset_of_max_timestamp)
            candidates: Iterator[tuple[int, BatchHeader]]
            if found is not None and found[1].max_timestamp == target:
                candidates = iter([found])
            else:  # the recorded offset is stale: scan the segment's headers
                candidates = (ph for ph in best.iter_headers() if ph[1].max_timestamp == target)
            for pos, h in candidates:
                hit = _first_record(best.read(pos, h.size), h, lambda _o, ts: ts == target)
                if hit is not None:
                    return hit
            return None

    # -- deletion ----------------------------------------------------------------------------

    def delete_records(self, offset: int) -> int:
        """Move the log start up to `offset` (at most the high watermark); returns it."""
        with self._lock:
            self._check_open()
            if offset > self._high_watermark or offset < 0:
                raise KafkaError(ErrorCode.offset_out_of_range,
                                 f"{self.name}: cannot delete records below {offset}; the "
                                 f"high watermark is {self._high_watermark}")
            if offset > self._log_start_offset:
                log.info("%s: log start offset moved from %d to %d by DeleteRecords",
                         self.name, self._log_start_offset, offset)
                self._advance_log_start(offset)
                self._delete_segments(
                    lambda seg, nxt: nxt is not None and nxt.base_offset <= offset,
                    "below the log start offset")
            return self._log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole segments past retention.ms / retention.bytes; returns the count."""
        with self._lock:
            if self._closed:
                return 0
            lso = self._log_start_offset
            deleted = self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= lso,
                "below the log start offset")
            cfg = self._config
            if not cfg.delete:
                return deleted
            if cfg.retention_ms >= 0:
                deleted += self._delete_segments(
                    lambda seg, nxt: now_ms - seg.largest_timestamp > cfg.retention_ms,
                    f"retention.ms={cfg.retention_ms} exceeded")
            if cfg.retention_bytes >= 0:
                excess = self.size_in_bytes - cfg.retention_bytes

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                if excess > 0:
                    deleted += self._delete_segments(
                        over_size, f"retention.bytes={cfg.retention_bytes} exceeded")
            return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                         reason: str) -> int:
        """Delete the oldest segments while `predicate` holds and their data is below the
        high watermark. Deleting every segment first rolls an empty one (if the last had data).
        """
        victims: list[LogSegment] = []
        segments = self._segments
        for i, seg in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and seg.size == 0:
                break
            if self._high_watermark < upper or not predicate(seg, nxt):
                break
            victims.append(seg)
        if not victims:
            return 0
        if len(victims) == len(segments):
            self._roll(f"all segments are being deleted: {reason}")
        for seg in victims:
            log.info("%s: deleting segment %d (%d bytes, offsets %d..%d, largest timestamp "
                     "%d): %s", self.name, seg.base_offset, seg.size, seg.base_offset,
                     seg.next_offset - 1, seg.max_timestamp, reason)
            self._remove_segment(seg)
        self._advance_log_start(self._segments[0].base_offset)
        self._producers.delete_snapshots_below(self._segments[0].base_offset)
        return len(victims)

    def _advance_log_start(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        if self._epochs is not None:
            self._epochs.truncate_from_start(offset)

    def _add_segment(self, seg: LogSegment) -> None:
        self._dir_dirty = True
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _remove_segment(self, seg: LogSegment) -> None:
        """Unlist a segment and schedule its files for deletion."""
        i = self._segments.index(seg)
        del self._segments[i]
        del self._bases[i]
        self._positions.clear()
        seg.mark_deleted()
        self._scheduler.schedule(self._config.file_delete_delay_ms, seg.unlink_deleted)

    # -- log cleaning ------------------------------------------------------------------------

    def cleaner_view(self) -> CleanerView:
        """The segments and offsets the cleaner works from; resets the truncation mark."""
        with self._lock:
            self._check_open()
            truncated_to, self._truncated_to = self._truncated_to, None
            last_batches = {pid: e.batches[-1].first_offset
                            for pid, e in self._producers.producers.items() if e.batches}
            return CleanerView(list(self._segments), [s.size for s in self._segments],
                               self._log_start_offset, self._log_end_offset,
                               self._high_watermark, self._producers.first_unstable_offset(),
                               last_batches, truncated_to, self._generation, self._config)

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment], generation: int,
                         hook: Callable[[str], None] | None = None) -> bool:
        """Swap the cleaned segment `new` (files named `*.cleaned`) in for `old`.

        `old` must still be consecutive sealed segments of this log, unchanged since the view
        of `generation` was taken, and `new` starts at the first one's base offset; otherwise
        nothing happens and False is returned (the caller discards `new`).

        On disk: `.cleaned` -> `.swap`, old segments -> `.deleted`, `.swap` -> final names. A
        crash anywhere in between is finished at start-up (`_complete_interrupted_swaps`).
        Old files are unlinked after file.delete.delay.ms; reads holding them keep working.
        `hook` is called with the name of each step ("cleaned", "swap", "deleted") for fault
        injection in tests.
        """
        with self._lock:
            if self._closed or generation != self._generation or not old:
                return False
            segments = self._segments
            try:
                i = next(k for k, s in enumerate(segments) if s is old[0])
            except StopIteration:
                return False
            n = len(old)
            if (i + n >= len(segments) or new.base_offset != old[0].base_offset
                    or any(a is not b or a.deleted for a, b in zip(segments[i:i + n], old,
                                                                    strict=True))):
                return False
            if hook is not None:
                hook("cleaned")
            new.set_suffix(SWAP_SUFFIX)
            fsync_dir(self._dir_path)  # the swap must be on disk before any old file goes
            if hook is not None:
                hook("swap")
            for seg in old:
                seg.mark_deleted()
            if hook is not None:
                hook("deleted")
            new.set_suffix("")
            fsync_dir(self._dir_path)
            segments[i:i + n] = [new]
            self._bases[i:i + n] = [new.base_offset]
            self._positions.clear()
            for seg in old:
                self._scheduler.schedule(self._config.file_delete_delay_ms, seg.unlink_deleted)
            return True

    # -- truncation (replication) ------------------------------------------------------------

    def truncate_to(self, offset: int, *, guard: Callable[[], bool] | None = None) -> None:
        """Remove every batch at or after the one holding `offset`."""
        with self._lock:
            self._check_open()
            self._check_guard(guard)
            if offset >= self._log_end_offset:
                # No batch to remove, but an epoch this replica began as leader without
                # appending anything may still start at the log end, and the new leader may
                # not have it: kept, the follower would keep naming it as its last epoch.
                if self._epochs is not None:
                    self._epochs.truncate_from_end(self._log_end_offset)
                return
            log.info("%s: truncating from offset %d (log end %d)", self.name, offset,
                     self._log_end_offset)
            if offset <= self._segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
            else:
                for seg in [s for s in self._segments if s.base_offset >= offset]:
                    self._remove_segment(seg)
                active = self._segments[-1]
                active.truncate_to(offset)
                self._log_end_offset = active.next_offset
            self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int, *,
                                    guard: Callable[[], bool] | None = None) -> None:
        with self._lock:
            self._check_open()
            self._check_guard(guard)
            self._truncate_fully_and_start_at(offset)
            self._after_truncation()

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._note_truncation(offset)
        for seg in list(self._segments):
            self._remove_segment(seg)
        self._add_segment(LogSegment.create(self._dir_path, offset, **self._segment_args()))
        self._log_start_offset = self._log_end_offset = offset
        self._unreplicated.clear()
        self._producers.delete_snapshots_above(-1)
        if self._epochs is not None:
            self._epochs.clear()

    def _note_truncation(self, offset: int) -> None:
        self._generation += 1
        if self._truncated_to is None or offset < self._truncated_to:
            self._truncated_to = offset
        if self.truncation_listener is not None:
            try:
                self.truncation_listener(self, offset)
            except Exception:  # the truncation itself must not fail over bookkeeping
                log.exception("%s: truncation listener failed", self.name)

    def _after_truncation(self) -> None:
        leo = self._log_end_offset
        self._note_truncation(leo)
        self._positions.clear()
        self._log_start_offset = min(self._log_start_offset, leo)
        self._high_watermark = min(max(self._high_watermark, self._log_start_offset), leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._unreplicated = deque(t for t in self._unreplicated if t[1] < leo)
        if self._epochs is not None:
            self._epochs.truncate_from_end(leo)
        self._producers.delete_snapshots_above(leo)
        self._rebuild_producer_state()
        active = self._segments[-1]
        self._note_position(leo, active, active.size)

    # -- producers and epochs ----------------------------------------------------------------

    def active_producers(self) -> list[ActiveProducer]:
        """The producers the partition's state holds (appends may run in other threads)."""
        with self._lock:
            return self._producers.active()

    def expire_producers(self, now_ms: int) -> int:
        with self._lock:
            return self._producers.remove_expired(now_ms)

    def assign_leader_epoch(self, epoch: int) -> int:
        """This replica leads from `epoch` on: the epoch starts at the current log end, which
        is returned (taken under the lock, so no follower write can slip in between)."""
        with self._lock:
            self._check_open()
            start = self._log_end_offset
            if self._epochs is not None:
                self._epochs.assign(epoch, start)
            return start

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers; (-1, -1) when unknown."""
        with self._lock:
            if self._epochs is None:
                return -1, -1
            return self._epochs.end_offset_for(epoch, self._log_end_offset)

    # -- durability and lifecycle ------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below `up_to` (default: the log end)."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                target = self._log_end_offset if up_to is None else min(up_to,
                                                                         self._log_end_offset)
                if target <= self._recovery_point:
                    return
                i = max(bisect.bisect_right(self._bases, self._recovery_point) - 1, 0)
                segments = [s for s in self._segments[i:] if s.base_offset < target]
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            for seg in segments:
                seg.flush()
            if dir_dirty:  # new segment files must survive a power loss too
                try:
                    fsync_dir(self._dir_path)
                except OSError:
                    self._dir_dirty = True
                    raise
            with self._lock:
                # Index files of sealed segments are only written under this lock.
                for seg in segments:
                    if seg is not self._segments[-1] and not seg.deleted:
                        seg.close_index_files()
                self._recovery_point = max(self._recovery_point,
                                           min(target, self._log_end_offset))
                self._last_flush_ms = _now_ms()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when flush.ms has passed since the last flush; True if it flushed."""
        with self._lock:
            due = not self._closed and self._log_end_offset > self._recovery_point and (
                now_ms - self._last_flush_ms >= self._config.flush_ms)
        if due:
            self.flush()
        return due

    def take_producer_snapshot(self) -> None:
        with self._lock:
            self._producers.take_snapshot()

    def close(self) -> None:
        """Flush, snapshot producer state and close every file."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            try:
                for seg in self._segments:
                    seg.flush()
                self._recovery_point = self._log_end_offset
                self._producers.take_snapshot()
            finally:
                self._closed = True
                self._close_segments()

    def _close_segments(self) -> None:
        for seg in self._segments:
            seg.close()

    def rename_for_deletion(self, new_dir_path: str) -> None:
        """Stop the log and move its directory (the caller deletes it later)."""
        with self._flush_lock, self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_index_files()
            os.rename(self._dir_path, new_dir_path)
            self._dir_path = new_dir_path

    def delete(self) -> None:
        """Stop the log and remove its directory now."""
        with self._flush_lock, self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_index_files()
            shutil.rmtree(self._dir_path, ignore_errors=True)

    @contextlib.contextmanager
    def _storage_errors(self) -> Iterator[None]:
        """Report disk trouble met while reading as KAFKA_STORAGE_ERROR."""
        try:
            yield
        except (OSError, CorruptSegmentError) as e:
            log.error("%s: read failed: %s", self.name, e)
            raise KafkaError(ErrorCode.kafka_storage_error, f"{self.name}: {e}") from e

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.kafka_storage_error, f"{self.name}: log is closed")

    def _check_guard(self, guard: Callable[[], bool] | None) -> None:
        """Replication state changes (becoming leader) take this lock too, so a guard that
        holds here still holds when the write completes."""
        if guard is not None and not guard():
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"{self.name}: the replica changed role; write abandoned")


def _stamped_at(buf: bytearray, pos: int) -> int | None:
    """The LogAppendTime a batch in `buf` already carries, or None."""
    (attributes,) = struct.unpack_from(">h", buf, pos + ATTRIBUTES_OFFSET)
    if not attributes & TIMESTAMP_TYPE_MASK:
        return None
    return struct.unpack_from(">q", buf, pos + MAX_TIMESTAMP_OFFSET)[0]


def _marker_in(data: bytes | bytearray | memoryview, pos: int,
               h: BatchHeader) -> EndTxnMarker | None:
    """The transaction marker of the control batch at `pos`; None if it carries none."""
    try:
        return read_end_txn_marker(memoryview(data)[pos:pos + h.size], h)
    except KafkaError as e:
        log.warning("control batch at offset %d does not decode: %s", h.base_offset, e)
        return None


def _first_record(data: bytes, h: BatchHeader,
                  accept: Callable[[int, int], bool]) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of one batch that `accept`s, decoding it."""
    if h.log_append_time:
        # Every record of a LogAppendTime batch carries the batch's max timestamp.
        for off in range(h.base_offset, h.last_offset + 1):
            if accept(off, h.max_timestamp):
                return off, h.max_timestamp
        return None
    try:
        records = codec.decode_records(data)
    except KafkaError as e:
        raise CorruptSegmentError(f"batch at offset {h.base_offset}: {e}") from e
    for r in records:
        off = h.base_offset + r.offset_delta
        ts = h.base_timestamp + r.timestamp_delta
        if accept(off, ts):
            return off, ts
    return None


__all__ = [
    "AppendInfo",
    "CleanerView",
    "FileSlice",
    "LogReadResult",
    "PartitionLog",
    "parse_partition_dir",
    "partition_dir_name",
]
