"""Which `__consumer_offsets` partitions this node coordinates.

A node coordinates the groups of the partitions it leads, once it has read their groups and
offsets from the log. Leadership changes arrive with the partition's leader epoch; one that
is older than the last seen is a late notification and is ignored, as Kafka's group
coordinator does.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.errors import ErrorCode


@dataclass(eq=False)
class Load:
    """One scheduled load of a partition. `cancelled` is read by the loading thread."""

    partition: int
    epoch: int
    cancelled: bool = False


class Ownership:
    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}  # latest leader epoch seen, per partition
        self._loading: dict[int, Load] = {}
        self._loaded: set[int] = set()

    def _stale(self, partition: int, epoch: int) -> bool:
        return epoch < self._epochs.get(partition, -1)

    def elect(self, partition: int, epoch: int) -> Load | None:
        """This node leads `partition` in `epoch`: the load to run, or None when the groups
        are in memory already or on their way (a new epoch of a leadership that never
        lapsed changes nothing in the log that this node did not write)."""
        if self._stale(partition, epoch):
            return None
        self._epochs[partition] = epoch
        current = self._loading.get(partition)
        if current is not None:
            current.epoch = epoch
            return None
        if partition in self._loaded:
            return None
        load = self._loading[partition] = Load(partition, epoch)
        return load

    def resign(self, partition: int, epoch: int) -> bool:
        """This node stopped leading `partition` (a negative epoch: whatever the epoch, as
        when the partition is gone). True when its groups are in memory and must go."""
        if epoch >= 0:
            if self._stale(partition, epoch):
                return False
            self._epochs[partition] = epoch
        load = self._loading.pop(partition, None)
        if load is not None:
            load.cancelled = True
        if partition in self._loaded:
            self._loaded.discard(partition)
            return True
        return False

    def finish(self, load: Load) -> bool:
        """The load is done: True when it is still wanted, and the partition is now owned.
        False when leadership moved (and maybe came back) while it ran."""
        if self._loading.get(load.partition) is not load:
            return False
        del self._loading[load.partition]
        self._loaded.add(load.partition)
        return True

    def fail(self, load: Load) -> None:
        """The load failed: the partition is not coordinated until it is elected again."""
        if self._loading.get(load.partition) is load:
            del self._loading[load.partition]

    def abandon(self) -> None:
        """Shutting down: loads under way stop early and are not installed."""
        for load in self._loading.values():
            load.cancelled = True
        self._loading.clear()

    def epoch(self, partition: int) -> int:
        """The latest leader epoch seen for the partition (-1: none): the coordinator epoch
        a transaction coordinator stamps on its markers."""
        return self._epochs.get(partition, -1)

    def error(self, partition: int) -> ErrorCode:
        """NONE when this node coordinates the partition's groups now."""
        if partition in self._loaded:
            return ErrorCode.none
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def owned(self) -> set[int]:
        return set(self._loaded)
