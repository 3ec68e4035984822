"""Leader epoch cache: the first offset written in each leader epoch of a partition.

Persisted as `leader-epoch-checkpoint` (see checkpoint.py), rewritten whenever it changes;
changes are rare (a new leader epoch, a truncation, log start moving past an epoch).
"""

from __future__ import annotations

import logging
import os

from .checkpoint import LEADER_EPOCH_CHECKPOINT, CheckpointError, read_epochs, write_epochs

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, dir_path: str) -> None:
        self.path = os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT)
        try:
            self._entries = read_epochs(self.path)
        except CheckpointError as e:
            log.warning("Ignoring unreadable leader epoch checkpoint: %s", e)
            self._entries = []

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that `epoch` starts at `start_offset` (ignored unless it is a newer epoch)."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return
        # A new epoch cannot start before offsets already claimed by earlier epochs.
        while self._entries and self._entries[-1][1] > start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, first offset after that epoch).

        The latest epoch ends at the log end; an epoch older than all known ones ends where the
        first known one starts; (-1, -1) for an undefined or not yet known epoch.
        """
        if epoch < 0 or not self._entries or epoch > self._entries[-1][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._entries[-1][0]:
            return epoch, log_end_offset
        floor = epoch
        for e, start in self._entries:
            if e > epoch:
                return floor, start
            floor = e
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # unreachable: epoch < latest

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        keep = [(e, s) for e, s in self._entries if s < end_offset]
        if keep != self._entries:
            self._entries = keep
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs wholly before it."""
        before = [i for i, (_, s) in enumerate(self._entries) if s < start_offset]
        if not before:
            return
        last = before[-1]
        keep = [(self._entries[last][0], start_offset)] + self._entries[last + 1:]
        if keep != self._entries:
            self._entries = keep
            self._save()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._save()

    def _save(self) -> None:
        write_epochs(self.path, self._entries)
