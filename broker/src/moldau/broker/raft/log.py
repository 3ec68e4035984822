"""The replicated log as the Raft state machine sees it, and an in-memory implementation.

Entries carry an offset, the epoch of the leader that created them and opaque payload bytes. The
log may start after offset 0 when a snapshot replaced its prefix; the snapshot's id is the end
offset it covers (exclusive) and the epoch of the last entry it covers, as in KIP-630.

`RaftNode` only reads the log (through `LogView`); the driver mutates it when it executes the
node's actions. The metadata log on disk is meant to implement the same interface.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# Epoch of a log that has never seen a leader; real epochs start at 1.
BASE_EPOCH = 0
# Answer of `end_offset_for_epoch` for an epoch older than everything the log still knows.
UNKNOWN_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    epoch: int
    payload: bytes
    # Control entries (a new leader's LeaderChange) take an offset but are not state-machine
    # records; a disk format must keep the flag, as Kafka's control batches do.
    control: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: OffsetAndEpoch
    data: bytes


class LogError(Exception):
    """A mutation that would break the log's structure (gaps, epochs going backwards...)."""


class LogView(Protocol):
    """The read side of the log, all `RaftNode` needs."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int: ...

    @property
    def entry_count(self) -> int: ...

    @property
    def latest_snapshot(self) -> Snapshot | None: ...

    def epoch_at(self, offset: int) -> int: ...

    def read(self, start: int, max_entries: int) -> tuple[LogEntry, ...]: ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch: ...


class RaftLog:
    """An in-memory log with a leader-epoch index and a single (latest) snapshot."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._start = 0
        self._snapshot: Snapshot | None = None
        # (epoch, first offset) of each run of equal epochs in `_entries`, oldest first: the
        # leader-epoch cache that answers `end_offset_for_epoch` without scanning entries.
        self._epochs: list[tuple[int, int]] = []

    # -- reading ------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def base_epoch(self) -> int:
        """Epoch of the last entry before the log start: the snapshot's, or 0 for none."""
        return self._snapshot.snapshot_id.epoch if self._snapshot is not None else BASE_EPOCH

    @property
    def last_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else self.base_epoch

    @property
    def entry_count(self) -> int:
        return len(self._entries)

    @property
    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def entry(self, offset: int) -> LogEntry:
        if not self._start <= offset < self.end_offset:
            raise IndexError(f"offset {offset} outside [{self._start}, {self.end_offset})")
        return self._entries[offset - self._start]

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at `offset`; `log_start_offset - 1` answers the snapshot's epoch."""
        if offset == self._start - 1:
            return self.base_epoch
        return self.entry(offset).epoch

    def read(self, start: int, max_entries: int) -> tuple[LogEntry, ...]:
        if start < self._start or start > self.end_offset:
            raise IndexError(f"read at {start} outside [{self._start}, {self.end_offset}]")
        first = start - self._start
        return tuple(self._entries[first:first + max_entries])

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` this log knows and the offset where it ends.

        The snapshot counts as an epoch ending at the log start. An epoch older than that gives
        (log start, UNKNOWN_EPOCH): the log cannot tell where it ended.
        """
        end = self.end_offset
        for run_epoch, run_start in reversed(self._epochs):
            if run_epoch <= epoch:
                return OffsetAndEpoch(end, run_epoch)
            end = run_start
        if self.base_epoch <= epoch:
            return OffsetAndEpoch(self._start, self.base_epoch)
        return OffsetAndEpoch(self._start, UNKNOWN_EPOCH)

    # -- writing ------------------------------------------------------------------------------

    def append(self, entries: Iterable[LogEntry]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise LogError(f"append at {entry.offset}, log ends at {self.end_offset}")
            last = self.last_epoch
            if entry.epoch < last:
                raise LogError(f"epoch {entry.epoch} at {entry.offset} after epoch {last}")
            if entry.epoch != last or not self._epochs:
                self._epochs.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def truncate(self, end_offset: int) -> None:
        """Remove every entry at or after `end_offset`."""
        if end_offset < self._start:
            raise LogError(f"truncate to {end_offset} below the log start {self._start}")
        if end_offset >= self.end_offset:
            return
        del self._entries[end_offset - self._start:]
        while self._epochs and self._epochs[-1][1] >= end_offset:
            self._epochs.pop()

    def flush(self) -> None:
        """Make everything appended so far durable; nothing to do in memory."""

    def snapshot(self, end_offset: int, epoch: int, state: bytes) -> None:
        """Keep `state` as the snapshot of offsets below `end_offset` and drop that prefix."""
        if not self._start < end_offset <= self.end_offset:
            raise LogError(f"snapshot at {end_offset} outside ({self._start}, {self.end_offset}]")
        if self.epoch_at(end_offset - 1) != epoch:
            raise LogError(f"snapshot epoch {epoch} but entry {end_offset - 1} has "
                           f"epoch {self.epoch_at(end_offset - 1)}")
        del self._entries[:end_offset - self._start]
        kept = [(e, s) for index, (e, s) in enumerate(self._epochs)
                if index + 1 == len(self._epochs) or self._epochs[index + 1][1] > end_offset]
        self._epochs = [(e, max(s, end_offset)) for e, s in kept if self._entries]
        self._start = end_offset
        self._snapshot = Snapshot(OffsetAndEpoch(end_offset, epoch), state)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log with a snapshot fetched from the leader."""
        self._entries.clear()
        self._epochs.clear()
        self._start = snapshot.snapshot_id.offset
        self._snapshot = snapshot
