"""Loading and unloading the state of a coordinator's partitions (the groups of
`__consumer_offsets`, the transactional ids of `__transaction_state`) as this node gains and
loses their leadership (what Kafka's GroupMetadataManager and TransactionStateManager do on
their schedulers).

Reading a partition can take long, so it runs in a thread; meanwhile requests for its
state get COORDINATOR_LOAD_IN_PROGRESS (group heartbeats excepted, see the group
coordinator). A load is installed only if the leadership it was started for still holds when
it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from moldau.broker.coordinators.group.ownership import Load, Ownership
from moldau.broker.coordinators.group.records import OFFSETS_TOPIC
from moldau.broker.coordinators.group.replay import replay
from moldau.broker.coordinators.topic import Entry
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.groups")
# A load that meets these has lost a race with a leadership change, which is not a failure.
LEADERSHIP_GONE = frozenset({ErrorCode.not_leader_or_follower,
                             ErrorCode.unknown_topic_or_partition})


State = TypeVar("State")
# Rebuilds the state of a partition from its records and markers (log order); stops early, with a
# partial result, once the callable says the load is no longer wanted.
Replay = Callable[[Iterable[Entry], Callable[[], bool]], dict[str, State]]


class PartitionLoader(Generic[State]):
    def __init__(self, read: Callable[[int], Iterable[Entry]],
                 install: Callable[[int, dict[str, State]], None],
                 unload: Callable[[int], int], *,
                 replay: Replay[Any] = replay, topic: str = OFFSETS_TOPIC,
                 noun: str = "group(s)", logger: logging.Logger = log) -> None:
        self._read = read  # a partition's records and markers in log order; in a thread
        self._install = install  # puts loaded state in service (on the loop)
        self._unload = unload  # drops a partition's state; returns how many entries
        self._replay_records = replay
        self._topic = topic
        self._noun = noun  # what the log lines count
        self._log = logger
        self.ownership = Ownership()
        self._tasks: set[asyncio.Task[None]] = set()

    def on_leadership(self, partition: int, is_leader: bool, epoch: int
                      ) -> asyncio.Task[None] | None:
        """Call on the event loop. Returns the load it started, if any."""
        if not is_leader:
            if self.ownership.resign(partition, epoch):
                dropped = self._unload(partition)
                self._log.log(logging.INFO if dropped else logging.DEBUG,
                              "Unloaded %d %s of %s-%d: no longer its leader (epoch %d)",
                              dropped, self._noun, self._topic, partition, epoch)
            return None
        load = self.ownership.elect(partition, epoch)
        if load is None:
            return None
        task = asyncio.get_running_loop().create_task(
            self._run(load), name=f"load-{self._topic}-{partition}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, load: Load) -> None:
        started = time.monotonic()
        try:
            loaded = await asyncio.to_thread(self._replay, load)
        except Exception as exc:
            if isinstance(exc, KafkaError) and exc.code in LEADERSHIP_GONE:
                # The partition moved on while it was read (e.g. a controlled shutdown); the
                # leadership listener hears of that too.
                self._log.info("Abandoned the load of %s-%d for leader epoch %d: %s",
                         self._topic, load.partition, load.epoch, exc.code.name)
            else:
                self._log.exception("Loading %s-%d failed", self._topic, load.partition)
            self.ownership.fail(load)
            return
        if not self.ownership.finish(load):
            self._log.info("Discarded the load of %s-%d for leader epoch %d: the leadership "
                     "moved while it ran", self._topic, load.partition, load.epoch)
            return
        self._install(load.partition, loaded)
        self._log.log(logging.INFO if loaded else logging.DEBUG,
                "Loaded %d %s of %s-%d (leader epoch %d) in %.0f ms", len(loaded), self._noun,
                self._topic, load.partition, load.epoch, (time.monotonic() - started) * 1000)

    def _replay(self, load: Load) -> dict[str, State]:
        return self._replay_records(self._read(load.partition), lambda: load.cancelled)

    async def wait(self) -> None:
        """Until every load under way has ended."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.ownership.abandon()
