"""A coordinator's internal topic (`__consumer_offsets`, `__transaction_state`): created on
first need, compacted, written with acks=all by the leader of each partition, and read back
when the leadership of a partition comes to this node. Reading gives the transaction
markers too: offsets committed in a transaction (TxnOffsetCommit) end at them."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from moldau.broker.metadata.controller import CreatedTopic, NewTopic
from moldau.broker.replication.manager import ReplicaManager
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import NO_SEQUENCE
from moldau.records.codec import build_batch, decode_records, iter_batches
from moldau.records.control import read_end_txn_marker

log = logging.getLogger("moldau.broker.coordinators")

READ_CHUNK = 1 << 20
# Kafka's offsets.commit.timeout.ms default: how long a write waits for the in-sync replicas.
COMMIT_TIMEOUT_MS = 5000
# The records are built here, so any Produce version's rules hold; this is the newest.
PRODUCE_VERSION = 12

Record = tuple[bytes, bytes | None]


class LogRecord(NamedTuple):
    """A keyed record of a coordinator topic, as read back from the log."""

    key: bytes
    value: bytes | None
    offset: int = -1
    producer_id: int = -1  # the producer of a transactional batch; -1 otherwise


class TxnEnd(NamedTuple):
    """A COMMIT or ABORT marker: the producer's transaction ends here."""

    producer_id: int
    commit: bool


Entry = LogRecord | TxnEnd


@dataclass(frozen=True)
class TxnProducer:
    """The transactional producer whose transaction a write belongs to (TxnOffsetCommit)."""

    producer_id: int
    epoch: int


class TopicCreator(Protocol):
    """The controller (or the channel to it) as far as creating the topic goes."""

    def live_brokers(self) -> list[int]: ...

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool
                            ) -> Sequence[CreatedTopic | KafkaError]: ...


class CoordinatorTopic:
    def __init__(self, name: str, controller: TopicCreator, replicas: ReplicaManager, *,
                 partitions: int, replication_factor: int, segment_bytes: int,
                 commit_timeout_ms: int = COMMIT_TIMEOUT_MS, min_isr: int | None = None
                 ) -> None:
        """`min_isr`: the topic's min.insync.replicas, capped by its replication factor
        (None: the broker's default)."""
        self.name = name
        self.controller = controller
        self.replicas = replicas
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes
        self.commit_timeout_ms = commit_timeout_ms
        self.min_isr = min_isr

    @property
    def exists(self) -> bool:
        return self.name in self.replicas.image.topics

    async def ensure_created(self) -> None:
        """Create the topic on first use, as Kafka does on the first FindCoordinator. Its
        replication factor is capped by the brokers alive, as Kafka's is."""
        if self.exists:
            return
        factor = min(self.replication_factor, len(self.controller.live_brokers()))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                   "compression.type": "producer"}
        if self.min_isr is not None:
            configs["min.insync.replicas"] = str(min(self.min_isr, factor))
        topic = NewTopic(self.name, self.partitions, factor, configs=configs)
        [result] = await self.controller.create_topics([topic], validate_only=False)
        if isinstance(result, KafkaError) and \
                result.code is not ErrorCode.topic_already_exists:
            raise result

    def led_partitions(self) -> list[tuple[int, int]]:
        """(partition, leader epoch) of every partition this node leads now."""
        led = []
        for partition in range(self.partitions) if self.exists else ():
            try:
                led.append((partition, self.replicas.leader(self.name, partition)
                            .leader_epoch))
            except KafkaError:
                continue
        return led

    async def write(self, partition: int, records: list[Record],
                    producer: TxnProducer | None = None) -> int:
        """Append to the partition and wait for the in-sync replicas, as Kafka's
        coordinator appends with acks=-1; with `producer`, as a batch of its transaction
        (with no sequence: the coordinator's writes are not deduplicated). Returns the
        offset of the first record; raises the append's KafkaError."""
        now = int(time.time() * 1000)
        rows = [(key, value, [], now) for key, value in records]
        batch = build_batch(rows) if producer is None else build_batch(
            rows, producer_id=producer.producer_id, producer_epoch=producer.epoch,
            base_sequence=NO_SEQUENCE, is_transactional=True)
        [result] = await self.replicas.append(
            [(self.name, partition, batch)], acks=-1, produce_version=PRODUCE_VERSION,
            timeout_ms=self.commit_timeout_ms, internal_topics_allowed=True)
        if result.error is not ErrorCode.none:
            raise KafkaError(result.error, result.message)
        return result.base_offset

    def read(self, partition: int) -> Iterator[Entry]:
        """Every keyed record and transaction marker of a partition this node leads, in
        offset order."""
        partition_log = self.replicas.leader(self.name, partition).log
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            data = partition_log.read_batches(offset, READ_CHUNK, max_offset=end)
            progressed = False
            for position, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                batch = memoryview(data)[position:position + header.size]
                if header.is_control:
                    marker = read_end_txn_marker(batch, header)
                    if marker is not None:
                        yield TxnEnd(header.producer_id, not marker.is_abort)
                else:
                    producer_id = header.producer_id if header.is_transactional else -1
                    for record in decode_records(batch):
                        record_offset = header.base_offset + record.offset_delta
                        if record.key is not None and record_offset >= offset:
                            yield LogRecord(record.key, record.value, record_offset,
                                            producer_id)
                offset = header.next_offset
                progressed = True
            if not progressed:
                break

    def read_all(self) -> Iterator[Entry]:
        for partition in range(self.partitions):
            try:
                yield from self.read(partition)
            except KafkaError:
                continue  # not hosted here
