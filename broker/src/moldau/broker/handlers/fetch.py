"""Fetch: read from the logs up to the high watermark; long-poll for min_bytes/max_wait.

A fetch from a follower replica (replica id >= 0) reads up to the log end instead, and tells
the replica manager the follower's new log end (its fetch offset). With a last fetched
epoch (v12+) that this log does not have up to the fetch offset, the follower gets a
diverging epoch instead of records, and truncates.

Fetch sessions (KIP-227) are declined the way Kafka does with no session slots: every
response carries session id 0, so clients keep sending full fetch requests, and an
incremental fetch for an unknown session gets FETCH_SESSION_ID_NOT_FOUND.

Replication throttling (KIP-73): for a follower that is not in the ISR, a partition the
topic's leader.replication.throttled.replicas names on this broker gets no records while
the leader quota is used up; the other partitions are answered as usual.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import TOPIC, allowed, cluster_allowed
from moldau.broker.handlers.fetch_response import PartitionData, TopicData, encode_fetch_response
from moldau.broker.handlers.registry import Deferred, Result, api
from moldau.broker.log.log import PartitionLog
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.broker.replication.manager import Partition
from moldau.broker.replication.quota import is_throttled
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import millis

if TYPE_CHECKING:
    from moldau.broker.server import Broker

READ_COMMITTED = 1
UNKNOWN_TOPIC_ID = 100
# Kafka's RequestMetrics count each Fetch under one of these as well as under Fetch.
FETCH_CONSUMER = "FetchConsumer"
FETCH_FOLLOWER = "FetchFollower"


def check_leader_epoch(partition: Partition, requested: int) -> None:
    """KIP-320: a client with a newer epoch is ahead of us, an older one is fenced."""
    if requested < 0:
        return
    if requested > partition.leader_epoch:
        raise KafkaError(ErrorCode.unknown_leader_epoch)
    if requested < partition.leader_epoch:
        raise KafkaError(ErrorCode.fenced_leader_epoch)


def replica_id_of(version: int, body: Any) -> int:
    """The fetching replica's id (-1 for consumers): v15 moved it into replica_state."""
    if version >= 15:
        return body.replica_state.replica_id
    return body.replica_id


def diverging_epoch(log: PartitionLog, last_fetched_epoch: int,
                    fetch_offset: int) -> tuple[int, int] | None:
    """Where the follower's last fetched epoch ends on this log, if before its fetch offset
    (or the epoch is not here at all): the follower's log diverges from there."""
    epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 or end_offset < 0:
        raise KafkaError(ErrorCode.offset_out_of_range,
                         f"Cannot determine where epoch {last_fetched_epoch} ends on "
                         f"{log.name}")
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


class _FetchPlan:
    def __init__(self, broker: Broker, request: Request) -> None:
        self.broker = broker
        self.request = request
        body = request.body
        self.version = request.header.api_version
        self.min_bytes = body.min_bytes
        self.max_bytes = body.max_bytes
        self.read_committed = body.isolation_level == READ_COMMITTED
        self.replica_id = replica_id_of(self.version, body)
        self.topics: list[tuple[str | None, Any, list[Any]]] = []
        # Topics the client may not read: their partitions answer TOPIC_AUTHORIZATION_FAILED.
        self.refused: set[str] = set()
        # Follower fetches: bytes of throttled replicas in the last read, and whether the
        # leader quota was used up (asked at most once per read).
        self.throttled_bytes = 0
        self._quota_exceeded: bool | None = None
        for topic in body.topics:
            if self.version >= 13:
                image = broker.image.topics_by_id.get(topic.topic_id)
                self.topics.append((image.name if image else None, topic.topic_id,
                                    list(topic.partitions)))
            else:
                image = broker.image.topics.get(topic.topic)
                self.topics.append((topic.topic, image.topic_id if image else None,
                                    list(topic.partitions)))
        if broker.authorizer.enabled:
            self._authorize()

    def _authorize(self) -> None:
        """Kafka's rules: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on
        each topic."""
        names = {name for name, _, _ in self.topics if name}
        if self.replica_id >= 0:
            if not cluster_allowed(self.broker, self.request, Operation.CLUSTER_ACTION):
                self.refused = names
            return
        self.refused = {name for name in names if not allowed(
            self.broker, self.request, Operation.READ, TOPIC, name)}

    def keys(self) -> list[tuple[str, int]]:
        return [(name, p.partition) for name, _, parts in self.topics
                if name and name not in self.refused for p in parts]

    def read(self) -> tuple[list[TopicData], int, bool]:
        """Read every partition; returns the data, bytes read and whether any failed."""
        remaining = self.max_bytes
        total = 0
        self.throttled_bytes = 0
        self._quota_exceeded = None
        failed = False
        topics = []
        for name, topic_id, partitions in self.topics:
            data = TopicData(name or "", topic_id)
            for wanted in partitions:
                result = self._read_partition(name, wanted, remaining, total == 0)
                failed |= result.error_code != 0 or result.diverging_epoch is not None
                data.partitions.append(result)
                size = result.size
                remaining = max(remaining - size, 0)
                total += size
            topics.append(data)
        return topics, total, failed

    def _read_partition(self, name: str | None, wanted: Any, max_bytes: int,
                        first: bool) -> PartitionData:
        out = PartitionData(wanted.partition)
        if name is None:
            out.error_code = UNKNOWN_TOPIC_ID if self.version >= 13 else \
                ErrorCode.unknown_topic_or_partition.value
            return out
        if name in self.refused:
            out.error_code = ErrorCode.topic_authorization_failed.value
            return out
        try:
            partition = self.broker.replicas.leader(name, wanted.partition)
            check_leader_epoch(partition, getattr(wanted, "current_leader_epoch", -1))  # v9+
            if self.replica_id >= 0:
                return self._read_for_follower(partition, wanted, max_bytes, first, out)
            log = partition.log
            high_watermark = log.high_watermark
            result = log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, max_bytes),
                              max_offset=high_watermark, min_one_batch=first,
                              read_committed=self.read_committed)
            out.records = result.slices
            out.high_watermark = result.high_watermark
            out.last_stable_offset = result.last_stable_offset
            out.log_start_offset = result.log_start_offset
            if result.aborted is not None:
                out.aborted = [(t.producer_id, t.first_offset) for t in result.aborted]
        except KafkaError as exc:
            out.error_code = exc.code.value
            out.records = ()
            out.diverging_epoch = None
            if exc.code is ErrorCode.offset_out_of_range:
                log = self.broker.replicas.leader(name, wanted.partition).log
                out.high_watermark = log.high_watermark
                out.last_stable_offset = log.last_stable_offset
                out.log_start_offset = log.log_start_offset
        return out

    def _read_for_follower(self, partition: Partition, wanted: Any, max_bytes: int,
                           first: bool, out: PartitionData) -> PartitionData:
        """Raises KafkaError like `_read_partition`'s own reads (caught there)."""
        replicas = self.broker.replicas
        if self.replica_id not in partition.followers:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"Replica {self.replica_id} is not a follower of "
                             f"{partition.topic}-{partition.index}")
        log = partition.log
        last_fetched_epoch = getattr(wanted, "last_fetched_epoch", -1)
        if last_fetched_epoch >= 0:
            out.diverging_epoch = diverging_epoch(log, last_fetched_epoch,
                                                  wanted.fetch_offset)
        if out.diverging_epoch is None:
            throttled = is_throttled(log.config.leader_replication_throttled_replicas,
                                     partition.index, self.broker.node_id)
            log_end_offset = log.log_end_offset
            if not (throttled and self._hold_back(partition)):
                result = log.read(wanted.fetch_offset,
                                  min(wanted.partition_max_bytes, max_bytes),
                                  max_offset=None, min_one_batch=first)
                out.records = result.slices
                log_end_offset = result.log_end_offset
                if throttled:
                    self.throttled_bytes += out.size
            replicas.record_follower_fetch(partition, self.replica_id, wanted.fetch_offset,
                                           getattr(wanted, "log_start_offset", -1),
                                           log_end_offset)
        # Read after the follower's position was recorded: it may just have moved it.
        out.high_watermark = log.high_watermark
        out.last_stable_offset = log.last_stable_offset
        out.log_start_offset = log.log_start_offset
        return out

    def _hold_back(self, partition: Partition) -> bool:
        """A throttled replica's data waits while the leader quota is used up, unless the
        follower is in sync (Kafka's shouldLeaderThrottle)."""
        if self.replica_id in partition.isr:
            return False
        if self._quota_exceeded is None:
            self._quota_exceeded = self.broker.replicas.leader_quota.is_exceeded()
        return self._quota_exceeded

    def respond(self, topics: list[TopicData]) -> Response:
        if self.throttled_bytes:
            self.broker.replicas.leader_quota.record(self.throttled_bytes)
        self.broker.topic_stats.record_fetch(topics, from_follower=self.replica_id >= 0)
        return encode_fetch_response(self.version, self.request.header.correlation_id, topics)


@api(1, "Fetch", 4, 17)
async def handle_fetch(broker: Broker, request: Request) -> Result:
    body = request.body
    from_follower = replica_id_of(request.header.api_version, body) >= 0
    request.metric_name = FETCH_FOLLOWER if from_follower else FETCH_CONSUMER
    if request.header.api_version >= 7 and body.session_id != 0:
        return encode_fetch_response(request.header.api_version,
                                     request.header.correlation_id, [],
                                     error_code=ErrorCode.fetch_session_id_not_found.value)
    plan = _FetchPlan(broker, request)
    topics, total, failed = plan.read()
    max_wait_s = millis(body.max_wait) / 1000
    if total >= plan.min_bytes or failed or max_wait_s <= 0 or not plan.keys():
        return plan.respond(topics)
    return Deferred(_long_poll(broker, plan, max_wait_s))


async def _long_poll(broker: Broker, plan: _FetchPlan, max_wait_s: float) -> Response:
    deadline = time.monotonic() + max_wait_s
    keys = plan.keys()
    while True:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await broker.replicas.wait_for_data(keys, remaining)
        topics, total, failed = plan.read()
        if total >= plan.min_bytes or failed or time.monotonic() >= deadline:
            return plan.respond(topics)
        await asyncio.sleep(0)
