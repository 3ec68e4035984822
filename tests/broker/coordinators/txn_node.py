"""One node with `__transaction_state` and a data topic on real logs, both led here, and
transaction coordinators over them (markers for the data topic are appended locally)."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from offsets_node import NODE, NoController

from moldau.broker.config import BrokerConfig
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.topic import CoordinatorTopic
from moldau.broker.coordinators.transaction.coordinator import (
    TransactionCoordinator,
    TxnSettings,
)
from moldau.broker.coordinators.transaction.markers import MarkerChannel
from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import PartitionRecord, TopicRecord
from moldau.broker.replication.manager import ReplicaManager
from moldau.records.codec import iter_batches
from moldau.records.control import read_end_txn_marker

STATE_PARTITIONS = 3
DATA = "data"


def txn_id_in(partition: int, prefix: str = "txn") -> str:
    return next(f"{prefix}-{n}" for n in range(1000)
                if partition_for(f"{prefix}-{n}", STATE_PARTITIONS) == partition)


class TxnNode:
    def __init__(self, path: Path, settings: TxnSettings | None = None) -> None:
        self.image = MetadataImage()
        self.offset = 0
        for name, partitions in ((TRANSACTION_TOPIC, STATE_PARTITIONS), (DATA, 2)):
            topic_id = uuid.uuid4()
            self._apply(TopicRecord(name, topic_id))
            for partition in range(partitions):
                self._apply(PartitionRecord(topic_id, partition, (NODE,), (NODE,), NODE,
                                            leader_epoch=0))
        config = BrokerConfig({"node.id": str(NODE), "log.dirs": str(path)})
        self.logs = LogManager([str(path)], default_config=config.log_config({}))
        self.logs.load({})
        self.replicas = ReplicaManager(NODE, config, self.logs, self.image, 1)
        self.replicas.sync_with_image()
        self.topic = CoordinatorTopic(TRANSACTION_TOPIC, NoController(self.image),
                                      self.replicas, partitions=STATE_PARTITIONS,
                                      replication_factor=1, segment_bytes=1 << 20)
        self.settings = settings or TxnSettings()
        # What the marker path reports as written: (producer id, commit, partitions).
        self.written: list[tuple[int, bool, list[tuple[str, int]]]] = []
        self._ids = itertools.count(1000)

    def _apply(self, record: PartitionRecord | TopicRecord) -> None:
        self.offset += 1
        self.image.apply(self.offset, record)

    async def next_producer_id(self) -> int:
        return next(self._ids)

    async def coordinator(self) -> TransactionCoordinator:
        """A coordinator that has loaded every partition (as at start-up)."""
        coordinator = TransactionCoordinator(self.settings, self.topic, self.next_producer_id,
                                             MarkerChannel(NODE, self.replicas,
                                                           self._written))
        await coordinator.load_partitions(self.topic.led_partitions())
        return coordinator

    def _written(self, producer_id: int, commit: bool,
                 partitions: list[tuple[str, int]]) -> None:
        self.written.append((producer_id, commit, sorted(partitions)))

    def markers(self, partition: int) -> list[tuple[int, int, bool]]:
        """(producer id, epoch, is commit) of each transaction marker on a data partition."""
        plog = self.replicas.leader(DATA, partition).log
        data = plog.read_batches(0, 1 << 20, max_offset=plog.log_end_offset)
        out = []
        for position, header in iter_batches(data):
            marker = read_end_txn_marker(data[position:position + header.size], header)
            if marker is not None:
                out.append((header.producer_id, header.producer_epoch, not marker.is_abort))
        return out

    def close(self) -> None:
        self.replicas.shutdown()
        self.logs.shutdown()

