"""One log segment: `<20-digit base offset>.log` plus its offset, time and aborted
transaction indexes.

Writes go through `os.pwrite` on the file descriptor, reads through `os.pread`; only the 61-byte
batch headers are ever parsed here. The data file object (`LogSegment.file`) is also what Fetch
hands to sendfile, so a deleted segment never closes it explicitly: its files are renamed to
`.deleted`, unlinked after `file.delete.delay.ms`, and the descriptor is closed once the last
reference (the segment or an in-flight `FileSlice`) goes away.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from moldau.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    parse_header,
)

from .index import INT32_MAX, IndexCorruptError, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex, TxnIndexCorruptError

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
DELETED_SUFFIX = ".deleted"
# A segment being written by the log cleaner, and one about to replace the segments it covers
# (see PartitionLog.replace_segments and the start-up recovery of interrupted swaps).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
MAGIC_V2 = 2
SCAN_CHUNK = 8192
RECOVER_CHUNK = 1 << 20


class CorruptSegmentError(Exception):
    """A batch header on disk does not parse; the segment needs recovery."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class SegmentFile(io.FileIO):
    """The segment's data file; also the object given to sendfile."""

    def __del__(self) -> None:
        # Deleted segments are closed by reference counting once no read holds them; closing
        # here (rather than in FileIO's finalizer) avoids an "unclosed file" warning.
        with contextlib.suppress(Exception):
            self.close()


def _open_data_file(path: str, truncate: bool) -> SegmentFile:
    extra = os.O_CREAT | (os.O_TRUNC if truncate else 0)
    return SegmentFile(path, "r+", opener=lambda p, flags: os.open(p, flags | extra, 0o644))


class _ChunkReader:
    """Serves byte ranges of a file from a read-ahead buffer to keep pread calls few."""

    def __init__(self, fd: int, end: int, chunk: int) -> None:
        self._fd = fd
        self._end = end
        self._chunk = chunk
        self._buf = b""
        self._start = 0

    def read(self, pos: int, n: int) -> memoryview:
        """Up to `n` bytes at `pos` (fewer only at the end of the range)."""
        off = pos - self._start
        if off < 0 or off + n > len(self._buf):
            want = min(max(n, self._chunk), self._end - pos)
            self._buf = os.pread(self._fd, want, pos) if want > 0 else b""
            self._start = pos
            off = 0
        return memoryview(self._buf)[off:off + n]


class LogSegment:
    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_bytes: int, roll_jitter_ms: int = 0, truncate: bool = False,
                 suffix: str = "") -> None:
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        # Extra suffix after every file name (`.cleaned`, `.swap`); "" for a live segment.
        self.suffix = suffix
        self.log_path = self._path(LOG_SUFFIX, suffix)
        self.file = _open_data_file(self.log_path, truncate)
        self.fd = self.file.fileno()
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(self._path(INDEX_SUFFIX, suffix), base_offset,
                                        max_index_bytes)
        self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX, suffix), base_offset,
                                    max_index_bytes)
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX, suffix))
        self.next_offset = base_offset
        self.max_timestamp = -1
        # Base offset of the batch holding max_timestamp; the exact record is found on demand.
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self.created_ms = int(time.time() * 1000)
        self._bytes_since_index = 0
        self._dirty = False
        # Serializes fsync (done outside the log's lock) against closing descriptors.
        self._io_lock = threading.Lock()
        self.deleted = False

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def create(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int,
               max_index_bytes: int, roll_jitter_ms: int = 0, suffix: str = "") -> LogSegment:
        """A new, empty segment (any stale files with the same name are emptied).

        A `suffix` (e.g. `.cleaned`) keeps the files out of the log's sight until
        `set_suffix("")` gives them their final names.
        """
        seg = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes,
                  max_index_bytes=max_index_bytes, roll_jitter_ms=roll_jitter_ms,
                  truncate=True, suffix=suffix)
        seg.offset_index.reset([])
        seg.time_index.reset([])
        seg.txn_index.reset()
        return seg

    @classmethod
    def open(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int,
             max_index_bytes: int, roll_jitter_ms: int = 0) -> LogSegment:
        """Open an existing segment without validating its batches (see `load`)."""
        return cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes,
                   max_index_bytes=max_index_bytes, roll_jitter_ms=roll_jitter_ms)

    def load(self) -> str | None:
        """Load indexes and the tail state. Returns why a recovery is needed, or None."""
        if self.size and not (os.path.exists(self.offset_index.path)
                              and os.path.exists(self.time_index.path)):
            return "index file missing"
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
            self.txn_index.load()
        except (IndexCorruptError, TxnIndexCorruptError) as e:
            return f"corrupt index ({e})"
        try:
            self._load_tail_state()
        except CorruptSegmentError as e:
            return f"corrupt batch header ({e})"
        return None

    def _load_tail_state(self) -> None:
        """Derive next offset and max timestamp from the last index entries plus a short scan."""
        _, start = self.offset_index.last_entry
        next_offset = self.base_offset
        scan_max, scan_max_offset = -1, self.base_offset
        for _, h in self.iter_headers(start):
            next_offset = h.next_offset
            if h.max_timestamp > scan_max:
                scan_max, scan_max_offset = h.max_timestamp, h.base_offset
        if start > 0 and next_offset == self.base_offset:
            raise CorruptSegmentError(f"{self.log_path}: no batch at indexed position {start}")
        self.time_index.truncate_to_offset(next_offset)
        self.next_offset = next_offset
        last = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = last or (-1, self.base_offset)
        if scan_max > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = scan_max, scan_max_offset
        self._bytes_since_index = self.size - start
        self.first_batch_timestamp = None
        if self.size >= HEADER_SIZE:
            first = parse_header(os.pread(self.fd, HEADER_SIZE, 0))
            self.first_batch_timestamp = first.max_timestamp

    def _path(self, kind: str, suffix: str) -> str:
        return os.path.join(self.dir_path, segment_file_name(self.base_offset, kind) + suffix)

    def set_suffix(self, suffix: str) -> None:
        """Rename the three files to end in `suffix` ("" for the final names).

        The data file goes last: its name is what start-up recovery goes by, so the indexes
        are never left behind under the old suffix once the data file has moved.
        """
        with self._io_lock:
            self.offset_index.rename(self._path(INDEX_SUFFIX, suffix))
            self.time_index.rename(self._path(TIME_INDEX_SUFFIX, suffix))
            self.txn_index.rename(self._path(TXN_INDEX_SUFFIX, suffix))
            new_log_path = self._path(LOG_SUFFIX, suffix)
            os.rename(self.log_path, new_log_path)
            self.log_path = new_log_path
            self.suffix = suffix

    # -- writing ---------------------------------------------------------------------------

    def append(self, base_offset: int, last_offset: int, max_timestamp: int,
               offset_of_max_timestamp: int, data: bytes | bytearray | memoryview,
               batches: Sequence[BatchHeader] | None = None) -> None:
        """Write `data` (batches with final offsets) at the end with a single pwrite.

        `batches` are the headers of the batches in `data`, in order, with their final base
        offsets and timestamps; parsed from `data` when not given.
        """
        if last_offset - self.base_offset > INT32_MAX or base_offset < self.next_offset:
            raise ValueError(f"offsets {base_offset}..{last_offset} do not fit segment "
                             f"{self.base_offset} ending at {self.next_offset}")
        if batches is None:
            batches = list(iter_buffer_headers(data))
        start = self.size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], start + written)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)  # never leave a torn batch behind a live log
            raise
        self.size = start + written
        self._dirty = True
        if start == 0:
            self.first_batch_timestamp = batches[0].max_timestamp
        pos = start
        running_max, running_offset = self.max_timestamp, self.offset_of_max_timestamp
        for h in batches:
            if h.max_timestamp > running_max:
                running_max, running_offset = h.max_timestamp, h.base_offset
            if self._bytes_since_index > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, pos)
                self.time_index.maybe_append(running_max, running_offset)
                self._bytes_since_index = 0
            self._bytes_since_index += h.size
            pos += h.size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = (max_timestamp,
                                                                offset_of_max_timestamp)
        self.next_offset = last_offset + 1

    def should_roll(self, incoming_bytes: int, incoming_max_timestamp: int,
                    incoming_last_offset: int, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> str | None:
        """Why the next append must go to a new segment, or None. An empty segment never rolls."""
        if self.size == 0:
            return None
        if self.size + incoming_bytes > segment_bytes:
            return "segment.bytes reached"
        if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0:
            waited = incoming_max_timestamp - self.first_batch_timestamp
        else:
            waited = now_ms - self.created_ms
        if waited > segment_ms - self.roll_jitter_ms:
            return "segment.ms elapsed"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index full"
        if incoming_last_offset - self.base_offset > INT32_MAX:
            return "relative offset overflow"
        return None

    def on_roll(self) -> None:
        """The segment stops taking appends: record its final largest timestamp."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # -- reading ---------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[
            tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start`; raises CorruptSegmentError on junk."""
        end = self.size if end is None else end
        reader = _ChunkReader(self.fd, end, SCAN_CHUNK)
        pos = start
        while pos < end:
            raw = reader.read(pos, HEADER_SIZE)
            if len(raw) < HEADER_SIZE:
                raise CorruptSegmentError(f"{self.log_path}: partial header at {pos}")
            h = parse_header(raw)
            if h.magic != MAGIC_V2 or h.size < HEADER_SIZE or pos + h.size > end:
                raise CorruptSegmentError(f"{self.log_path}: bad batch header at {pos}")
            yield pos, h
            pos += h.size

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= `offset`: (its position, its header)."""
        for pos, h in self.iter_headers(self.offset_index.lookup(offset)):
            if h.last_offset >= offset:
                return pos, h
        return None

    def find_timestamp(self, timestamp: int, min_offset: int) -> Iterator[
            tuple[int, BatchHeader]]:
        """Batches that may hold the first record with timestamp >= `timestamp`, in order."""
        start_offset = max(self.time_index.lookup_before(timestamp), min_offset)
        for pos, h in self.iter_headers(self.offset_index.lookup(start_offset)):
            if h.last_offset >= min_offset and h.max_timestamp >= timestamp:
                yield pos, h

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when no batch carries one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.fd).st_mtime * 1000)

    # -- recovery and truncation -------------------------------------------------------------

    def recover(self, max_batch_bytes: int) -> int:
        """Validate every batch, cut the file at the first bad one, rebuild both indexes.

        Returns the number of bytes truncated. The aborted transaction index is emptied: only
        the log, replaying producer state over the batches, can re-derive it.
        """
        file_size = os.fstat(self.fd).st_size
        reader = _ChunkReader(self.fd, file_size, RECOVER_CHUNK)
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        pos = 0
        next_offset = self.base_offset
        max_ts, max_ts_offset = -1, self.base_offset
        since_index = 0
        first_ts: int | None = None
        problem = None
        while pos < file_size:
            if file_size - pos < HEADER_SIZE:
                problem = "partial batch header"
                break
            h = parse_header(reader.read(pos, HEADER_SIZE))
            size = h.size
            if h.magic != MAGIC_V2:
                problem = f"magic {h.magic}"
                break
            if size < HEADER_SIZE or size > max_batch_bytes + LOG_OVERHEAD:
                problem = f"batch size {size}"
                break
            if pos + size > file_size:
                problem = "batch extends past the end of the file"
                break
            if (h.base_offset < next_offset or h.last_offset_delta < 0
                    or h.last_offset - self.base_offset > INT32_MAX):
                problem = f"offsets {h.base_offset}..{h.last_offset} out of sequence"
                break
            if compute_crc(reader.read(pos, size), 0, size) != h.crc:
                problem = "CRC mismatch"
                break
            if first_ts is None:
                first_ts = h.max_timestamp
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.base_offset
            if since_index > self.index_interval_bytes:
                offset_entries.append((h.last_offset, pos))
                if max_ts >= 0 and (not time_entries or max_ts > time_entries[-1][0]):
                    time_entries.append((max_ts, max_ts_offset))
                since_index = 0
            since_index += size
            next_offset = h.next_offset
            pos += size
        truncated = file_size - pos
        if truncated:
            log.warning("%s: %s at position %d; truncating %d bytes", self.log_path, problem,
                        pos, truncated)
            os.ftruncate(self.fd, pos)
        self.size = pos
        self.offset_index.reset(offset_entries)
        self.time_index.reset(time_entries)
        self.txn_index.reset()
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.first_batch_timestamp = first_ts
        self._bytes_since_index = since_index
        self._dirty = True
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after; returns bytes removed."""
        found = self.find_position(offset)
        if found is None:
            return 0
        pos, _ = found
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self._dirty = True
        self.offset_index.truncate_to_position(pos)
        self.txn_index.truncate_to(offset)
        self._load_tail_state()  # also drops time index entries past the new end
        return removed

    # -- durability and lifecycle ------------------------------------------------------------

    def flush(self) -> None:
        with self._io_lock:
            if self.deleted or self.file.closed:
                return
            if self._dirty:
                # Cleared first: an append racing with the fsync marks the file dirty again.
                self._dirty = False
                try:
                    os.fsync(self.fd)
                except OSError:
                    self._dirty = True
                    raise
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    def close_index_files(self) -> None:
        """Release index write descriptors (kept in memory); done once a segment is sealed."""
        with self._io_lock:
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()

    def close(self) -> None:
        with self._io_lock:
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()
            self.file.close()

    def mark_deleted(self) -> None:
        """Rename the files to `.deleted`; the data file stays open for in-flight reads."""
        with self._io_lock:
            self.deleted = True
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()
            for path in self._paths():
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, path + DELETED_SUFFIX)

    def unlink_deleted(self) -> None:
        for path in self._paths():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + DELETED_SUFFIX)

    def delete(self) -> None:
        """Remove the segment's files now (the data file closes when no read holds it)."""
        self.mark_deleted()
        self.unlink_deleted()

    def discard(self) -> None:
        """Close and remove the files of a segment no reader has seen (an abandoned cleaning)."""
        self.close()
        for path in self._paths():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _paths(self) -> tuple[str, ...]:
        return (self.log_path, self.offset_index.path, self.time_index.path,
                self.txn_index.path)

    def __repr__(self) -> str:
        return (f"LogSegment(base={self.base_offset}, size={self.size}, "
                f"next={self.next_offset})")


def iter_buffer_headers(data: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Headers of the batches laid back to back in an in-memory buffer."""
    pos = 0
    n = len(data)
    while pos + HEADER_SIZE <= n:
        h = parse_header(data, pos)
        yield h
        pos += h.size


class DeletionScheduler:
    """Runs delayed file deletions on one daemon thread (Kafka's file.delete.delay.ms)."""

    def __init__(self) -> None:
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, delay_ms: int, action: Callable[[], None]) -> None:
        if delay_ms <= 0:
            _run_quietly(action)
            return
        with self._cond:
            self._seq += 1
            heapq.heappush(self._queue, (time.monotonic() + delay_ms / 1000, self._seq, action))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-file-deleter",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def run_pending(self) -> None:
        """Run every scheduled deletion now (at shutdown)."""
        with self._cond:
            actions = [a for _, _, a in sorted(self._queue)]
            self._queue.clear()
        for action in actions:
            _run_quietly(action)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue or self._queue[0][0] > time.monotonic():
                    timeout = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cond.wait(timeout)
                _, _, action = heapq.heappop(self._queue)
            _run_quietly(action)


def _run_quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:
        log.exception("Scheduled file deletion failed")


_default_scheduler = DeletionScheduler()


def default_scheduler() -> DeletionScheduler:
    return _default_scheduler
