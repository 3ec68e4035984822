"""The `__consumer_offsets` topic: where the group coordinator keeps groups and offsets."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from moldau.broker.metadata.controller import Controller, NewTopic
from moldau.broker.replication.manager import ReplicaManager
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import parse_header
from moldau.records.codec import build_batch, decode_records, iter_batches

log = logging.getLogger("moldau.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20

Record = tuple[bytes, bytes | None]


class OffsetsTopic:
    def __init__(self, controller: Controller, replicas: ReplicaManager, *, partitions: int,
                 replication_factor: int, segment_bytes: int) -> None:
        self.controller = controller
        self.replicas = replicas
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    @property
    def exists(self) -> bool:
        return OFFSETS_TOPIC in self.controller.image.topics

    async def ensure_created(self) -> None:
        """Create the topic on first use, as Kafka does on the first FindCoordinator."""
        if self.exists:
            return
        factor = min(self.replication_factor, len(self.controller.live_brokers()))
        topic = NewTopic(OFFSETS_TOPIC, self.partitions, factor, configs={
            "cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
            "compression.type": "producer"})
        [result] = await self.controller.create_topics([topic], validate_only=False)
        if isinstance(result, KafkaError) and \
                result.code is not ErrorCode.topic_already_exists:
            raise result

    def leads(self, partition: int) -> bool:
        """Whether this node leads the partition (and so coordinates its groups)."""
        if not self.exists:
            return False
        try:
            self.replicas.leader(OFFSETS_TOPIC, partition)
        except KafkaError:
            return False
        return True

    def write(self, partition: int, records: list[Record]) -> None:
        """Append to the partition; raises KafkaError when this node cannot write it."""
        now = int(time.time() * 1000)
        batch = bytearray(build_batch([(key, value, [], now) for key, value in records]))
        leader = self.replicas.leader(OFFSETS_TOPIC, partition)
        leader.log.append_as_leader(batch, [parse_header(batch)],
                                    leader_epoch=leader.leader_epoch, log_append_time_ms=None)
        leader.log.high_watermark = leader.log.log_end_offset

    def read(self, partition: int) -> Iterator[Record]:
        """Every keyed record of a partition this node leads, in offset order."""
        partition_log = self.replicas.leader(OFFSETS_TOPIC, partition).log
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            data = partition_log.read_batches(offset, READ_CHUNK, max_offset=end)
            progressed = False
            for position, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                if not header.is_control:
                    batch = memoryview(data)[position:position + header.size]
                    for record in decode_records(batch):
                        if record.key is not None and \
                                header.base_offset + record.offset_delta >= offset:
                            yield record.key, record.value
                offset = header.next_offset
                progressed = True
            if not progressed:
                break

    def read_all(self) -> Iterator[Record]:
        for partition in range(self.partitions):
            try:
                yield from self.read(partition)
            except KafkaError:
                continue  # not hosted here
