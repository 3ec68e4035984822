"""Cluster metadata: which brokers exist and which one leads each partition.

`Cluster` is an immutable snapshot, replaced as a whole on each update, so readers on any
thread see a consistent view without locks. `Metadata` keeps the current snapshot fresh: it
refreshes when asked (a new topic, a leader change, a disconnect) and at least every
`metadata.max.age.ms`, and it ignores partition data carrying a leader epoch older than the
one already known, so a lagging broker cannot move leadership backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moldau.client.errors import KafkaError, KafkaTimeoutError, error_for
from moldau.client.types import Node, TopicPartition
from moldau.client.versions import ApiKey
from moldau.client.wakeup import Wakeup
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.client.network import NetworkClient

log = logging.getLogger("moldau.client.metadata")

_ZERO_UUID = uuid.UUID(int=0)

# Partition errors after which the cached leader is wrong or unknown: refresh, then retry.
REFRESH_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available, ErrorCode.unknown_topic_id,
    ErrorCode.inconsistent_topic_id, ErrorCode.not_enough_replicas,
})


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int  # -1 when there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Mapping[int, PartitionMetadata]


class Cluster:
    """One consistent view of the cluster. Never mutated after construction."""

    def __init__(self, nodes: Iterable[Node], topics: Mapping[str, TopicMetadata] = {},
                 *, controller_id: int = -1, cluster_id: str | None = None,
                 topic_errors: Mapping[str, ErrorCode] = {}, bootstrap: bool = False) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.topics: Mapping[str, TopicMetadata] = topics
        self.controller_id = controller_id
        self.cluster_id = cluster_id
        self.topic_errors: Mapping[str, ErrorCode] = topic_errors
        self.is_bootstrap = bootstrap
        self._nodes = {node.node_id: node for node in self.nodes}
        leaders: dict[TopicPartition, int] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        available: dict[str, tuple[int, ...]] = {}
        counts: dict[str, int] = {}
        for topic in topics.values():
            counts[topic.name] = len(topic.partitions)
            up = []
            for index, part in sorted(topic.partitions.items()):
                if part.leader >= 0 and part.leader in self._nodes:
                    tp = TopicPartition(topic.name, index)
                    leaders[tp] = part.leader
                    by_node.setdefault(part.leader, []).append(tp)
                    up.append(index)
            available[topic.name] = tuple(up)
        self._leaders = leaders
        self._by_node = by_node
        self._available = available
        # Public for the producer's per-record path: partitions per topic.
        self.partition_counts: Mapping[str, int] = counts

    @classmethod
    def bootstrap(cls, addresses: Iterable[str]) -> Cluster:
        nodes = []
        for index, address in enumerate(addresses):
            host, _, port = address.strip().rpartition(":")
            nodes.append(Node(-(index + 1), host.strip("[]"), int(port)))
        return cls(nodes, bootstrap=True)

    def node(self, node_id: int) -> Node | None:
        return self._nodes.get(node_id)

    def leader_for(self, tp: TopicPartition) -> int | None:
        return self._leaders.get(tp)

    def partition_count(self, topic: str) -> int | None:
        return self.partition_counts.get(topic)

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        return self._available.get(topic, ())

    def partitions_for_node(self, node_id: int) -> list[TopicPartition]:
        return self._by_node.get(node_id, [])

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)


def cluster_from_response(response: Any) -> Cluster:
    nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
    topics: dict[str, TopicMetadata] = {}
    errors: dict[str, ErrorCode] = {}
    for topic in response.topics:
        if topic.name is None:
            continue
        if topic.error_code != ErrorCode.none:
            errors[topic.name] = ErrorCode(topic.error_code)
            continue
        parts = {p.partition_index: PartitionMetadata(
            topic.name, p.partition_index, p.leader_id, getattr(p, "leader_epoch", -1),
            tuple(p.replica_nodes), tuple(p.isr_nodes),
            tuple(getattr(p, "offline_replicas", ())), ErrorCode(p.error_code))
            for p in topic.partitions}
        topic_id = getattr(topic, "topic_id", None)
        topics[topic.name] = TopicMetadata(
            topic.name, None if topic_id in (None, _ZERO_UUID) else topic_id,
            bool(getattr(topic, "is_internal", False)), parts)
    return Cluster(nodes, topics, controller_id=getattr(response, "controller_id", -1),
                   cluster_id=getattr(response, "cluster_id", None), topic_errors=errors)


class Metadata:
    """Keeps `cluster` current; `run(network)` is the refresh task."""

    def __init__(self, bootstrap_servers: Iterable[str], *, max_age_ms: int = 300000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 allow_auto_topic_creation: bool = False, topic_idle_ms: int | None = None
                 ) -> None:
        self.cluster = Cluster.bootstrap(bootstrap_servers)
        self.version = 0
        self.max_age = max_age_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.retry_backoff_max = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.topic_idle = None if topic_idle_ms is None else topic_idle_ms / 1000
        self.last_error: KafkaError | None = None
        # A broker refused this client's credentials: fatal, as in Kafka's clients, rather
        # than retried until a timeout.
        self.authentication_error: KafkaError | None = None
        # A pattern subscription needs every topic; then `topics` are not listed.
        self.need_all_topics = False
        # Topics to ask about, with the last time each was used.
        self._topics: dict[str, float] = {}
        self._need_update = True
        self._requests = 0  # counts request_update calls
        self._answered = 0  # the count an update in flight will satisfy
        self._snapshot_answers = 0  # the count the installed snapshot satisfies
        self._urgent = False
        self._last_attempt = float("-inf")
        self._last_success = float("-inf")
        self._failures = 0
        self._epochs: dict[TopicPartition, int] = {}
        self._wake: asyncio.Event | None = None
        self._wakeup = Wakeup()
        self._listeners: list[Any] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -------------------------------------------------------------------------- interest

    @property
    def topics(self) -> list[str]:
        return list(self._topics)

    def add_topic(self, topic: str) -> None:
        """Track `topic`; a topic not in the current snapshot triggers a refresh at once."""
        new = topic not in self._topics
        self._topics[topic] = time.monotonic()
        if new and topic not in self.cluster.topics:
            self._urgent = True
            self.request_update()

    def touch(self, topic: str) -> None:
        self._topics[topic] = time.monotonic()

    def add_listener(self, callback: Any) -> None:
        """callback(cluster) after every update, on the loop."""
        self._listeners.append(callback)

    def request_update(self) -> int:
        """Ask for a refresh soon (safe to call from any thread); returns the request's number
        for `answers`."""
        self._need_update = True
        self._requests += 1
        asked = self._requests
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return asked
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            wake.set()
        else:
            loop.call_soon_threadsafe(wake.set)
        return asked

    def answers(self, request: int) -> bool:
        """Whether the installed snapshot comes from an update that started after `request`
        was made (an update already in flight then was asked with older settings)."""
        return self._snapshot_answers >= request

    def time_to_next_update(self, now: float) -> float:
        """Seconds until the next refresh: due when asked for or when the snapshot is older
        than metadata.max.age.ms, but never sooner than retry.backoff.ms after the previous
        attempt (growing after failures), except for a topic seen for the first time."""
        if self._failures:
            backoff = min(self.retry_backoff * 2 ** (self._failures - 1), self.retry_backoff_max)
        else:
            backoff = 0.0 if self._urgent else self.retry_backoff
        wait_backoff = self._last_attempt + backoff - now
        due = 0.0 if self._need_update else self._last_success + self.max_age - now
        return max(due, wait_backoff, 0.0)

    # -------------------------------------------------------------------------- updates

    def request_body(self, now: float) -> dict[str, Any]:
        # A copy first: producer threads may add topics meanwhile.
        topics = list(self._topics.items())
        if self.topic_idle is not None:
            for topic, used in topics:
                if now - used > self.topic_idle:
                    self._topics.pop(topic, None)
        listed = None if self.need_all_topics else [
            {"name": name} for name in list(self._topics)]
        return {"topics": listed,
                "allow_auto_topic_creation": self.allow_auto_topic_creation,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}

    def update(self, response: Any, now: float | None = None) -> Cluster:
        """Apply a Metadata response; returns the new snapshot."""
        fresh = cluster_from_response(response)
        if not fresh.nodes:
            # A response without brokers cannot be used to route anything.
            self.failed(KafkaError(ErrorCode.broker_not_available, "no brokers in metadata"))
            return self.cluster
        topics = self._keep_newer_epochs(fresh)
        cluster = Cluster(fresh.nodes, topics, controller_id=fresh.controller_id,
                          cluster_id=fresh.cluster_id, topic_errors=fresh.topic_errors)
        self._snapshot_answers = self._answered
        return self._install(cluster, time.monotonic() if now is None else now)

    def _keep_newer_epochs(self, fresh: Cluster) -> dict[str, TopicMetadata]:
        current = self.cluster
        topics: dict[str, TopicMetadata] = {}
        for name, topic in fresh.topics.items():
            old_topic = current.topics.get(name)
            if old_topic is not None and old_topic.topic_id != topic.topic_id:
                # A recreated topic: epochs start over.
                for index in old_topic.partitions:
                    self._epochs.pop(TopicPartition(name, index), None)
                old_topic = None
            parts = dict(topic.partitions)
            for index, part in topic.partitions.items():
                tp = TopicPartition(name, index)
                known = self._epochs.get(tp)
                if known is not None and 0 <= part.leader_epoch < known and \
                        old_topic is not None and index in old_topic.partitions:
                    log.debug("ignoring metadata for %s with leader epoch %d < %d", tp,
                              part.leader_epoch, known)
                    parts[index] = old_topic.partitions[index]
                elif part.leader_epoch >= 0:
                    self._epochs[tp] = part.leader_epoch
            topics[name] = TopicMetadata(name, topic.topic_id, topic.is_internal, parts)
        return topics

    def update_leader(self, tp: TopicPartition, leader: int, epoch: int) -> bool:
        """Install a leader learned outside a Metadata response (e.g. from a Produce or Fetch
        error) if its epoch is newer; returns whether it was applied."""
        known = self._epochs.get(tp, -1)
        current = self.cluster
        topic = current.topics.get(tp.topic)
        if epoch <= known or topic is None or tp.partition not in topic.partitions:
            return False
        if leader >= 0 and current.node(leader) is None:
            return False
        self._epochs[tp] = epoch
        old = topic.partitions[tp.partition]
        parts = dict(topic.partitions)
        parts[tp.partition] = PartitionMetadata(tp.topic, tp.partition, leader, epoch,
                                                old.replicas, old.isr, old.offline_replicas)
        topics = dict(current.topics)
        topics[tp.topic] = TopicMetadata(topic.name, topic.topic_id, topic.is_internal, parts)
        cluster = Cluster(current.nodes, topics, controller_id=current.controller_id,
                          cluster_id=current.cluster_id, topic_errors=current.topic_errors)
        self.cluster = cluster
        return True

    def _install(self, cluster: Cluster, now: float) -> Cluster:
        self.cluster = cluster
        self.version += 1
        # A request made while this update was in flight (e.g. for a new topic) still
        # needs its own refresh.
        self._need_update = self._requests != self._answered
        self._failures = 0
        self._last_success = now
        self.last_error = None
        for callback in list(self._listeners):
            try:
                callback(cluster)
            except Exception:
                log.exception("metadata listener failed")
        self._notify()
        return cluster

    def authentication_failed(self, error: KafkaError) -> None:
        self.authentication_error = error
        self.failed(error)

    def failed(self, error: KafkaError) -> None:
        self._failures += 1
        self.last_error = error
        self._notify()

    def _notify(self) -> None:
        self._wakeup.notify()

    async def wait_for_change(self, timeout: float) -> None:
        """Wait until the next update attempt finishes (success or failure) or `timeout`;
        raise the authentication error of a broker that refused the credentials."""
        if self.authentication_error is None:
            await self._wakeup.wait(timeout)
        if self.authentication_error is not None:
            raise self.authentication_error

    async def fetch_topic(self, topic: str, timeout: float) -> Cluster:
        """Wait until `topic` has partitions in the snapshot; raise for topics that cannot
        be produced to, KafkaTimeoutError when `timeout` passes first."""
        deadline = time.monotonic() + timeout
        self.add_topic(topic)
        while True:
            cluster = self.cluster
            if cluster.partition_count(topic):
                return cluster
            code = cluster.topic_errors.get(topic)
            if code in (ErrorCode.invalid_topic_exception,
                        ErrorCode.topic_authorization_failed):
                raise error_for(code, f"Invalid topic: {topic}" if code
                                is ErrorCode.invalid_topic_exception else None)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                detail = f" ({self.last_error})" if self.last_error else ""
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{round(timeout * 1000)} ms.{detail}")
            self.request_update()
            await self.wait_for_change(remaining)

    # -------------------------------------------------------------------------- refresh task

    async def run(self, network: NetworkClient) -> None:
        """Refresh whenever due until closed. Errors are kept in `last_error`."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not self._closed:
            # Cleared before the check, so a request made after it is never missed.
            self._wake.clear()
            now = time.monotonic()
            delay = self.time_to_next_update(now)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            try:
                node = network.least_loaded_node()
            except KafkaError as exc:
                self._last_attempt = now
                self.failed(exc)
                continue
            if node is None:
                # Every node is backing off: wait for the first one to become connectable.
                wait = max(network.min_connection_delay(), 0.01)
                await network.wait_for_event(wait)
                continue
            self._last_attempt = now
            self._urgent = False
            self._answered = self._requests
            try:
                response = await network.request(node, ApiKey.METADATA,
                                                  self.request_body(now))
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                log.debug("metadata request to node %d failed: %s", node, exc)
                self.failed(exc)
                continue
            self.update(response, time.monotonic())

    def close(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        self._notify()
