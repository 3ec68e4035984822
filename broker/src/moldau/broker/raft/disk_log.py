"""The Raft log on disk: one append-only segment file and the latest snapshot.

A directory holds

- `<base offset, 20 digits>.log`: the entries from the log start offset on, one frame each:

      length uint32 | crc32c uint32 | offset int64 | epoch int32 | flags uint8 | payload

  `length` counts the bytes after itself; the CRC32C covers offset to the end of the payload.
  Flag bit 0 marks a control entry. Appends go to the end of the file and are durable after
  `flush()` (an fsync); `truncate()` cuts the file and fsyncs before it returns.

- `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`: the latest snapshot, named by its
  id as Kafka names snapshot files, written to a temporary file, fsynced and renamed:

      magic "MRSN" | version uint16 | crc32c uint32 | offset int64 | epoch int32 | data

  The CRC32C covers offset to the end of the data.

Taking a snapshot writes the checkpoint first, then a new segment (named by the snapshot's end
offset) with the entries above it, then deletes the old segment and older checkpoints. Opening
a directory finishes whatever a crash interrupted: it keeps the newest checkpoint, cuts the
segment at its first torn or corrupt frame (an unflushed tail may be lost; the Raft contract
allows it), drops the part of the log the snapshot covers, and fsyncs what remains so that it
is as durable as the node will assume.

Entries are also kept in memory (an in-memory `RaftLog` answers every read): the metadata log
is small because snapshots bound it, and this keeps the read path identical to the log the
state machine was tested with.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
from collections.abc import Iterable

import crc32c

from moldau.broker.log.checkpoint import atomic_write, fsync_dir
from moldau.broker.raft.log import LogEntry, LogError, OffsetAndEpoch, RaftLog, Snapshot

__all__ = ["DiskRaftLog", "LogCorruption", "checkpoint_name", "segment_name"]

log = logging.getLogger("moldau.broker.raft")

_FRAME = struct.Struct(">IIqiB")  # length, crc, offset, epoch, flags
_FRAME_BODY = _FRAME.size - 8  # offset + epoch + flags: what the CRC covers before the payload
_LENGTH_FIELD = 4
_MIN_LENGTH = _FRAME.size - _LENGTH_FIELD
_MAX_LENGTH = 1 << 30
_CONTROL = 0x01

_CHECKPOINT_MAGIC = b"MRSN"
_CHECKPOINT_VERSION = 0
_CHECKPOINT = struct.Struct(">4sHIqi")  # magic, version, crc, offset, epoch
_CHECKPOINT_CRC_FROM = 10  # offset, epoch and the data are covered

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_TEMP_RE = re.compile(r"^\d{20}(-\d{10})?\.(log|checkpoint)\.tmp$")


class LogCorruption(Exception):
    """The directory holds something recovery cannot repair without losing committed data."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def checkpoint_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


def encode_frame(entry: LogEntry) -> bytes:
    body = struct.pack(">qiB", entry.offset, entry.epoch, _CONTROL if entry.control else 0) \
        + entry.payload
    return struct.pack(">II", len(body) + 4, crc32c.crc32c(body)) + body


def _decode_frames(data: bytes, base_offset: int,
                   min_epoch: int = 0) -> tuple[list[LogEntry], list[int], int]:
    """Entries of a segment up to its first invalid frame: (entries, positions, valid bytes).

    A frame is invalid when it is cut short, its length or CRC is wrong, or it does not
    continue the log (next offset, an epoch not below the previous one nor `min_epoch`).
    """
    entries: list[LogEntry] = []
    positions: list[int] = []
    pos = 0
    expected = base_offset
    last_epoch = min_epoch
    size = len(data)
    while size - pos >= _FRAME.size:
        length, checksum, offset, epoch, flags = _FRAME.unpack_from(data, pos)
        end = pos + _LENGTH_FIELD + length
        if length < _MIN_LENGTH or length > _MAX_LENGTH or end > size:
            break
        if crc32c.crc32c(memoryview(data)[pos + 8:end]) != checksum:
            break
        if offset != expected or epoch < last_epoch or flags & ~_CONTROL:
            break
        entries.append(LogEntry(offset, epoch, data[pos + _FRAME.size:end],
                                bool(flags & _CONTROL)))
        positions.append(pos)
        expected += 1
        last_epoch = epoch
        pos = end
    return entries, positions, pos


def encode_checkpoint(snapshot: Snapshot) -> bytes:
    sid = snapshot.snapshot_id
    covered = struct.pack(">qi", sid.offset, sid.epoch) + snapshot.data
    return struct.pack(">4sHI", _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION,
                       crc32c.crc32c(covered)) + covered


def decode_checkpoint(path: str, raw: bytes) -> Snapshot:
    if len(raw) < _CHECKPOINT.size:
        raise LogCorruption(f"snapshot file {path} is truncated ({len(raw)} bytes)")
    magic, version, checksum, offset, epoch = _CHECKPOINT.unpack_from(raw)
    if magic != _CHECKPOINT_MAGIC or version != _CHECKPOINT_VERSION:
        raise LogCorruption(f"snapshot file {path} has an unknown header")
    if crc32c.crc32c(memoryview(raw)[_CHECKPOINT_CRC_FROM:]) != checksum:
        raise LogCorruption(f"snapshot file {path} fails its CRC check")
    return Snapshot(OffsetAndEpoch(offset, epoch), raw[_CHECKPOINT.size:])


class DiskRaftLog:
    """A durable `RaftLog`: the same reads and mutations, persisted in `directory`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._mem = RaftLog()
        self._positions: list[int] = []  # file position of each entry in the segment
        self._fd = -1
        self._segment_base = 0
        self._size = 0  # bytes of the segment file
        self._dirty = False  # appended since the last fsync
        self._recover()

    # -- reading: the in-memory log answers -----------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._mem.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._mem.end_offset

    @property
    def base_epoch(self) -> int:
        return self._mem.base_epoch

    @property
    def last_epoch(self) -> int:
        return self._mem.last_epoch

    @property
    def entry_count(self) -> int:
        return self._mem.entry_count

    @property
    def latest_snapshot(self) -> Snapshot | None:
        return self._mem.latest_snapshot

    @property
    def closed(self) -> bool:
        return self._fd < 0

    @property
    def segment_path(self) -> str:
        return os.path.join(self.directory, segment_name(self._segment_base))

    def entry(self, offset: int) -> LogEntry:
        return self._mem.entry(offset)

    def epoch_at(self, offset: int) -> int:
        return self._mem.epoch_at(offset)

    def read(self, start: int, max_entries: int) -> tuple[LogEntry, ...]:
        return self._mem.read(start, max_entries)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self._mem.end_offset_for_epoch(epoch)

    # -- writing ------------------------------------------------------------------------------

    def append(self, entries: Iterable[LogEntry]) -> None:
        """Write entries at the end of the segment; durable after the next `flush()`."""
        batch = list(entries)
        if not batch:
            return
        self._check_open()
        expected, last = self.end_offset, self.last_epoch
        for entry in batch:
            if entry.offset != expected:
                raise LogError(f"append at {entry.offset}, log ends at {expected}")
            if entry.epoch < last:
                raise LogError(f"epoch {entry.epoch} at {entry.offset} after epoch {last}")
            expected, last = expected + 1, entry.epoch
        frames = [encode_frame(entry) for entry in batch]
        data = b"".join(frames)
        _write_all(self._fd, data, self._size)
        pos = self._size
        for frame in frames:
            self._positions.append(pos)
            pos += len(frame)
        self._size = pos
        self._dirty = True
        self._mem.append(batch)

    def flush(self) -> None:
        """Fsync everything appended so far."""
        self._check_open()
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def truncate(self, end_offset: int) -> None:
        """Remove every entry at or after `end_offset`, durably."""
        self._check_open()
        if end_offset < self.log_start_offset:
            raise LogError(f"truncate to {end_offset} below the log start "
                           f"{self.log_start_offset}")
        if end_offset >= self.end_offset:
            return
        position = self._positions[end_offset - self.log_start_offset]
        os.ftruncate(self._fd, position)
        os.fsync(self._fd)
        self._dirty = False
        del self._positions[end_offset - self.log_start_offset:]
        self._size = position
        self._mem.truncate(end_offset)

    def snapshot(self, end_offset: int, epoch: int, state: bytes) -> None:
        """Store `state` as the snapshot of the offsets below `end_offset`; drop that prefix."""
        self._check_open()
        start = self.log_start_offset
        if not start < end_offset <= self.end_offset:
            raise LogError(f"snapshot at {end_offset} outside ({start}, {self.end_offset}]")
        if self.epoch_at(end_offset - 1) != epoch:
            raise LogError(f"snapshot epoch {epoch} but entry {end_offset - 1} has "
                           f"epoch {self.epoch_at(end_offset - 1)}")
        self.flush()
        snapshot = Snapshot(OffsetAndEpoch(end_offset, epoch), bytes(state))
        self._write_checkpoint(snapshot)
        kept = self._mem.read(end_offset, self.end_offset - end_offset)
        self._replace_segment(end_offset, kept)
        self._mem.snapshot(end_offset, epoch, snapshot.data)
        self._remove_stale_files()

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log with a snapshot fetched from the leader, durably.

        The snapshot must not start below the current log start (a node only installs a
        snapshot above everything it has committed): recovery trusts the newest checkpoint.
        """
        self._check_open()
        offset = snapshot.snapshot_id.offset
        if offset < self.log_start_offset:
            raise LogError(f"snapshot at {offset} below the log start {self.log_start_offset}")
        self._write_checkpoint(snapshot)
        self._replace_segment(offset, ())
        self._mem.install_snapshot(Snapshot(snapshot.snapshot_id, bytes(snapshot.data)))
        self._remove_stale_files()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DiskRaftLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._fd < 0:
            raise LogError(f"the log in {self.directory} is closed")

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _write_checkpoint(self, snapshot: Snapshot) -> None:
        atomic_write(self._path(checkpoint_name(snapshot.snapshot_id)),
                     encode_checkpoint(snapshot))

    def _replace_segment(self, base_offset: int, entries: Iterable[LogEntry]) -> None:
        """Make `<base_offset>.log` holding `entries` the segment, atomically and durably."""
        frames = [encode_frame(entry) for entry in entries]
        atomic_write(self._path(segment_name(base_offset)), b"".join(frames))
        old_base = self._segment_base
        self.close()
        if old_base != base_offset:
            _remove(self._path(segment_name(old_base)))
            fsync_dir(self.directory)
        self._open_segment(base_offset)
        pos = 0
        self._positions = []
        for frame in frames:
            self._positions.append(pos)
            pos += len(frame)
        self._size = pos

    def _open_segment(self, base_offset: int) -> None:
        self._segment_base = base_offset
        self._fd = os.open(self._path(segment_name(base_offset)), os.O_RDWR)
        self._dirty = False

    def _remove_stale_files(self) -> None:
        """Delete checkpoints older than the latest snapshot and segments other than ours."""
        snapshot = self.latest_snapshot
        keep = {segment_name(self._segment_base)}
        if snapshot is not None:
            keep.add(checkpoint_name(snapshot.snapshot_id))
        removed = False
        for name in os.listdir(self.directory):
            if (_SEGMENT_RE.match(name) or _CHECKPOINT_RE.match(name)) and name not in keep:
                _remove(self._path(name))
                removed = True
        if removed:
            fsync_dir(self.directory)

    # -- recovery -----------------------------------------------------------------------------

    def _recover(self) -> None:
        names = os.listdir(self.directory)
        for name in names:
            if _TEMP_RE.match(name):
                _remove(self._path(name))  # an atomic write that never got renamed
        checkpoints = sorted(
            (OffsetAndEpoch(int(m.group(1)), int(m.group(2))), name)
            for name in names if (m := _CHECKPOINT_RE.match(name)))
        segments = sorted((int(m.group(1)), name) for name in names
                          if (m := _SEGMENT_RE.match(name)))
        snapshot = None
        if checkpoints:
            snapshot_id, name = max(checkpoints, key=lambda c: (c[0].offset, c[0].epoch))
            path = self._path(name)
            with open(path, "rb") as handle:
                snapshot = decode_checkpoint(path, handle.read())
            if snapshot.snapshot_id != snapshot_id:
                raise LogCorruption(f"snapshot file {path} holds snapshot {snapshot.snapshot_id}")
        start = snapshot.snapshot_id.offset if snapshot is not None else 0
        beyond = [name for base, name in segments if base > start]
        if beyond:
            raise LogCorruption(f"segment {self._path(beyond[0])} starts above the log start "
                                f"{start} without a snapshot covering the gap")
        usable = [(base, name) for base, name in segments if base <= start]
        if snapshot is not None:
            self._mem.install_snapshot(snapshot)
        if not usable:
            atomic_write(self._path(segment_name(start)), b"")
            self._open_segment(start)
            self._remove_stale_files()
            return
        base, name = usable[-1]
        path = self._path(name)
        with open(path, "rb") as handle:
            data = handle.read()
        # Entries right after the snapshot cannot have an older epoch than the snapshot's.
        min_epoch = snapshot.snapshot_id.epoch if snapshot is not None and base == start else 0
        entries, positions, valid = _decode_frames(data, base, min_epoch)
        if valid < len(data):
            log.warning("Cutting %d bytes of torn or corrupt data from %s at byte %d",
                        len(data) - valid, path, valid)
            with open(path, "r+b") as handle:
                handle.truncate(valid)
                os.fsync(handle.fileno())
        if base == start:
            self._open_segment(base)
            os.fsync(self._fd)  # what the node reads at start-up it takes as durable
            self._mem.append(entries)
            self._positions = positions
            self._size = valid
        else:
            # A snapshot whose segment rewrite a crash interrupted: keep the entries above it
            # only if the segment agrees with the snapshot at its boundary.
            assert snapshot is not None
            boundary = start - 1 - base
            kept: list[LogEntry] = []
            if 0 <= boundary < len(entries) and \
                    entries[boundary].epoch == snapshot.snapshot_id.epoch:
                kept = entries[boundary + 1:]
            self._segment_base = base
            self._replace_segment(start, kept)
            self._mem.append(kept)
        self._remove_stale_files()


def _write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
