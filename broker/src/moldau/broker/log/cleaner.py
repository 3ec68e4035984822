"""Log compaction for topics with `cleanup.policy` containing `compact`.

A compacted log keeps at least the latest record of every key. Each log has a *clean* part (up
to the offset kept in the log dir's `cleaner-offset-checkpoint`, Kafka's offset checkpoint
format) and a *dirty* part after it. One cleaning pass over a log:

1. Picks the dirty range [first dirty offset, first uncleanable offset). It ends before the
   active segment, the high watermark, the first offset of an open transaction and the first
   segment newer than `min.compaction.lag.ms` (those records stay dirty).
2. Builds an offset map, key digest -> latest offset, over that range. The map is a fixed
   budget hash table (`log.cleaner.dedupe.buffer.size` split over the cleaner threads, 24 bytes
   a slot); when it fills up, the pass only covers the offsets mapped so far and the next pass
   carries on from there.
3. Rewrites every sealed segment from the log start up to the end of the mapped range, grouped
   into new segments of at most `segment.bytes`. A record survives if no later record of its
   key is mapped; records without a key are dropped; records past the mapped range are kept
   as they are. Offsets never change: batches are rebuilt with their base offset, last offset
   delta, producer id/epoch/base sequence, flags and codec. Batches with nothing to drop are
   copied byte for byte; control batches are always kept; the newest batch of each producer
   is kept whole when it would otherwise vanish, so producer state rebuilt from the log still
   deduplicates retries.
4. Swaps each rewritten segment in (see `PartitionLog.replace_segments`): `.cleaned` ->
   `.swap` -> old segments renamed `.deleted` -> final names. Start-up finishes a swap that a
   crash interrupted and deletes `.cleaned` leftovers, so a crash never loses records.

Tombstones (null values) follow Kafka's per-batch delete horizon: the first pass that keeps a
tombstone stamps its batch with horizon = now + `delete.retention.ms` (the DELETE_HORIZON
attribute bit, the horizon stored as the base timestamp, record timestamp deltas re-based so
record timestamps do not change); a later pass drops the tombstone once the horizon has
passed. A consumer that reads the log from the start within `delete.retention.ms` of a
tombstone reaching the clean part therefore sees it. A log whose next horizon is due is
cleaned again even when it has no new dirty data (that schedule is kept in memory only; after
a restart the next ordinary pass catches up).

Cleaning runs on `log.cleaner.threads` background threads, each picking the log with the
highest dirty ratio (dirty bytes / bytes of sealed segments) at or above
`min.cleanable.dirty.ratio`, or whose oldest dirty data is older than
`max.compaction.lag.ms`; when there is nothing to do a thread sleeps `log.cleaner.backoff.ms`.
Data is copied without the log's lock, which is only taken to look at the segment list and for
the swap itself.

Transactions: only offsets below the first unstable offset are cleaned, so every
transaction there is decided. Batches of aborted transactions (per the segments' `.txnindex`)
never enter the offset map and are removed. A COMMIT/ABORT marker stays while any batch of
its transaction does; once none is left it goes the way of a tombstone, as in Kafka: the
first pass stamps it with a delete horizon, a pass after the horizon removes it (and its
`.txnindex` entry). Each cleaned segment carries the index entries of the segments it
replaces whose markers it keeps.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from moldau.config import LONG_MAX
from moldau.errors import KafkaError
from moldau.records.batch import (
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    parse_header,
)
from moldau.records.codec import encode_varint, read_uvarint
from moldau.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, compress, decompress

from .checkpoint import CheckpointError, read_offsets, write_offsets
from .index import INT32_MAX
from .log import CleanerView, PartitionLog
from .segment import CLEANED_SUFFIX, MAGIC_V2, CorruptSegmentError, LogSegment
from .txn_index import AbortedRanges

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
INT64_MAX = (1 << 63) - 1
# Kafka's default fill limit for the offset map (log.cleaner.io.buffer.load.factor).
MAP_LOAD_FACTOR = 0.9
# A single map never takes more than this, whatever the buffer setting (as in Kafka).
MAX_MAP_MEMORY = 2 * 1024 * 1024 * 1024
MIN_IO_CHUNK = 4096
# A log whose cleaning failed is left alone this long before it is tried again.
FAILED_RETRY_MS = 600_000
# Smallest record body: attributes, both deltas, key and value lengths, header count.
_MIN_RECORD_BODY = 6

TopicPartition = tuple[str, int]
LogKey = tuple[str, str, int]  # (log dir, topic, partition)


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's `log.cleaner.*` settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    io_buffer_size: int = 524288
    backoff_ms: int = 15000

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> CleanerConfig:
        """From the broker's typed settings (missing keys keep their defaults)."""
        default = cls()
        return cls(
            enable=bool(values.get("log.cleaner.enable", default.enable)),
            threads=int(values.get("log.cleaner.threads", default.threads)),
            dedupe_buffer_size=int(values.get("log.cleaner.dedupe.buffer.size",
                                              default.dedupe_buffer_size)),
            io_buffer_size=int(values.get("log.cleaner.io.buffer.size",
                                          default.io_buffer_size)),
            backoff_ms=int(values.get("log.cleaner.backoff.ms", default.backoff_ms)))


class CleanResult(NamedTuple):
    """What one cleaning pass over one log did."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # records below this are now clean (the new checkpoint)
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_kept: int
    records_removed: int
    elapsed_s: float


# --- offset map -----------------------------------------------------------------------------

_SLOT = 24  # bytes per offset map slot: 16-byte key digest + 8-byte offset


def _is_prime(n: int) -> bool:
    if n < 4:
        return n >= 2
    if n % 2 == 0:
        return False
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def _prime_at_most(n: int) -> int:
    n = max(n, 2)
    while not _is_prime(n):
        n -= 1
    return n


def key_digest(key: bytes) -> bytes:
    """The 16-byte digest a key is mapped by; distinct keys colliding is not a practical risk."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> latest offset, in one preallocated table of 24-byte slots.

    Open addressing with double hashing over a prime number of slots. A slot holds the
    16-byte digest and offset + 1 (0 marks an empty slot). The table holds at most
    `capacity` keys (MAP_LOAD_FACTOR of the slots); `put` of a new key beyond that fails,
    which is how a pass learns where its mapped range has to end.
    """

    def __init__(self, memory: int, expected_keys: int | None = None) -> None:
        max_slots = max(min(memory, MAX_MAP_MEMORY) // _SLOT, 2)
        want = max_slots
        if expected_keys is not None:
            # Small logs get a small table: the budget is an upper bound, not an allocation.
            want = min(max_slots, max(int(expected_keys / MAP_LOAD_FACTOR) + 1, 8))
        self.slots = _prime_at_most(want)
        # Always below `slots`, so a probe sequence always meets an empty slot.
        self.capacity = max(1, min(int(self.slots * MAP_LOAD_FACTOR), self.slots - 1))
        self._table = bytearray(self.slots * _SLOT)
        self._view = memoryview(self._table)
        self.size = 0

    @property
    def memory(self) -> int:
        return len(self._table)

    def _start(self, digest: bytes) -> tuple[int, int]:
        """First slot and probe step of `digest` (the step is never a multiple of a prime
        slot count, so the sequence reaches every slot)."""
        slots = self.slots
        return (int.from_bytes(digest[:8], "big") % slots,
                1 + int.from_bytes(digest[8:], "big") % (slots - 1))

    def put(self, digest: bytes, offset: int) -> bool:
        """Map `digest` to `offset`; False (and nothing stored) when a new key does not fit."""
        view, slots = self._view, self.slots
        i, step = self._start(digest)
        while True:
            p = i * _SLOT
            if not any(view[p + 16:p + 24]):  # empty slot: the key is new
                if self.size >= self.capacity:
                    return False
                view[p:p + 16] = digest
                self.size += 1
                break
            if view[p:p + 16] == digest:
                break
            i += step
            if i >= slots:
                i -= slots
        view[p + 16:p + 24] = (offset + 1).to_bytes(8, "big")
        return True

    def get(self, digest: bytes) -> int:
        """The offset mapped for `digest`, or -1."""
        view, slots = self._view, self.slots
        i, step = self._start(digest)
        while True:
            p = i * _SLOT
            stored = int.from_bytes(view[p + 16:p + 24], "big")
            if stored == 0:
                return -1
            if view[p:p + 16] == digest:
                return stored - 1
            i += step
            if i >= slots:
                i -= slots


# --- records --------------------------------------------------------------------------------


class _Record(NamedTuple):
    """Where one record sits in a (decompressed) records section, and what the cleaner needs."""

    start: int  # its length prefix
    body: int  # its attributes byte
    ts_end: int  # just after its timestamp delta
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool


def _parse_records(data: bytes, count: int) -> list[_Record]:
    """Locate the records of a section without decoding values or headers.

    Every field read here is a zigzag varint; the one- and two-byte cases (nearly every
    delta and length of records up to 8 KiB) are decoded inline, this being the cleaner's
    hot loop. Raises ValueError or IndexError when the section is malformed.
    """
    out: list[_Record] = []
    append = out.append
    pos, end = 0, len(data)
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            z, body = b, pos + 1
        elif data[pos + 1] < 0x80:
            z, body = (b & 0x7F) | (data[pos + 1] << 7), pos + 2
        else:
            z, body = read_uvarint(data, pos, 5)
        length = (z >> 1) ^ -(z & 1)
        rec_end = body + length
        if length < _MIN_RECORD_BODY or rec_end > end:
            raise ValueError(f"invalid record length {length}")
        p = body + 1  # after the attributes byte
        b = data[p]
        if b < 0x80:
            z, ts_end = b, p + 1
        elif data[p + 1] < 0x80:
            z, ts_end = (b & 0x7F) | (data[p + 1] << 7), p + 2
        else:
            z, ts_end = read_uvarint(data, p, 10)
        ts_delta = (z >> 1) ^ -(z & 1)
        b = data[ts_end]
        if b < 0x80:
            z, p = b, ts_end + 1
        elif data[ts_end + 1] < 0x80:
            z, p = (b & 0x7F) | (data[ts_end + 1] << 7), ts_end + 2
        else:
            z, p = read_uvarint(data, ts_end, 5)
        offset_delta = (z >> 1) ^ -(z & 1)
        b = data[p]
        if b < 0x80:
            z, p = b, p + 1
        elif data[p + 1] < 0x80:
            z, p = (b & 0x7F) | (data[p + 1] << 7), p + 2
        else:
            z, p = read_uvarint(data, p, 5)
        key: bytes | None
        if not z & 1:
            key = data[p:p + (z >> 1)]
            p += z >> 1
        elif z == 1:
            key = None
        else:
            raise ValueError(f"invalid key length {(z >> 1) ^ -1}")
        b = data[p]
        if b < 0x80:
            z, p = b, p + 1
        elif data[p + 1] < 0x80:
            z, p = (b & 0x7F) | (data[p + 1] << 7), p + 2
        else:
            z, p = read_uvarint(data, p, 5)
        if (z & 1 and z != 1) or p > rec_end:
            raise ValueError(f"invalid value length {(z >> 1) ^ -(z & 1)}")
        append(_Record(pos, body, ts_end, rec_end, offset_delta, ts_delta, key, z == 1))
        pos = rec_end
    if pos != end:
        raise ValueError(f"{end - pos} bytes after the batch's {count} records")
    return out


def _records_of(h: BatchHeader, batch: bytes) -> tuple[bytes, list[_Record]]:
    """The batch's records section (decompressed) and its records; raises on bad data."""
    codec = h.attributes & COMPRESSION_MASK
    if codec:
        section = decompress(codec, memoryview(batch)[HEADER_SIZE:],
                             max_size=DEFAULT_MAX_DECOMPRESSED_BYTES)
    else:
        section = batch[HEADER_SIZE:]
    return section, _parse_records(section, h.record_count)


def _rebuild_batch(h: BatchHeader, section: bytes, kept: Sequence[_Record], base_timestamp: int,
                   attributes: int) -> bytes:
    """A batch with only the `kept` records, everything else as in `h`.

    The last offset delta stays as it was (so the producer's last sequence does too), and the
    codec is the batch's own. A new base timestamp re-bases the records' timestamp deltas.
    """
    shift = h.base_timestamp - base_timestamp
    records = bytearray()
    for r in kept:
        if not shift:
            records += section[r.start:r.end]
            continue
        body = bytearray(section[r.body:r.body + 1])
        body += encode_varint(r.timestamp_delta + shift)
        body += section[r.ts_end:r.end]
        records += encode_varint(len(body))
        records += body
    codec = attributes & COMPRESSION_MASK
    payload = compress(codec, records) if codec else records
    if h.log_append_time:
        max_timestamp = h.max_timestamp
    else:
        max_timestamp = max(h.base_timestamp + r.timestamp_delta for r in kept)
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch,
                     h.magic, 0, attributes, h.last_offset_delta, base_timestamp, max_timestamp,
                     h.producer_id, h.producer_epoch, h.base_sequence, len(kept))
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


# --- segment I/O ----------------------------------------------------------------------------


class _Aborted(Exception):
    """The cleaner is shutting down, or the log went away under it."""


def _read_batches(seg: LogSegment, start: int, end: int, chunk: int) -> Iterator[
        tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch in seg[start:end], read in `chunk`-sized pieces."""
    buf = b""
    buf_start = start
    pos = start
    while pos < end:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf, buf_start, off = _pread(seg, min(max(chunk, HEADER_SIZE), end - pos), pos), pos, 0
            if len(buf) < HEADER_SIZE:
                raise CorruptSegmentError(f"{seg.log_path}: partial header at {pos}")
        h = parse_header(buf, off)
        size = h.size
        if h.magic != MAGIC_V2 or size < HEADER_SIZE or pos + size > end:
            raise CorruptSegmentError(f"{seg.log_path}: bad batch header at {pos}")
        if off + size > len(buf):
            buf, buf_start, off = _pread(seg, min(max(chunk, size), end - pos), pos), pos, 0
            if len(buf) < size:
                raise CorruptSegmentError(f"{seg.log_path}: batch at {pos} is cut short")
        yield h, buf[off:off + size]
        pos += size


def _pread(seg: LogSegment, size: int, pos: int) -> bytes:
    # A closed file means the log was closed; its descriptor number may already be reused.
    if seg.file.closed:
        raise _Aborted(f"{seg.log_path} was closed")
    return os.pread(seg.fd, size, pos)


class _SegmentWriter:
    """Appends batches to the cleaned segment in writes of up to `limit` bytes."""

    def __init__(self, seg: LogSegment, limit: int) -> None:
        self._seg = seg
        self._limit = limit
        self._buf = bytearray()
        self._headers: list[BatchHeader] = []

    @property
    def pending(self) -> int:
        return len(self._buf)

    def add(self, data: bytes, h: BatchHeader) -> None:
        if self._buf and len(self._buf) + len(data) > self._limit:
            self.flush()
        self._buf += data
        self._headers.append(h)

    def flush(self) -> None:
        headers = self._headers
        if not headers:
            return
        max_ts, offset_of_max = -1, headers[0].base_offset
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.base_offset
        self._seg.append(headers[0].base_offset, headers[-1].last_offset, max_ts,
                         offset_of_max, self._buf, headers)
        self._buf = bytearray()
        self._headers = []


# --- the cleaner ----------------------------------------------------------------------------


class _Candidate(NamedTuple):
    plog: PartitionLog
    key: LogKey
    view: CleanerView
    first_dirty: int
    uncleanable: int
    ratio: float


class _Output:
    """A cleaned segment being written, and the old segments it will replace."""

    def __init__(self, segment: LogSegment, chunk: int) -> None:
        self.segment = segment
        self.writer = _SegmentWriter(segment, chunk)
        self.old: list[LogSegment] = []
        self.old_bytes = 0

    @property
    def size(self) -> int:
        return self.segment.size + self.writer.pending


class _PassState:
    """Counters and the delete horizon schedule of one pass."""

    def __init__(self, now_ms: int, map_end: int, delete_retention_ms: int,
                 protected: Mapping[int, int], aborted: AbortedRanges) -> None:
        self.now_ms = now_ms
        self.aborted = aborted
        # Producer id -> whether a batch of its current transaction survives this pass.
        self.txn_data_kept: dict[int, bool] = {}
        self.dropped_markers: set[int] = set()
        self.map_end = map_end
        self.horizon_for_new = min(now_ms + delete_retention_ms, INT64_MAX)
        self.protected = protected
        self.kept = 0
        self.removed = 0
        self.next_horizon: int | None = None

    def note_horizon(self, horizon: int) -> None:
        if self.next_horizon is None or horizon < self.next_horizon:
            self.next_horizon = horizon


class LogCleaner:
    """Compacts the logs `logs()` returns that have cleanup.policy containing compact.

    `start()` runs `config.threads` background threads; `clean_once()` runs one pass on the
    calling thread (tests, tools). `swap_hook` is handed to `PartitionLog.replace_segments`
    for fault injection in tests.
    """

    def __init__(self, logs: Callable[[], list[PartitionLog]],
                 config: CleanerConfig | None = None, *,
                 swap_hook: Callable[[str], None] | None = None) -> None:
        self._logs = logs
        self.config = config or CleanerConfig()
        self._swap_hook = swap_hook
        self._map_memory = self.config.dedupe_buffer_size // max(self.config.threads, 1)
        # Half of the I/O buffer for reading, half for writing (as Kafka splits it).
        self._io_chunk = max(self.config.io_buffer_size // 2, MIN_IO_CHUNK)
        self._lock = threading.Lock()  # checkpoints, horizons, the set of logs in progress
        self._select_lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._checkpoints: dict[LogKey, int] = {}
        self._loaded_dirs: set[str] = set()
        self._horizons: dict[LogKey, int] = {}
        self._failed_until: dict[LogKey, int] = {}
        self._in_progress: set[LogKey] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background threads (if log.cleaner.enable and any threads configured)."""
        if self._threads or not self.config.enable or self.config.threads <= 0:
            return
        self._stop.clear()
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        log.info("Log cleaner started: %d thread(s), %d bytes of offset map each",
                 self.config.threads, self._map_memory)

    def shutdown(self) -> None:
        """Stop the threads; a pass in progress is abandoned (its files are discarded)."""
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads.clear()
        self._stop.clear()  # clean_once() called directly works again

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        backoff_s = self.config.backoff_ms / 1000
        while not self._stop.is_set():
            try:
                result = self.clean_once()
            except Exception:
                log.exception("Log cleaner pass failed")
                result = None
            if result is None:
                self._stop.wait(backoff_s)

    # -- checkpoints -------------------------------------------------------------------------

    @staticmethod
    def _key(plog: PartitionLog) -> LogKey:
        return os.path.dirname(plog.dir_path), plog.topic, plog.partition

    def _ensure_loaded(self, log_dir: str) -> None:
        """Read a log dir's cleaner checkpoint the first time one of its logs is looked at."""
        if log_dir in self._loaded_dirs:
            return
        self._loaded_dirs.add(log_dir)
        try:
            offsets = read_offsets(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT))
        except CheckpointError as e:
            log.warning("%s; every compacted log in %s will be cleaned from its start", e,
                        log_dir)
            offsets = {}
        for (topic, partition), offset in offsets.items():
            self._checkpoints.setdefault((log_dir, topic, partition), offset)

    def checkpoint_of(self, plog: PartitionLog) -> int | None:
        """The offset below which `plog` is clean, if a pass has recorded one."""
        key = self._key(plog)
        with self._lock:
            self._ensure_loaded(key[0])
            return self._checkpoints.get(key)

    def forget(self, log_dir: str, topic: str, partition: int) -> None:
        """Drop what is known about a deleted log, so a new log of that name starts over."""
        key = (os.path.abspath(log_dir), topic, partition)
        with self._lock:
            self._ensure_loaded(key[0])
            found = self._checkpoints.pop(key, None) is not None
            self._horizons.pop(key, None)
            self._failed_until.pop(key, None)
        if found:
            self._write_checkpoint(key[0])

    def note_truncation(self, plog: PartitionLog, offset: int) -> None:
        """A log was truncated to `offset`: lower its checkpoint and save it at once.

        Called under the log's lock (PartitionLog.truncation_listener); takes only the
        cleaner's own locks, never a log's or the log manager's.
        """
        key = self._key(plog)
        with self._lock:
            self._ensure_loaded(key[0])
            checkpoint = self._checkpoints.get(key)
            if checkpoint is None or offset >= checkpoint:
                return
            self._checkpoints[key] = offset
        self._write_checkpoint(key[0], prune=False)

    def _write_checkpoint(self, log_dir: str, *, prune: bool = True) -> None:
        """Save the log dir's checkpoints; `prune` leaves out logs no longer present."""
        present = None
        if prune:
            present = {(p.topic, p.partition) for p in self._logs()
                       if os.path.dirname(p.dir_path) == log_dir}
        with self._file_lock:
            with self._lock:
                entries = {(t, p): off for (d, t, p), off in self._checkpoints.items()
                           if d == log_dir and (present is None or (t, p) in present)}
            if os.path.isdir(log_dir):
                write_offsets(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT), entries)

    # -- choosing a log ----------------------------------------------------------------------

    def _grab_filthiest(self, now_ms: int) -> _Candidate | None:
        with self._select_lock:
            best: _Candidate | None = None
            for plog in self._logs():
                if plog.closed or not plog.config.compact:
                    continue
                key = self._key(plog)
                with self._lock:
                    if key in self._in_progress or self._failed_until.get(key, 0) > now_ms:
                        continue
                try:
                    cand = self._candidate(plog, key, now_ms)
                except KafkaError:
                    continue  # closed meanwhile
                if cand is not None and (best is None or cand.ratio > best.ratio):
                    best = cand
            if best is not None:
                with self._lock:
                    self._in_progress.add(best.key)
            return best

    def _candidate(self, plog: PartitionLog, key: LogKey, now_ms: int) -> _Candidate | None:
        view = plog.cleaner_view()
        cfg = view.config
        with self._lock:
            self._ensure_loaded(key[0])
            first_dirty = self._checkpoints.get(key, view.log_start_offset)
            if view.truncated_to is not None and view.truncated_to < first_dirty:
                first_dirty = view.truncated_to  # data past the truncation point is new
            if not view.log_start_offset <= first_dirty <= view.log_end_offset:
                if key in self._checkpoints:
                    log.info("%s: cleaner checkpoint %d is outside the log [%d, %d]; "
                             "cleaning from the log start", plog.name, first_dirty,
                             view.log_start_offset, view.log_end_offset)
                first_dirty = view.log_start_offset
            self._checkpoints[key] = first_dirty
            horizon = self._horizons.get(key)
        segments, sizes = view.segments, view.sizes
        sealed = len(segments) - 1
        ends = [s.base_offset for s in segments[1:]]
        uncleanable = min(segments[-1].base_offset, view.high_watermark)
        if view.first_unstable_offset is not None:
            uncleanable = min(uncleanable, view.first_unstable_offset)
        if cfg.min_compaction_lag_ms > 0:
            # Records this recent must stay uncompacted: stop at the first such segment.
            for k in range(sealed):
                if (ends[k] > first_dirty
                        and segments[k].largest_timestamp > now_ms - cfg.min_compaction_lag_ms):
                    uncleanable = min(uncleanable, segments[k].base_offset)
                    break
        clean_bytes = dirty_bytes = 0
        first_dirty_segment: LogSegment | None = None
        for k in range(sealed):
            if ends[k] <= first_dirty:
                clean_bytes += sizes[k]
            elif first_dirty < uncleanable and segments[k].base_offset < uncleanable:
                dirty_bytes += sizes[k]
                if first_dirty_segment is None:
                    first_dirty_segment = segments[k]
        ratio = dirty_bytes / (clean_bytes + dirty_bytes) if dirty_bytes else 0.0
        overdue = False
        if first_dirty_segment is not None and cfg.max_compaction_lag_ms < LONG_MAX:
            ts = first_dirty_segment.first_batch_timestamp
            if ts is None or ts < 0:
                ts = first_dirty_segment.largest_timestamp
            overdue = now_ms - ts > cfg.max_compaction_lag_ms
        horizon_due = horizon is not None and horizon <= now_ms
        if not ((dirty_bytes and (ratio >= cfg.min_cleanable_dirty_ratio or overdue))
                or horizon_due):
            return None
        return _Candidate(plog, key, view, first_dirty, max(uncleanable, first_dirty), ratio)

    # -- cleaning ----------------------------------------------------------------------------

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """Clean the filthiest log that needs it; None when no log does (or on abort)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        cand = self._grab_filthiest(now_ms)
        if cand is None:
            return None
        try:
            return self._clean(cand, now_ms)
        except _Aborted as e:
            log.info("%s: cleaning abandoned: %s", cand.plog.name, e)
            return None
        except (OSError, CorruptSegmentError) as e:
            if cand.plog.closed or cand.plog.generation != cand.view.generation:
                # Truncated or closed while being read: not a problem of the data.
                log.info("%s: cleaning abandoned, the log changed: %s", cand.plog.name, e)
                return None
            with self._lock:
                self._failed_until[cand.key] = now_ms + FAILED_RETRY_MS
            raise
        except Exception:
            with self._lock:
                self._failed_until[cand.key] = now_ms + FAILED_RETRY_MS
            raise
        finally:
            with self._lock:
                self._in_progress.discard(cand.key)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _Aborted("the cleaner is shutting down")

    def _clean(self, cand: _Candidate, now_ms: int) -> CleanResult | None:
        started = time.monotonic()
        plog, view = cand.plog, cand.view
        cfg = view.config
        offset_map = OffsetMap(self._map_memory, cand.uncleanable - cand.first_dirty)
        map_end = self._build_offset_map(view, cand.first_dirty, cand.uncleanable, offset_map)
        segments, sizes = view.segments, view.sizes
        # Every sealed segment holding offsets below the mapped end is rewritten.
        todo = [(segments[k], sizes[k], segments[k + 1].base_offset)
                for k in range(len(segments) - 1) if segments[k].base_offset < map_end]
        state = _PassState(now_ms, map_end, cfg.delete_retention_ms, view.producer_last_batches,
                           _aborted_in(view))
        bytes_before = bytes_after = segments_after = 0
        # Old segments go into one cleaned segment while what is written so far plus the next
        # one's full size stays within segment.bytes (so the result can never overflow) and
        # the offsets fit 32-bit relative offsets. A group is swapped in as soon as it is done.
        out: _Output | None = None
        for seg, size, end in todo:
            if out is not None and (out.size + size > cfg.segment_bytes
                                    or end - 1 - out.segment.base_offset > INT32_MAX):
                bytes_before, bytes_after = (bytes_before + out.old_bytes,
                                             bytes_after + self._swap(plog, view, out))
                segments_after += 1
                out = None
            if out is None:
                out = _Output(LogSegment.create(
                    plog.dir_path, seg.base_offset, suffix=CLEANED_SUFFIX,
                    index_interval_bytes=cfg.index_interval_bytes,
                    max_index_bytes=cfg.segment_index_bytes), self._io_chunk)
            try:
                self._copy_survivors(seg, size, out, offset_map, state)
            except BaseException:
                out.segment.discard()
                raise
        if out is not None:
            bytes_before, bytes_after = (bytes_before + out.old_bytes,
                                         bytes_after + self._swap(plog, view, out))
            segments_after += 1
        with self._lock:
            if not plog.closed:
                self._checkpoints[cand.key] = map_end
            if state.next_horizon is not None:
                self._horizons[cand.key] = state.next_horizon
            else:
                self._horizons.pop(cand.key, None)
        self._write_checkpoint(cand.key[0])
        elapsed = time.monotonic() - started
        result = CleanResult(plog.topic, plog.partition, cand.first_dirty, map_end, len(todo),
                             segments_after, bytes_before, bytes_after, state.kept,
                             state.removed, elapsed)
        saved = 100 * (1 - bytes_after / bytes_before) if bytes_before else 0.0
        log.info("%s: cleaned offsets %d..%d (dirty ratio %.2f, map %d/%d keys): %d segment(s) "
                 "of %d bytes -> %d segment(s) of %d bytes (%.1f%% smaller); %d record(s) "
                 "kept, %d removed; %.3f s", plog.name, cand.first_dirty, map_end - 1,
                 cand.ratio, offset_map.size, offset_map.capacity, len(todo), bytes_before,
                 segments_after, bytes_after, saved, state.kept, state.removed, elapsed)
        return result

    def _build_offset_map(self, view: CleanerView, start: int, end: int,
                          offset_map: OffsetMap) -> int:
        """Map the keys of records in [start, end); returns where the mapping stopped."""
        segments, sizes = view.segments, view.sizes
        aborted = _aborted_in(view)
        for k in range(len(segments) - 1):
            seg = segments[k]
            if segments[k + 1].base_offset <= start:
                continue
            if seg.base_offset >= end:
                break
            pos = seg.offset_index.lookup(start) if start > seg.base_offset else 0
            for h, batch in _read_batches(seg, pos, sizes[k], self._io_chunk):
                self._check_stop()
                if h.last_offset < start:
                    continue
                if h.base_offset >= end:
                    return end
                if h.is_control or aborted.covers(h):
                    continue  # aborted records must never supersede committed ones
                try:
                    _, records = _records_of(h, batch)
                except (KafkaError, ValueError, IndexError) as e:
                    # Left unmapped: the batch and the older records of its keys stay.
                    log.warning("%s: batch at offset %d cannot be read for compaction: %s",
                                seg.log_path, h.base_offset, e)
                    continue
                base = h.base_offset
                for r in records:
                    offset = base + r.offset_delta
                    if offset < start:
                        continue
                    if offset >= end:
                        return end
                    if r.key is not None and not offset_map.put(key_digest(r.key), offset):
                        return offset  # the map is full: this pass covers what it holds
        return end

    def _copy_survivors(self, seg: LogSegment, size: int, out: _Output,
                        offset_map: OffsetMap, state: _PassState) -> None:
        """Append what survives of `seg` (its first `size` bytes) to the cleaned output."""
        for h, batch in _read_batches(seg, 0, size, self._io_chunk):
            self._check_stop()
            kept = self._filter_batch(h, batch, offset_map, state, seg)
            if kept is batch:
                out.writer.add(batch, h)
            elif kept is not None:
                out.writer.add(kept, parse_header(kept))
        for txn in seg.txn_index.entries:
            if txn.last_offset not in state.dropped_markers:
                out.segment.txn_index.append(txn)
        out.old.append(seg)
        out.old_bytes += size

    def _swap(self, plog: PartitionLog, view: CleanerView, out: _Output) -> int:
        """Seal and sync the cleaned segment, then swap it in; returns its size."""
        new = out.segment
        try:
            out.writer.flush()
            new.on_roll()
            new.flush()
            new.close_index_files()
            # Keep the old modification time: retention falls back on it for segments
            # without timestamps, and cleaning must not make data look younger.
            mtimes = [os.fstat(seg.fd).st_mtime for seg in out.old if not seg.file.closed]
            if mtimes:
                os.utime(new.log_path, (max(mtimes), max(mtimes)))
            self._check_stop()
        except BaseException:
            new.discard()
            raise
        if not plog.replace_segments(new, out.old, view.generation, self._swap_hook):
            new.discard()
            raise _Aborted("the log changed while it was being cleaned")
        return new.size

    def _filter_batch(self, h: BatchHeader, batch: bytes, offset_map: OffsetMap,
                      state: _PassState, seg: LogSegment) -> bytes | None:
        """The batch to write in place of `batch` (itself when unchanged), or None to drop it."""
        if h.is_control and h.base_offset < state.map_end:
            return _filter_marker(h, batch, state)
        out = self._filter_data(h, batch, offset_map, state, seg)
        if h.is_transactional and not h.is_control:
            pid = h.producer_id
            state.txn_data_kept[pid] = state.txn_data_kept.get(pid, False) or out is not None
        return out

    def _filter_data(self, h: BatchHeader, batch: bytes, offset_map: OffsetMap,
                     state: _PassState, seg: LogSegment) -> bytes | None:
        if h.is_control or h.base_offset >= state.map_end:
            # Control batches stay; so do batches past the mapped range (still dirty).
            state.kept += h.record_count
            return batch
        if state.aborted.covers(h):
            if state.protected.get(h.producer_id) == h.base_offset:
                state.kept += h.record_count
                return batch
            state.removed += h.record_count
            return None
        try:
            section, records = _records_of(h, batch)
        except (KafkaError, ValueError, IndexError) as e:
            log.warning("%s: batch at offset %d cannot be read for compaction; kept as is: %s",
                        seg.log_path, h.base_offset, e)
            state.kept += h.record_count
            return batch
        has_horizon = bool(h.attributes & DELETE_HORIZON_FLAG)
        horizon_passed = has_horizon and state.now_ms >= h.base_timestamp
        kept: list[_Record] = []
        tombstones_kept = False
        for r in records:
            offset = h.base_offset + r.offset_delta
            if offset >= state.map_end:
                kept.append(r)  # not deduplicated yet
                continue
            if r.key is None:
                continue  # a compacted topic cannot keep records without a key
            if offset_map.get(key_digest(r.key)) > offset:
                continue  # a later record of the same key exists
            if r.tombstone:
                if horizon_passed:
                    continue
                tombstones_kept = True
            kept.append(r)
        state.removed += len(records) - len(kept)
        if tombstones_kept:
            state.note_horizon(h.base_timestamp if has_horizon else state.horizon_for_new)
        if not kept:
            if state.protected.get(h.producer_id) == h.base_offset:
                # The producer's newest batch: producer state rebuilt from the log needs it.
                state.removed -= len(records)
                state.kept += len(records)
                return batch
            return None
        state.kept += len(kept)
        stamp = tombstones_kept and not has_horizon
        if len(kept) == len(records) and not stamp:
            return batch
        if stamp:
            return _rebuild_batch(h, section, kept, state.horizon_for_new,
                                  h.attributes | DELETE_HORIZON_FLAG)
        return _rebuild_batch(h, section, kept, h.base_timestamp, h.attributes)


def _filter_marker(h: BatchHeader, batch: bytes, state: _PassState) -> bytes | None:
    """A transaction marker stays while its transaction has data; then it is stamped with a
    delete horizon, and dropped by the first pass after it."""
    if state.txn_data_kept.pop(h.producer_id, False):
        state.kept += h.record_count
        return batch
    if h.attributes & DELETE_HORIZON_FLAG:
        if state.now_ms >= h.base_timestamp:
            state.removed += h.record_count
            state.dropped_markers.add(h.base_offset)
            return None
        state.kept += h.record_count
        state.note_horizon(h.base_timestamp)
        return batch
    state.kept += h.record_count
    try:
        section, records = _records_of(h, batch)
    except (KafkaError, ValueError, IndexError):
        return batch  # unreadable: kept as is, never dropped
    state.note_horizon(state.horizon_for_new)
    return _rebuild_batch(h, section, records, state.horizon_for_new,
                          h.attributes | DELETE_HORIZON_FLAG)


def _aborted_in(view: CleanerView) -> AbortedRanges:
    return AbortedRanges(t for seg in view.segments for t in seg.txn_index.entries)


__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CleanResult",
    "CleanerConfig",
    "LogCleaner",
    "OffsetMap",
    "key_digest",
]
