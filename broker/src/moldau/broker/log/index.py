"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Both files are flat arrays of big-endian fixed-size entries, named after the segment's base
offset (`<20 digits>.index`, `<20 digits>.timeindex`):

    offset index entry (8 bytes):  relative offset int32 | file position int32
    time index entry (12 bytes):   timestamp int64 | relative offset int32

Entries are held in memory (arrays, so lookups are C-level bisects) and appended to the file.
A file that fails the sanity check on load is reported with `IndexCorruptError`; the segment
then rebuilds it from the log.

The offset index maps the *last* offset of a batch to the position where that batch starts, so
the largest entry <= a target offset names a batch at or before the one holding the target.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
INT32_MAX = 0x7FFFFFFF


class IndexCorruptError(Exception):
    """The index file on disk is inconsistent and must be rebuilt."""


def _is_sorted(values: array, strict: bool) -> bool:
    as_list = values.tolist()
    if as_list != sorted(as_list):
        return False
    return not strict or len(set(as_list)) == len(as_list)


class _IndexFile:
    """An append-only file of fixed-size entries; the fd is opened only while writing."""

    entry_size = 0

    def __init__(self, path: str, max_index_bytes: int) -> None:
        self.path = path
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._fd: int | None = None
        self._dirty = False

    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _write(self, data: bytes) -> None:
        os.write(self._open_fd(), data)
        self._dirty = True

    def _rewrite(self, data: bytes) -> None:
        fd = self._open_fd()
        os.ftruncate(fd, 0)
        if data:
            os.write(fd, data)
        self._dirty = True

    def _read_file(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def flush(self) -> None:
        if self._fd is not None and self._dirty:
            # Cleared first: a write racing with the fsync marks the file dirty again.
            self._dirty = False
            try:
                os.fsync(self._fd)
            except OSError:
                self._dirty = True
                raise

    def close(self) -> None:
        """Release the write fd; the in-memory entries stay usable for lookups."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class OffsetIndex(_IndexFile):
    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, max_index_bytes)
        self.base_offset = base_offset
        # Relative last offsets of indexed batches and their start positions, as int32 arrays
        # so a load is a byteswap rather than a Python loop.
        self._offsets = array("i")
        self._positions = array("i")

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def load(self, segment_size: int) -> None:
        """Read the file; raise IndexCorruptError when it does not fit the segment."""
        data = self._read_file()
        if len(data) % self.entry_size:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of 8")
        raw = array("i")
        raw.frombytes(data)
        if sys.byteorder == "little":
            raw.byteswap()
        rel, pos = raw[0::2], raw[1::2]
        if len(rel) and (min(rel) < 0 or min(pos) < 0 or max(pos) >= segment_size):
            raise IndexCorruptError(f"{self.path}: entries point outside the segment")
        if not _is_sorted(rel, strict=True) or not _is_sorted(pos, strict=True):
            raise IndexCorruptError(f"{self.path}: entries are not increasing")
        self._offsets = rel
        self._positions = pos

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.is_full or (self._offsets and rel <= self._offsets[-1]):
            return  # full (lookups then scan a little further), or not increasing
        self._offsets.append(rel)
        self._positions.append(position)
        self._write(_OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> int:
        """File position of the entry with the largest offset <= `offset` (0 if none)."""
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            rel = INT32_MAX
        i = bisect_right(self._offsets, rel)
        return self._positions[i - 1] if i else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches starting at or after `position`."""
        keep = bisect_left(self._positions, position)
        if keep < len(self._positions):
            del self._offsets[keep:]
            del self._positions[keep:]
            self._rewrite(self._encode())

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (absolute offset, position) and rewrite the file."""
        base = self.base_offset
        self._offsets = array("i", (o - base for o, _ in entries))
        self._positions = array("i", (p for _, p in entries))
        self._rewrite(self._encode())

    def _encode(self) -> bytes:
        raw = array("i", bytes(8 * len(self._offsets)))
        raw[0::2] = self._offsets
        raw[1::2] = self._positions
        if sys.byteorder == "little":
            raw.byteswap()
        return raw.tobytes()


class TimeIndex(_IndexFile):
    entry_size = _TIME_ENTRY.size

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, max_index_bytes)
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def load(self, next_offset_bound: int | None = None) -> None:
        data = self._read_file()
        if len(data) % self.entry_size:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of 12")
        n = len(data) // self.entry_size
        timestamps = array("q")
        offsets = array("q")
        base = self.base_offset
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            timestamps.append(ts)
            offsets.append(base + rel)
        if n and (offsets[0] < base
                  or (next_offset_bound is not None and offsets[-1] >= next_offset_bound)):
            raise IndexCorruptError(f"{self.path}: entries point outside the segment")
        if not _is_sorted(timestamps, strict=True) or not _is_sorted(offsets, strict=False):
            raise IndexCorruptError(f"{self.path}: entries are not increasing")
        self._timestamps = timestamps
        self._offsets = offsets

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when it raises the largest timestamp seen."""
        if timestamp < 0 or (self._timestamps and timestamp <= self._timestamps[-1]):
            return
        # One entry beyond the limit is allowed: the final one written when the segment rolls.
        if len(self._timestamps) > self.max_entries:
            return
        if self._offsets and offset < self._offsets[-1]:
            return
        if offset - self.base_offset > INT32_MAX:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        self._write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is < `timestamp` (the base offset if none).

        Every batch up to that entry has only smaller timestamps, so a forward scan for the
        first timestamp >= target can start at the batch holding the returned offset.
        """
        i = bisect_left(self._timestamps, timestamp)
        return self._offsets[i - 1] if i else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= `offset`."""
        keep = bisect_left(self._offsets, offset)
        if keep < len(self._offsets):
            del self._timestamps[keep:]
            del self._offsets[keep:]
            self._rewrite(self._encode())

    def reset(self, entries: list[tuple[int, int]]) -> None:
        self._timestamps = array("q", (t for t, _ in entries))
        self._offsets = array("q", (o for _, o in entries))
        self._rewrite(self._encode())

    def _encode(self) -> bytes:
        base = self.base_offset
        return b"".join(_TIME_ENTRY.pack(t, o - base)
                        for t, o in zip(self._timestamps, self._offsets, strict=True))
