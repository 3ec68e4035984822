"""The aborted transaction index of one segment: `<20-digit base offset>.txnindex`.

One entry per transaction whose ABORT marker is in the segment, in marker order, as Kafka
lays it out (34 bytes, big-endian):

    version int16 (0) | producer id int64 | first offset int64 | last offset int64 |
    last stable offset int64

`last offset` is the marker's offset; `last stable offset` is where the partition's LSO
stood once the marker was written. READ_COMMITTED fetches read these entries to tell the
consumer which producers' batches to drop, without looking at the records themselves.

Like Kafka, the file exists only once a segment has an aborted transaction; entries are
kept in memory (there are few) and appended to the file.
"""

from __future__ import annotations

import contextlib
import os
import struct
from bisect import bisect_left
from collections.abc import Iterable
from typing import NamedTuple

from moldau.records.batch import BatchHeader

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class TxnIndexCorruptError(Exception):
    """The file is not a whole number of valid entries; the segment must be recovered."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


def _last_offset(txn: AbortedTxn) -> int:
    return txn.last_offset


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd: int | None = None
        self._dirty = False

    def load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.entries = []
            return
        if len(data) % ENTRY_SIZE:
            raise TxnIndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of "
                                       f"{ENTRY_SIZE}")
        entries = []
        for version, *fields in _ENTRY.iter_unpack(data):
            if version != VERSION:
                raise TxnIndexCorruptError(f"{self.path}: unknown entry version {version}")
            entries.append(AbortedTxn(*fields))
        self.entries = entries

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} "
                             f"does not follow {self.entries[-1].last_offset}")
        self.entries.append(txn)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, txn.encode())
        self._dirty = True

    def ending_at_or_after(self, offset: int) -> list[AbortedTxn]:
        """Entries whose marker is at or after `offset` (entries are in marker order)."""
        start = bisect_left(self.entries, offset, key=_last_offset)
        return self.entries[start:] if start else self.entries

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset`."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.reset(keep)

    def reset(self, entries: list[AbortedTxn] | None = None) -> None:
        """Replace every entry; an index left empty has no file."""
        self.close()
        self.entries = list(entries or ())
        if not self.entries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(t.encode() for t in self.entries))
        finally:
            os.close(fd)
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        fd = self._fd if self._fd is not None else _open_existing(self.path)
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError:
            self._dirty = True
            raise
        finally:
            if fd is not self._fd:
                os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path, path)
        self.path = path


def _open_existing(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None


class AbortedRanges:
    """Which transactional data batches belong to aborted transactions, by producer."""

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in entries:
            self._by_producer.setdefault(t.producer_id, []).append(
                (t.first_offset, t.last_offset))

    def covers(self, h: BatchHeader) -> bool:
        if not h.is_transactional or h.is_control:
            return False
        ranges = self._by_producer.get(h.producer_id, ())
        return any(first <= h.base_offset <= last for first, last in ranges)
