"""End offsets of the partitions a group coordinator's groups committed but other brokers
lead, so the coordinator can export their `kafka_consumergroup_lag` too (kafka-exporter
asks every leader with ListOffsets in the same way).

A background task asks each leader once per refresh interval, all leaders at once, each
answer bounded by a timeout; a scrape only reads the last answers and never waits. A leader
that does not answer loses its partitions' values until it answers again: their lag series
are absent rather than stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from moldau.broker.metadata.image import MetadataImage
from moldau.client.connection import BrokerConnection
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

log = logging.getLogger("moldau.broker.metrics.end_offsets")

LIST_OFFSETS_KEY = 2
LIST_OFFSETS_VERSION = 7
LATEST = -1
REFRESH_INTERVAL_S = 10.0
# Connecting and answering each: a refresh never takes much longer than this.
TIMEOUT_S = 5.0

TopicPartition = tuple[str, int]
Endpoint = Callable[[int], tuple[str, int] | None]


class RemoteEndOffsets:
    """High watermarks of partitions led elsewhere, as of the last refresh."""

    def __init__(self, node_id: int, image: Callable[[], MetadataImage | None],
                 wanted: Callable[[], Iterable[TopicPartition]], endpoint: Endpoint,
                 interval_s: float = REFRESH_INTERVAL_S) -> None:
        self.node_id = node_id
        self.image = image
        self.wanted = wanted
        self.endpoint = endpoint
        self.interval_s = interval_s
        self.offsets: dict[TopicPartition, int] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._unreachable: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="remote-end-offsets")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("Refreshing end offsets of partitions led elsewhere failed")
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> None:
        by_leader = self._by_leader()
        leaders = list(by_leader)
        answers = await asyncio.gather(*(self._ask(leader, by_leader[leader])
                                         for leader in leaders))
        self.offsets = {key: offset for found in answers for key, offset in found.items()}
        for leader in set(self._connections) - set(leaders):
            self._connections.pop(leader).close()

    def _by_leader(self) -> dict[int, list[TopicPartition]]:
        image = self.image()
        if image is None:
            return {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, index in set(self.wanted()):
            topic_image = image.topics.get(topic)
            record = topic_image.partitions.get(index) if topic_image is not None else None
            if record is not None and record.leader >= 0 and record.leader != self.node_id:
                by_leader.setdefault(record.leader, []).append((topic, index))
        return by_leader

    async def _ask(self, leader: int, partitions: list[TopicPartition]
                   ) -> dict[TopicPartition, int]:
        """The leader's high watermarks of `partitions`; none when it cannot answer."""
        try:
            connection = await self._connection(leader)
            response = await asyncio.wait_for(
                connection.send(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION,
                                _request(partitions)), TIMEOUT_S)
        except (OSError, TimeoutError, KafkaError) as exc:
            self._lost(leader, str(exc) or type(exc).__name__)
            return {}
        if leader in self._unreachable:
            self._unreachable.discard(leader)
            log.info("Broker %d answers ListOffsets again: its partitions' lag is exported",
                     leader)
        return {(topic.name, p.partition_index): p.offset
                for topic in response.topics for p in topic.partitions
                if p.error_code == ErrorCode.none.value and p.offset >= 0}

    async def _connection(self, leader: int) -> BrokerConnection:
        connection = self._connections.get(leader)
        if connection is not None and not connection.closed:
            return connection
        address = self.endpoint(leader)
        if address is None:
            raise OSError(f"no endpoint known for broker {leader}")
        connection = BrokerConnection(leader, *address,
                                      client_id=f"broker-{self.node_id}-end-offsets",
                                      request_timeout_ms=round(TIMEOUT_S * 1000))
        try:
            await asyncio.wait_for(connection.open(), TIMEOUT_S)
        except BaseException:
            connection.close()
            raise
        self._connections[leader] = connection
        return connection

    def _lost(self, leader: int, reason: str) -> None:
        connection = self._connections.pop(leader, None)
        if connection is not None:
            connection.close()
        # Once per outage at info: a dead leader stays in the metadata until it is fenced.
        level = logging.DEBUG if leader in self._unreachable else logging.INFO
        self._unreachable.add(leader)
        log.log(level, "No end offsets from broker %d (%s): lag of the partitions it leads "
                "is not exported until it answers", leader, reason)


def _request(partitions: list[TopicPartition]) -> Any:
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append({"partition_index": index, "timestamp": LATEST,
                                             "current_leader_epoch": -1})
    return build(request_class(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION), {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
