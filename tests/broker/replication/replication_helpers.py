"""In-process replication clusters for the tests here.

A `Node` is a ReplicaManager with its own LogManager on a temporary directory, serving the
real request handlers on a loopback socket (the follower side connects to it with the
client's BrokerConnection, as between brokers). A `FakeController` stands in for the metadata
quorum: it keeps the partition records, checks and commits AlterPartition requests, and
publishes every record to each running node the way the broker does (image first, then
ReplicaManager.on_metadata). Time for the ISR rules comes from a shared `Clock`, so lag only
happens when a test says so.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from moldau.broker.config import BrokerConfig
from moldau.broker.handlers import apis as _apis  # noqa: F401 - registers every handler
from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.pool import RequestHandlerPool
from moldau.broker.handlers.registry import decode_frame, dispatch
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from moldau.broker.metrics.stats import BrokerTopicStats
from moldau.broker.network.channel import Request, RequestChannel
from moldau.broker.network.connection import Connection
from moldau.broker.network.server import SocketServer
from moldau.broker.replication.manager import ReplicaManager
from moldau.broker.security.authorizer import AllowEverything
from moldau.errors import ErrorCode, KafkaError
from moldau.records.codec import build_batch, iter_batches

TOPIC = "orders"
PRODUCE_VERSION = 9


def run(coro, timeout: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll until `predicate()` holds; fail (not hang) when it never does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def batch(*values: bytes, timestamp: int = 1_700_000_000_000,
          producer: tuple[int, int, int] | None = None) -> bytes:
    """`producer`: (producer id, epoch, base sequence) of an idempotent batch."""
    pid, epoch, sequence = producer if producer is not None else (-1, -1, -1)
    return build_batch([(None, value, [], timestamp) for value in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=sequence)


def log_bytes(node: Node, partition: int = 0) -> bytes:
    """Every batch of the partition's log, as stored (across segments)."""
    plog = node.replicas.partitions[(TOPIC, partition)].log
    out = bytearray()
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read_batches(offset, 1 << 24)
        batches = list(iter_batches(data))
        assert batches, f"no whole batch at offset {offset}"
        for position, header in batches:
            out += data[position:position + header.size]
            offset = header.next_offset
    return bytes(out)


class FakeController:
    def __init__(self) -> None:
        self.history: list[MetadataRecord] = []
        self.nodes: dict[int, Node] = {}
        self.partitions: dict[tuple[uuid.UUID, int], PartitionRecord] = {}
        self.topic_id = uuid.uuid4()
        self.alter_calls: list[tuple[int, tuple[int, ...]]] = []
        self.alter_gate: asyncio.Event | None = None  # set: AlterPartition answers wait

    def publish(self, *records: MetadataRecord) -> None:
        for record in records:
            self.history.append(record)
            if isinstance(record, PartitionRecord):
                self.partitions[(record.topic_id, record.partition)] = record
        for node in self.nodes.values():
            node.receive(records, len(self.history) - 1)

    def register(self, broker_id: int, port: int = 1) -> None:
        self.publish(RegisterBrokerRecord(broker_id, uuid.uuid4(),
                                          (("PLAINTEXT", "127.0.0.1", port),), fenced=False))

    async def create_topic(self, replicas: Sequence[int], isr: Sequence[int] | None = None,
                           leader: int | None = None, partitions: int = 1) -> None:
        """Publish the topic and wait until every running node hosts its replicas (their
        logs are created in each node's I/O pool)."""
        records: list[MetadataRecord] = [TopicRecord(TOPIC, self.topic_id)]
        for index in range(partitions):
            records.append(PartitionRecord(
                self.topic_id, index, tuple(replicas),
                tuple(replicas if isr is None else isr),
                replicas[0] if leader is None else leader))
        self.publish(*records)
        for node in list(self.nodes.values()):
            await node.replicas.metadata_applied()

    def record(self, partition: int = 0) -> PartitionRecord:
        return self.partitions[(self.topic_id, partition)]

    def elect(self, leader: int, *, isr: Sequence[int] | None = None,
              partition: int = 0) -> PartitionRecord:
        current = self.record(partition)
        record = replace(current, leader=leader,
                         isr=tuple(current.isr if isr is None else isr),
                         leader_epoch=current.leader_epoch + 1,
                         partition_epoch=current.partition_epoch + 1)
        self.publish(record)
        return record

    def reassign(self, replicas: Sequence[int], *, partition: int = 0) -> PartitionRecord:
        current = self.record(partition)
        record = replace(current, replicas=tuple(replicas),
                         isr=tuple(r for r in current.isr if r in replicas),
                         partition_epoch=current.partition_epoch + 1)
        self.publish(record)
        return record

    def alter_for(self, broker_id: int):
        async def alter_partition(topic_id: uuid.UUID, partition: int, leader_epoch: int,
                                  partition_epoch: int, new_isr: tuple[int, ...]
                                  ) -> PartitionRecord:
            self.alter_calls.append((broker_id, tuple(new_isr)))
            if self.alter_gate is not None:
                await self.alter_gate.wait()
            current = self.partitions[(topic_id, partition)]
            if current.leader != broker_id:
                raise KafkaError(ErrorCode.not_leader_or_follower)
            if leader_epoch < current.leader_epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch)
            if partition_epoch != current.partition_epoch:
                raise KafkaError(ErrorCode.invalid_update_version)
            record = replace(current, isr=tuple(new_isr),
                             partition_epoch=current.partition_epoch + 1)
            self.publish(record)
            return record
        return alter_partition


class Node:
    """One broker's replication side, serving Fetch / OffsetForLeaderEpoch / Produce."""

    def __init__(self, node_id: int, path: Path, controller: FakeController, clock: Clock,
                 **settings: str) -> None:
        self.node_id = node_id
        self.controller = controller
        self.config = BrokerConfig({
            "node.id": str(node_id), "log.dirs": str(path / f"node-{node_id}"),
            "listeners": "PLAINTEXT://127.0.0.1:0", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "20", "replica.socket.timeout.ms": "5000",
            **settings})
        self.image = MetadataImage()
        for offset, record in enumerate(controller.history):
            self.image.apply(offset, record)
        self.seen = len(controller.history)
        self.logs = LogManager(self.config.log_dirs, default_config=self.config.log_config({}))
        self.logs.load({})
        self.replicas = ReplicaManager(node_id, self.config, self.logs, self.image, 2,
                                       controller.alter_for(node_id), clock_ms=clock)
        self.replicas.sync_with_image()
        self.leadership: list[tuple[str, int, bool, int]] = []
        self.replicas.add_leadership_listener(
            lambda *change: self.leadership.append(change))
        self.topic_stats = BrokerTopicStats()  # the produce and fetch handlers count into it
        self.authorizer = AllowEverything()  # no authorizer.class.name, as a broker's default
        self.channel = RequestChannel(100)
        self.network = SocketServer(self.config, self.channel, self._decode, self._ready)
        self.handlers = RequestHandlerPool(self.channel, self._dispatch, 4)
        self.port = -1

    async def _ready(self) -> None:
        return None

    def _decode(self, frame: bytes, connection: Connection) -> object:
        return decode_frame(frame, connection, unsupported_version_response)

    async def _dispatch(self, request: Request) -> object:
        return await dispatch(self, request)  # type: ignore[arg-type]

    def receive(self, records: Sequence[MetadataRecord], offset: int) -> None:
        for record in records:
            self.image.apply(offset, record)
        self.seen = offset + 1
        self.replicas.on_metadata(records)

    def attach(self) -> None:
        """Receive metadata from now on and register with the controller (unfenced)."""
        missed = self.controller.history[self.seen:]
        if missed:  # published while this node was being built
            self.receive(missed, len(self.controller.history) - 1)
        self.controller.nodes[self.node_id] = self
        self.controller.register(self.node_id, self.port)

    async def start(self) -> None:
        """Serve, attach and start replicating."""
        [bound] = await self.network.start()
        self.port = bound.port
        self.handlers.start()
        self.attach()
        await self.replicas.start()

    async def stop(self) -> None:
        self.controller.nodes.pop(self.node_id, None)
        await self.network.stop()
        await self.handlers.stop()
        await self.replicas.stop()
        self.replicas.shutdown()
        await asyncio.to_thread(self.logs.shutdown)

    def partition(self, index: int = 0):
        return self.replicas.partitions[(TOPIC, index)]

    def log(self, index: int = 0):
        return self.partition(index).log

    async def produce(self, *values: bytes, acks: int = -1, timeout_ms: int = 10000,
                      partition: int = 0, producer: tuple[int, int, int] | None = None):
        records = batch(*values, producer=producer)
        [result] = await self.replicas.append([(TOPIC, partition, records)], acks=acks,
                                              produce_version=PRODUCE_VERSION,
                                              timeout_ms=timeout_ms)
        return result
