"""Loading and unloading the groups of `__consumer_offsets` partitions as this node gains
and loses their leadership (what Kafka's GroupMetadataManager does on its scheduler).

Reading a partition can take long, so it runs in a thread; meanwhile requests for its
groups get COORDINATOR_LOAD_IN_PROGRESS (heartbeats excepted, see the coordinator). A load
is installed only if the leadership it was started for still holds when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from moldau.broker.coordinators.group.group import Group
from moldau.broker.coordinators.group.ownership import Load, Ownership
from moldau.broker.coordinators.group.replay import Entry, replay
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.groups")
# A load that meets these has lost a race with a leadership change, which is not a failure.
LEADERSHIP_GONE = frozenset({ErrorCode.not_leader_or_follower,
                             ErrorCode.unknown_topic_or_partition})


class PartitionLoader:
    def __init__(self, read: Callable[[int], Iterable[Entry]],
                 install: Callable[[int, dict[str, Group]], None],
                 unload: Callable[[int], int]) -> None:
        self._read = read  # a partition's records and markers in log order; in a thread
        self._install = install  # puts loaded groups in service (on the loop)
        self._unload = unload  # drops a partition's groups; returns how many
        self.ownership = Ownership()
        self._tasks: set[asyncio.Task[None]] = set()

    def on_leadership(self, partition: int, is_leader: bool, epoch: int
                      ) -> asyncio.Task[None] | None:
        """Call on the event loop. Returns the load it started, if any."""
        if not is_leader:
            if self.ownership.resign(partition, epoch):
                dropped = self._unload(partition)
                log.info("Unloaded %d group(s) of __consumer_offsets-%d: no longer its leader "
                         "(epoch %d)", dropped, partition, epoch)
            return None
        load = self.ownership.elect(partition, epoch)
        if load is None:
            return None
        task = asyncio.get_running_loop().create_task(
            self._run(load), name=f"load-groups-{partition}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, load: Load) -> None:
        started = time.monotonic()
        try:
            groups = await asyncio.to_thread(self._replay, load)
        except Exception as exc:
            if isinstance(exc, KafkaError) and exc.code in LEADERSHIP_GONE:
                # The partition moved on while it was read (e.g. a controlled shutdown); the
                # leadership listener hears of that too.
                log.info("Abandoned the load of __consumer_offsets-%d for leader epoch %d: %s",
                         load.partition, load.epoch, exc.code.name)
            else:
                log.exception("Loading groups of __consumer_offsets-%d failed", load.partition)
            self.ownership.fail(load)
            return
        if not self.ownership.finish(load):
            log.info("Discarded the load of __consumer_offsets-%d for leader epoch %d: the "
                     "leadership moved while it ran", load.partition, load.epoch)
            return
        self._install(load.partition, groups)
        log.log(logging.INFO if groups else logging.DEBUG,
                "Loaded %d group(s) of __consumer_offsets-%d (leader epoch %d) in %.0f ms",
                len(groups), load.partition, load.epoch, (time.monotonic() - started) * 1000)

    def _replay(self, load: Load) -> dict[str, Group]:
        return replay(self._read(load.partition), lambda: load.cancelled)

    async def wait(self) -> None:
        """Until every load under way has ended."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.ownership.abandon()
