"""One node's `__consumer_offsets` on real logs in a temporary directory: a metadata image
that says which node leads each partition, a LogManager, the ReplicaManager and the
OffsetsTopic over them, and group coordinators reading from it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from moldau.broker.config import BrokerConfig
from moldau.broker.coordinators.group.coordinator import GroupCoordinator, GroupSettings
from moldau.broker.coordinators.group.group import JoinResult
from moldau.broker.coordinators.group.records import OFFSETS_TOPIC, partition_for
from moldau.broker.coordinators.group.replay import Entry
from moldau.broker.coordinators.group.store import OffsetsTopic, Record
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.controller import CreatedTopic, NewTopic
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import PartitionRecord, TopicRecord
from moldau.broker.replication.manager import ReplicaManager
from moldau.errors import KafkaError

NODE = 1
OTHER = 2
PARTITIONS = 3
SETTINGS = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)


def run(coro, timeout: float = 20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def group_in(partition: int, prefix: str = "group") -> str:
    """A group id whose __consumer_offsets partition is `partition`."""
    return next(f"{prefix}-{n}" for n in range(1000)
                if partition_for(f"{prefix}-{n}", PARTITIONS) == partition)


def subscription(*topics: str) -> bytes:
    out = len(topics).to_bytes(4, "big")
    for topic in topics:
        out += len(topic).to_bytes(2, "big") + topic.encode()
    return b"\0\0" + out + b"\0\0\0\0"


async def join(coordinator: GroupCoordinator, group: str, member_id: str = "",
               session_ms: int = 10000, client_id: str = "c") -> JoinResult:
    return await coordinator.join(group, member_id, None, client_id, "/127.0.0.1", session_ms,
                                  session_ms, "consumer", [("range", subscription("t"))],
                                  require_known_member_id=False)


async def stable_member(coordinator: GroupCoordinator, group: str, session_ms: int = 10000
                        ) -> JoinResult:
    """A member that joined and synced: the group is Stable with it."""
    joined = await join(coordinator, group, session_ms=session_ms)
    assert joined.error == 0
    synced = await coordinator.sync(group, joined.generation, joined.member_id, None,
                                    "consumer", "range", {joined.member_id: b"assigned"})
    assert synced.error == 0
    return joined


class NoController:
    """The topic exists already; nothing here creates topics."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def live_brokers(self) -> list[int]:
        return [NODE]

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool
                            ) -> Sequence[CreatedTopic | KafkaError]:
        raise AssertionError("the offsets topic exists")


class Gate:
    """Holds a partition's load in its thread until opened."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()

    def wrap(self, records: Iterator[Record]) -> Iterator[Record]:
        self.entered.set()
        if not self.opened.wait(10):
            raise TimeoutError("the gate was never opened")
        yield from records

    async def reached(self) -> None:
        await asyncio.to_thread(self.entered.wait, 10)


class OffsetsNode:
    def __init__(self, path: Path, topic_id: uuid.UUID | None = None) -> None:
        """`topic_id` of a node that used `path` before: the same topic, restarted."""
        self.image = MetadataImage()
        self.topic_id = topic_id or uuid.uuid4()
        self.offset = 0
        self._apply(TopicRecord(OFFSETS_TOPIC, self.topic_id))
        for partition in range(PARTITIONS):
            self._apply(PartitionRecord(self.topic_id, partition, (NODE, OTHER), (NODE, OTHER),
                                        NODE, leader_epoch=0))
        config = BrokerConfig({"node.id": str(NODE), "log.dirs": str(path)})
        self.logs = LogManager([str(path)], default_config=config.log_config({}))
        self.logs.load({})
        self.replicas = ReplicaManager(NODE, config, self.logs, self.image, 1)
        self.replicas.sync_with_image()
        self.topic = OffsetsTopic(NoController(self.image), self.replicas,
                                  partitions=PARTITIONS, replication_factor=1,
                                  segment_bytes=1 << 20)
        self.gates: dict[int, Gate] = {}  # partition -> gate for the next load of it

    def _apply(self, record: PartitionRecord | TopicRecord) -> None:
        self.offset += 1
        self.image.apply(self.offset, record)

    def move_leader(self, partition: int, leader: int, epoch: int) -> None:
        """The controller moved the partition's leadership (the replica manager follows)."""
        record = PartitionRecord(self.topic_id, partition, (NODE, OTHER), (NODE, OTHER),
                                 leader, leader_epoch=epoch)
        self._apply(record)
        self.replicas.on_metadata([record])

    def read(self, partition: int) -> Iterator[Record]:
        gate = self.gates.pop(partition, None)
        records = self.topic.read(partition)
        return records if gate is None else gate.wrap(records)

    def gate(self, partition: int) -> Gate:
        gate = self.gates[partition] = Gate()
        return gate

    def coordinator(self, read: Callable[[int], Iterable[Entry]] | None = None
                    ) -> GroupCoordinator:
        return GroupCoordinator(
            SETTINGS,
            lambda group_id, records, producer=None: self.topic.write(
                partition_for(group_id, PARTITIONS), records, producer),
            lambda _topic, _partition: True, partitions=PARTITIONS, read=read or self.read)

    def close(self) -> None:
        self.replicas.shutdown()
        self.logs.shutdown()
