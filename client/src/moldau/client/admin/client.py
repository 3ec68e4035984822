"""AsyncAdmin: topics, partitions, replicas, configs, ACLs, SCRAM credentials, cluster,
groups, offsets, records, log dirs.

Each operation is a call: a request sent to the node the API needs (any broker, the
controller, a given broker, a group's coordinator or a partition's leader), retried after
`retry.backoff.ms` when the connection fails or the broker says to ask elsewhere (not the
controller, not the coordinator, not the leader), until `default.api.timeout.ms` runs out.
Errors that are answers (an unknown topic, a topic that exists) are raised at once as typed
exceptions named after Kafka's error codes; batch operations raise the first one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from moldau.client.admin import access
from moldau.client.admin.types import (
    AclBinding,
    AclBindingFilter,
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ElectionType,
    GroupDescription,
    GroupListing,
    ListedOffset,
    LogDirDescription,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionReassignment,
    QuorumInfo,
    QuorumReplica,
    ReplicaInfo,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    TopicDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.config import parse_admin_config
from moldau.client.consumer_protocol import Assignment
from moldau.client.coordinator import (
    COORDINATOR_ERRORS,
    CoordinatorType,
    find_coordinator_request,
    parse_find_coordinator,
)
from moldau.client.errors import (
    ClientClosedError,
    DisconnectedError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,  # type: ignore[attr-defined]
    UnsupportedVersionError,  # type: ignore[attr-defined]
    error_for,
)
from moldau.client.metadata import Cluster, Metadata
from moldau.client.network import ExponentialBackoff, NetworkClient
from moldau.client.types import Node, PreparedTransaction, TopicPartition
from moldau.client.versions import TXN_V1_MAX, ApiKey
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.admin")

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
_ZERO_UUID = uuid.UUID(int=0)
_ELECT_LEADERS = ApiKey.ELECT_LEADERS
_ALTER_PARTITION_REASSIGNMENTS = ApiKey.ALTER_PARTITION_REASSIGNMENTS
_LIST_PARTITION_REASSIGNMENTS = ApiKey.LIST_PARTITION_REASSIGNMENTS
# The KRaft metadata log: DescribeQuorum asks about its one partition.
_METADATA_TOPIC = "__cluster_metadata"

# Errors that mean "ask again, maybe elsewhere", not "this is the answer".
_RETRY_ERRORS = frozenset({
    ErrorCode.not_controller, ErrorCode.request_timed_out, ErrorCode.network_exception,
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.throttling_quota_exceeded, ErrorCode.kafka_storage_error,
    *COORDINATOR_ERRORS,
})


class _Retry(Exception):
    """Raised by a response handler: try the call again (after a metadata refresh)."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


def _error(code: int, message: str | None, what: str) -> KafkaError:
    """The typed error of a non-zero error code, its message naming `what` it is about."""
    error_code = ErrorCode(code)
    if not message:
        text = f"{what}: {error_code.name.upper()}"
    elif what.split(" ", 1)[-1] in message:
        text = message  # the broker's message already names the resource
    else:
        text = f"{what}: {message}"
    return error_for(error_code, text)


def _check(code: int, message: str | None, what: str) -> None:
    """Raise for a non-zero error code: _Retry for the retry set, else the typed error."""
    if code == ErrorCode.none:
        return
    error = _error(code, message, what)
    if error.code in _RETRY_ERRORS:
        raise _Retry(error)
    raise error


def _raise_first(outcomes: Mapping[Any, object]) -> None:
    """The raising face of a per-item call: the first item's error, if any failed."""
    for outcome in outcomes.values():
        if isinstance(outcome, KafkaError):
            raise outcome


def _topic_what(name: str) -> str:
    return f"Topic '{name}'"


# One item's answer in a batch response: its key, error code and message, and its value.
Answer = tuple[K, int, str | None, V]


def _by_position(build: Callable[[Sequence[K]], Mapping[str, Any]],
                 results: Callable[[Any], Iterable[Any]],
                 answer: Callable[[K, Any], Answer[K, V]]
                 ) -> tuple[Callable[[Sequence[K]], Mapping[str, Any]],
                            Callable[[Any], list[Answer[K, V]]]]:
    """`body` and `answers` for _call_each where a response answers the items in the order
    they were sent (CreateAcls, DeleteAcls) rather than by name."""
    sent: list[K] = []

    def body(batch: Sequence[K]) -> Mapping[str, Any]:
        sent[:] = batch
        return build(batch)

    def answers(response: Any) -> list[Answer[K, V]]:
        return [answer(key, result) for key, result in zip(sent, results(response),
                                                           strict=False)]

    return body, answers


class AsyncAdmin:
    """Kafka admin client for asyncio; settings with Kafka's names, as the producer's."""

    def __init__(self, config: Mapping[str, Any] | None = None, **settings: Any) -> None:
        cfg = parse_admin_config(config, settings)
        self.config = cfg
        self.default_timeout = cfg["default.api.timeout.ms"] / 1000
        self.metadata = Metadata(cfg["bootstrap.servers"], max_age_ms=cfg["metadata.max.age.ms"],
                                 retry_backoff_ms=cfg["retry.backoff.ms"],
                                 retry_backoff_max_ms=cfg["retry.backoff.max.ms"])
        self.network = NetworkClient.from_config(cfg, self.metadata)
        self._backoff = ExponentialBackoff(cfg["retry.backoff.ms"] / 1000,
                                           cfg["retry.backoff.max.ms"] / 1000)
        self._coordinators: dict[tuple[CoordinatorType, str], int] = {}
        self._metadata_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    # -------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise ClientClosedError("The admin client is closed")
        self._started = True
        self._metadata_task = asyncio.get_running_loop().create_task(
            self.metadata.run(self.network), name="moldau-admin-metadata")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.metadata.close()
        if self._metadata_task is not None:
            self._metadata_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._metadata_task
        await self.network.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -------------------------------------------------------------------------- calls

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.default_timeout if timeout is None else timeout)

    def _timeout_ms(self, timeout: float | None) -> int:
        return round((self.default_timeout if timeout is None else timeout) * 1000)

    def _timed_out(self, name: str, started: float, last_error: BaseException | None
                   ) -> KafkaTimeoutError:
        elapsed = round((time.monotonic() - started) * 1000)
        detail = f" (last error: {last_error})" if last_error is not None else ""
        return KafkaTimeoutError(f"{name} timed out after {elapsed} ms{detail}")

    async def _cluster(self, deadline: float, name: str) -> Cluster:
        """Metadata from a real broker (not just the bootstrap list), waiting if needed."""
        if not self._started:
            await self.start()
        started = time.monotonic()
        while self.metadata.version == 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = self.metadata.last_error
                detail = f" (last error: {error})" if error is not None else ""
                servers = ",".join(self.config["bootstrap.servers"])
                raise KafkaTimeoutError(
                    f"{name}: no broker of {servers} answered within "
                    f"{round((time.monotonic() - started) * 1000)} ms{detail}")
            self.metadata.request_update()
            await self.metadata.wait_for_change(remaining)
        return self.metadata.cluster

    async def _least_loaded(self, deadline: float, name: str) -> int:
        await self._cluster(deadline, name)
        while True:
            node = self.network.least_loaded_node()
            if node is not None:
                return node
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{name}: no broker is reachable")
            await self.network.wait_for_event(
                min(max(self.network.min_connection_delay(), 0.01), remaining))

    async def _controller(self, deadline: float, name: str) -> int:
        cluster = await self._cluster(deadline, name)
        if cluster.node(cluster.controller_id) is not None:
            return cluster.controller_id
        return await self._least_loaded(deadline, name)

    async def _broker(self, broker_id: int, deadline: float, name: str) -> int:
        cluster = await self._cluster(deadline, name)
        if cluster.node(broker_id) is None:
            self.metadata.request_update()
            raise _Retry(error_for(ErrorCode.broker_not_available,
                                   f"{name}: broker {broker_id} is not in the cluster"))
        return broker_id

    async def _call(self, name: str, target: Callable[[float], Awaitable[int]], api_key: int,
                    body: Mapping[str, Any],
                    handle: Callable[[Any, int], T], *, timeout: float | None = None,
                    on_retry: Callable[[KafkaError], None] | None = None,
                    max_version: int | None = None, min_version: int | None = None) -> T:
        """Send to the node `target` picks until `handle(response, node)` returns."""
        deadline = self._deadline(timeout)
        started = time.monotonic()
        attempts = 0
        last_error: BaseException | None = None
        while True:
            if self._closed:
                raise ClientClosedError("The admin client is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(name, started, last_error)
            try:
                node = await target(deadline)
                response = await asyncio.wait_for(
                    self.network.request(node, api_key, body, max_version=max_version,
                                         min_version=min_version),
                    max(deadline - time.monotonic(), 0.001))
                return handle(response, node)
            except KafkaTimeoutError:
                raise
            except TimeoutError:
                last_error = last_error or KafkaTimeoutError("no response")
                continue
            except DisconnectedError as exc:
                last_error = exc
            except _Retry as retry:
                last_error = retry.error
                self.metadata.request_update()
                if on_retry is not None:
                    on_retry(retry.error)
            attempts += 1
            pause = min(self._backoff.backoff(attempts - 1),
                        max(deadline - time.monotonic(), 0))
            log.debug("%s: retrying in %.3f s after %s", name, pause, last_error)
            await asyncio.sleep(pause)

    async def _call_each(self, name: str, target: Callable[[float], Awaitable[int]],
                         api_key: int, keys: Sequence[K],
                         body: Callable[[Sequence[K]], Mapping[str, Any]],
                         answers: Callable[[Any], Iterable[Answer[K, V]]],
                         what: Callable[[K], str], *, timeout: float | None = None
                         ) -> dict[K, V | KafkaError]:
        """One request carrying many items (topics, partitions, resources), each with its
        own answer: the value, or its error, returned rather than raised. Items that get a
        retriable error are sent again, alone, until the deadline; the others keep their
        answer. A failure of the whole request (no broker, a top-level error) raises."""
        deadline = self._deadline(timeout)
        started = time.monotonic()
        out: dict[K, V | KafkaError] = {}
        last: dict[K, KafkaError] = {}
        pending = list(dict.fromkeys(keys))
        attempts = 0
        while pending:
            try:
                answered = await self._call(
                    name, target, api_key, body(pending),
                    lambda response, _node: list(answers(response)),
                    timeout=max(deadline - time.monotonic(), 0.001))
            except KafkaTimeoutError:
                if not last:
                    raise
                # The deadline passed while items were being retried: each times out with
                # its own last error, not the retry's "no response".
                for key in pending:
                    out[key] = self._timed_out(name, started, last[key])
                break
            wanted = set(pending)
            retry = []
            for key, code, message, value in answered:
                if key not in wanted:
                    continue
                wanted.discard(key)
                if code == ErrorCode.none:
                    out[key] = value
                    continue
                error = _error(code, message, what(key))
                if error.code in _RETRY_ERRORS:
                    retry.append(key)
                    last[key] = error
                else:
                    out[key] = error
            for key in wanted:  # a broker that left an item out of its answer
                out[key] = error_for(ErrorCode.unknown_server_error,
                                     f"{what(key)}: missing from the {name} response")
            pending = retry
            if not pending:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for key in pending:
                    out[key] = self._timed_out(name, started, last[key])
                break
            self.metadata.request_update()
            await asyncio.sleep(min(self._backoff.backoff(attempts), remaining))
            attempts += 1
        return {key: out[key] for key in dict.fromkeys(keys)}

    def _any(self, name: str) -> Callable[[float], Awaitable[int]]:
        return lambda deadline: self._least_loaded(deadline, name)

    def _to_controller(self, name: str) -> Callable[[float], Awaitable[int]]:
        return lambda deadline: self._controller(deadline, name)

    def _to_broker(self, broker_id: int, name: str) -> Callable[[float], Awaitable[int]]:
        return lambda deadline: self._broker(broker_id, deadline, name)

    def _to_coordinator(self, key: str, name: str,
                        key_type: CoordinatorType = CoordinatorType.GROUP
                        ) -> Callable[[float], Awaitable[int]]:
        """The coordinator of a group (or, with key_type TRANSACTION, of a transactional
        id), found once and then remembered."""
        what = f"{key_type.name.lower()} {key}"

        async def target(deadline: float) -> int:
            node = self._coordinators.get((key_type, key))
            if node is not None and self.metadata.cluster.node(node) is not None:
                return node

            def handle(response: Any, _node: int) -> int:
                code, node_id, message = parse_find_coordinator(response, key)
                _check(code, message, f"FindCoordinator for {what}")
                if self.metadata.cluster.node(node_id) is None:
                    raise _Retry(error_for(ErrorCode.coordinator_not_available,
                                           f"coordinator {node_id} not in metadata yet"))
                return node_id

            node = await self._call(
                "findCoordinator", self._any(name), ApiKey.FIND_COORDINATOR,
                find_coordinator_request(key, key_type), handle,
                timeout=max(deadline - time.monotonic(), 0.001))
            self._coordinators[(key_type, key)] = node
            return node
        return target

    def _forget_coordinator(self, key: str, key_type: CoordinatorType = CoordinatorType.GROUP
                            ) -> Callable[[KafkaError], None]:
        def forget(error: KafkaError) -> None:
            if error.code in COORDINATOR_ERRORS:
                self._coordinators.pop((key_type, key), None)
        return forget

    # -------------------------------------------------------------------------- topics

    @staticmethod
    def _new_topic(topic: NewTopic) -> dict[str, Any]:
        assigned = bool(topic.replica_assignment)
        return {
            "name": topic.name,
            "num_partitions": -1 if assigned or topic.num_partitions is None
            else topic.num_partitions,
            "replication_factor": -1 if assigned or topic.replication_factor is None
            else topic.replication_factor,
            "assignments": [{"partition_index": p, "broker_ids": list(ids)}
                            for p, ids in (topic.replica_assignment or {}).items()],
            "configs": [{"name": k, "value": v} for k, v in topic.configs.items()],
        }

    async def create_topics_each(self, new_topics: Iterable[NewTopic], *,
                                 validate_only: bool = False, timeout: float | None = None
                                 ) -> dict[str, KafkaError | None]:
        """Create topics with one request; per topic None when created, else its error
        (TopicAlreadyExistsError, InvalidConfigError, ...), returned, not raised."""
        topics = {t.name: t for t in new_topics}
        if not topics:
            return {}
        timeout_ms = self._timeout_ms(timeout)

        def body(names: Sequence[str]) -> dict[str, Any]:
            return {"topics": [self._new_topic(topics[n]) for n in names],
                    "timeout": timeout_ms, "validate_only": validate_only}

        def answers(response: Any) -> Iterable[Answer[str, None]]:
            return ((r.name, r.error_code, getattr(r, "error_message", None), None)
                    for r in response.topics)

        return await self._call_each("createTopics", self._to_controller("createTopics"),
                                     ApiKey.CREATE_TOPICS, list(topics), body, answers,
                                     _topic_what, timeout=timeout)

    async def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                            timeout: float | None = None) -> None:
        """Create topics; raises the first error (e.g. TopicAlreadyExistsError)."""
        _raise_first(await self.create_topics_each(new_topics, validate_only=validate_only,
                                                   timeout=timeout))

    async def create_topic(self, name: str, num_partitions: int | None = None,
                           replication_factor: int | None = None,
                           configs: Mapping[str, str] | None = None, *,
                           timeout: float | None = None) -> None:
        await self.create_topics([NewTopic(name, num_partitions, replication_factor,
                                           dict(configs or {}))], timeout=timeout)

    async def delete_topics_each(self, names: Iterable[str], *, timeout: float | None = None
                                 ) -> dict[str, KafkaError | None]:
        """Delete topics with one request; per topic None when deleted, else its error
        (UnknownTopicOrPartitionError, TopicDeletionDisabledError, ...)."""
        names = list(dict.fromkeys(names))
        if not names:
            return {}
        timeout_ms = self._timeout_ms(timeout)

        def body(batch: Sequence[str]) -> dict[str, Any]:
            return {"topic_names": list(batch), "timeout": timeout_ms,
                    "topics": [{"name": n, "topic_id": _ZERO_UUID} for n in batch]}

        def answers(response: Any) -> Iterable[Answer[str, None]]:
            return ((r.name, r.error_code, getattr(r, "error_message", None), None)
                    for r in response.responses)

        return await self._call_each("deleteTopics", self._to_controller("deleteTopics"),
                                     ApiKey.DELETE_TOPICS, names, body, answers, _topic_what,
                                     timeout=timeout)

    async def delete_topics(self, names: Iterable[str], *,
                            timeout: float | None = None) -> None:
        _raise_first(await self.delete_topics_each(names, timeout=timeout))

    @staticmethod
    def _metadata_body(names: Sequence[str] | None) -> dict[str, Any]:
        return {"topics": None if names is None else [{"name": n} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}

    async def _topic_metadata(self, names: list[str] | None, name: str,
                              timeout: float | None) -> Any:
        return await self._call(name, self._any(name), ApiKey.METADATA,
                                self._metadata_body(names),
                                lambda response, _node: response, timeout=timeout)

    async def list_topics(self, *, include_internal: bool = False,
                          timeout: float | None = None) -> list[str]:
        """Names of all topics, sorted (internal ones such as __consumer_offsets only when
        asked)."""
        response = await self._topic_metadata(None, "listTopics", timeout)
        return sorted(t.name for t in response.topics if t.error_code == ErrorCode.none
                      and (include_internal or not t.is_internal))

    @staticmethod
    def _descriptions(response: Any) -> Iterable[Answer[str, TopicDescription | None]]:
        """Each topic of a Metadata response: its error, or its description."""
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                missing = topic.error_code == ErrorCode.unknown_topic_or_partition
                yield (topic.name, topic.error_code,
                       f"Topic '{topic.name}' does not exist" if missing else None, None)
                continue
            topic_id = getattr(topic, "topic_id", None)
            partitions = tuple(sorted((PartitionDescription(
                p.partition_index, nodes.get(p.leader_id), p.leader_id,
                getattr(p, "leader_epoch", -1), tuple(p.replica_nodes), tuple(p.isr_nodes),
                tuple(getattr(p, "offline_replicas", ()))) for p in topic.partitions),
                key=lambda p: p.partition))
            yield topic.name, ErrorCode.none, None, TopicDescription(
                topic.name, None if topic_id in (None, _ZERO_UUID) else topic_id,
                bool(topic.is_internal), partitions)

    async def describe_topics_each(self, names: Iterable[str], *,
                                   timeout: float | None = None
                                   ) -> dict[str, TopicDescription | KafkaError]:
        """Per topic, with one Metadata request: its description, or its error
        (UnknownTopicOrPartitionError for a topic that does not exist)."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        found = await self._call_each(
            "describeTopics", self._any("describeTopics"), ApiKey.METADATA, wanted,
            self._metadata_body, self._descriptions, _topic_what, timeout=timeout)
        return {name: value for name, value in found.items() if value is not None}

    async def describe_topics(self, names: Iterable[str] | None = None, *,
                              timeout: float | None = None) -> dict[str, TopicDescription]:
        """Partitions with leader, replicas and ISR per topic (all topics when None).
        Raises UnknownTopicOrPartitionError for a topic that does not exist."""
        if names is not None:
            found = await self.describe_topics_each(names, timeout=timeout)
            _raise_first(found)
            return {name: value for name, value in found.items()
                    if isinstance(value, TopicDescription)}
        response = await self._topic_metadata(None, "describeTopics", timeout)
        out: dict[str, TopicDescription] = {}
        for name, code, message, description in self._descriptions(response):
            if code != ErrorCode.none:
                raise _error(code, message, _topic_what(name))
            assert description is not None
            out[name] = description
        return dict(sorted(out.items()))

    async def create_partitions_each(self, new_partitions: Mapping[str, NewPartitions | int],
                                     *, validate_only: bool = False,
                                     timeout: float | None = None
                                     ) -> dict[str, KafkaError | None]:
        """Grow topics with one request; per topic None when grown, else its error
        (InvalidPartitionsError for a count that is not an increase, ...)."""
        if not new_partitions:
            return {}
        specs = {topic: NewPartitions(spec) if isinstance(spec, int) else spec
                 for topic, spec in new_partitions.items()}
        timeout_ms = self._timeout_ms(timeout)

        def body(names: Sequence[str]) -> dict[str, Any]:
            return {"topics": [{"name": n, "count": specs[n].total_count,
                                "assignments": None if specs[n].assignments is None else
                                [{"broker_ids": list(ids)} for ids in specs[n].assignments]}
                               for n in names],
                    "timeout": timeout_ms, "validate_only": validate_only}

        def answers(response: Any) -> Iterable[Answer[str, None]]:
            return ((r.name, r.error_code, r.error_message, None) for r in response.results)

        return await self._call_each("createPartitions",
                                     self._to_controller("createPartitions"),
                                     ApiKey.CREATE_PARTITIONS, list(specs), body, answers,
                                     _topic_what, timeout=timeout)

    async def create_partitions(self, new_partitions: Mapping[str, NewPartitions | int], *,
                                validate_only: bool = False,
                                timeout: float | None = None) -> None:
        _raise_first(await self.create_partitions_each(
            new_partitions, validate_only=validate_only, timeout=timeout))

    # -------------------------------------------------------------------------- replicas

    async def elect_leaders(self, election_type: ElectionType | int,
                            partitions: Iterable[TopicPartition] | None = None, *,
                            timeout: float | None = None
                            ) -> dict[TopicPartition, KafkaError | None]:
        """Elect leaders (KIP-460): ElectionType.PREFERRED moves leadership back to each
        partition's first assigned replica, ElectionType.UNCLEAN gives a partition without a
        leader any live replica. Per partition: None when elected, else its error (e.g.
        ElectionNotNeededError, PreferredLeaderNotAvailableError,
        EligibleLeadersNotAvailableError), which is returned, not raised. With partitions
        None every partition is tried and those that needed no election are left out."""
        topic_partitions = None if partitions is None else [
            {"topic": topic, "partitions": parts}
            for topic, parts in self._by_topic(partitions).items()]
        body = {"election_type": int(election_type), "topic_partitions": topic_partitions,
                "timeout": self._timeout_ms(timeout)}

        def handle(response: Any, _node: int) -> dict[TopicPartition, KafkaError | None]:
            _check(getattr(response, "error_code", ErrorCode.none), None, "electLeaders")
            out: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.replica_election_results:
                for p in topic.partition_result:
                    tp = TopicPartition(topic.topic, p.partition_id)
                    if p.error_code == ErrorCode.none:
                        out[tp] = None
                        continue
                    code = ErrorCode(p.error_code)
                    out[tp] = error_for(code, f"Partition {tp}: "
                                              f"{p.error_message or code.name.upper()}")
            return out

        return await self._call("electLeaders", self._to_controller("electLeaders"),
                                _ELECT_LEADERS, body, handle, timeout=timeout)

    async def alter_partition_reassignments_each(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to target replicas (KIP-455), or cancel a partition's ongoing
        move with None, with one request. Per partition None when the controller has
        started (or cancelled) the move, else its error (InvalidReplicaAssignmentError,
        NoReassignmentInProgressError, ...). New replicas then catch up, and each move
        completes when its target is in sync (see list_partition_reassignments)."""
        if not reassignments:
            return {}
        timeout_ms = self._timeout_ms(timeout)

        def body(partitions: Sequence[TopicPartition]) -> dict[str, Any]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp in partitions:
                target = reassignments[tp]
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition,
                     "replicas": None if target is None else list(target)})
            return {"timeout": timeout_ms,
                    "topics": [{"name": topic, "partitions": parts}
                               for topic, parts in topics.items()]}

        def answers(response: Any) -> Iterable[Answer[TopicPartition, None]]:
            _check(response.error_code, response.error_message, "alterPartitionReassignments")
            return ((TopicPartition(topic.name, p.partition_index), p.error_code,
                     p.error_message, None)
                    for topic in response.responses for p in topic.partitions)

        return await self._call_each(
            "alterPartitionReassignments", self._to_controller("alterPartitionReassignments"),
            _ALTER_PARTITION_REASSIGNMENTS, list(reassignments), body, answers,
            lambda tp: f"Partition {tp.topic}-{tp.partition}", timeout=timeout)

    async def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout: float | None = None) -> None:
        """As alter_partition_reassignments_each, raising the first error (e.g.
        InvalidReplicaAssignmentError or NoReassignmentInProgressError); the other
        partitions of the call are changed all the same."""
        _raise_first(await self.alter_partition_reassignments_each(reassignments,
                                                                   timeout=timeout))

    async def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None = None, *,
            timeout: float | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """The ongoing reassignments among `partitions` (None: in the whole cluster);
        partitions not being reassigned, or unknown, are not in the result."""
        topics = None if partitions is None else [
            {"name": topic, "partition_indexes": parts}
            for topic, parts in self._by_topic(partitions).items()]
        body = {"timeout": self._timeout_ms(timeout), "topics": topics}

        def handle(response: Any, _node: int) -> dict[TopicPartition, PartitionReassignment]:
            _check(response.error_code, response.error_message, "listPartitionReassignments")
            return {TopicPartition(topic.name, p.partition_index): PartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
                for topic in response.topics for p in topic.partitions}

        return await self._call("listPartitionReassignments",
                                self._to_controller("listPartitionReassignments"),
                                _LIST_PARTITION_REASSIGNMENTS, body, handle, timeout=timeout)

    # -------------------------------------------------------------------------- configs

    def _by_config_target(self, resources: Iterable[ConfigResource], name: str
                          ) -> list[tuple[Callable[[float], Awaitable[int]],
                                          list[ConfigResource]]]:
        """Resources grouped by the node that answers for them: a broker's own settings
        by that broker, everything else (topics, groups, cluster defaults) by any one, in
        one request."""
        groups: dict[str, list[ConfigResource]] = {}
        for resource in dict.fromkeys(resources):
            per_broker = resource.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) \
                and resource.name
            groups.setdefault(resource.name if per_broker else "", []).append(resource)
        return [(self._to_broker(int(node), name) if node else self._any(name), members)
                for node, members in groups.items()]

    @staticmethod
    def _config_key(resources: Iterable[ConfigResource]
                    ) -> Callable[[int, str], ConfigResource | None]:
        """A response entry's (type, name) back to the resource that was asked for."""
        asked = {(int(r.type), r.name): r for r in resources}
        return lambda kind, name: asked.get((kind, name))

    @staticmethod
    def _config_what(resource: ConfigResource) -> str:
        return f"{resource.type.name.capitalize()} '{resource.name}'"

    @staticmethod
    def _config_entries(result: Any) -> dict[str, ConfigEntry]:
        entries = {}
        for c in result.configs:
            source = ConfigSource(getattr(c, "config_source", 0))
            entries[c.name] = ConfigEntry(
                c.name, c.value, source, bool(c.read_only), bool(c.is_sensitive),
                source is ConfigSource.DEFAULT_CONFIG or bool(getattr(c, "is_default", False)),
                tuple((s.name, s.value, ConfigSource(s.source))
                      for s in getattr(c, "synonyms", ()) or ()),
                getattr(c, "documentation", None))
        return entries

    async def describe_configs_each(self, resources: Iterable[ConfigResource], *,
                                    include_synonyms: bool = False,
                                    include_documentation: bool = False,
                                    timeout: float | None = None
                                    ) -> dict[ConfigResource, dict[str, ConfigEntry] | KafkaError]:
        """Per resource, every config entry with its value and source, or its error
        (UnknownTopicOrPartitionError, ...). Topics go in one request to any broker, a
        broker's own settings to that broker."""
        out: dict[ConfigResource, dict[str, ConfigEntry] | KafkaError] = {}
        for target, members in self._by_config_target(resources, "describeConfigs"):
            key = self._config_key(members)

            def body(batch: Sequence[ConfigResource]) -> dict[str, Any]:
                return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                       "configuration_keys": None} for r in batch],
                        "include_synonyms": include_synonyms,
                        "include_documentation": include_documentation}

            def answers(response: Any, key: Callable[[int, str], ConfigResource | None] = key
                        ) -> Iterable[Answer[ConfigResource | None, dict[str, ConfigEntry] | None]]:
                return ((key(r.resource_type, r.resource_name), r.error_code, r.error_message,
                         self._config_entries(r) if r.error_code == ErrorCode.none else None)
                        for r in response.results)

            found = await self._call_each("describeConfigs", target, ApiKey.DESCRIBE_CONFIGS,
                                          members, body, answers, self._config_what,
                                          timeout=timeout)
            out.update({r: value for r, value in found.items() if value is not None})
        return out

    async def describe_configs(self, resources: Iterable[ConfigResource], *,
                               include_synonyms: bool = False,
                               include_documentation: bool = False,
                               timeout: float | None = None
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config entry of each resource, with its value and source; raises the
        first resource's error."""
        found = await self.describe_configs_each(
            resources, include_synonyms=include_synonyms,
            include_documentation=include_documentation, timeout=timeout)
        _raise_first(found)
        return {r: value for r, value in found.items() if not isinstance(value, KafkaError)}

    async def incremental_alter_configs_each(
            self, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
            validate_only: bool = False, timeout: float | None = None
            ) -> dict[ConfigResource, KafkaError | None]:
        """Set, delete, append to or subtract from individual settings of many resources
        (topics in one request); per resource None when changed, else its error
        (InvalidConfigError, PolicyViolationError, ...)."""
        ops = {resource: list(items) for resource, items in changes.items()}
        out: dict[ConfigResource, KafkaError | None] = {}
        for target, members in self._by_config_target(ops, "incrementalAlterConfigs"):
            key = self._config_key(members)

            def body(batch: Sequence[ConfigResource]) -> dict[str, Any]:
                return {"resources": [{
                    "resource_type": int(r.type), "resource_name": r.name,
                    "configs": [{"name": op.name, "config_operation": int(op.op),
                                 "value": op.value} for op in ops[r]]} for r in batch],
                    "validate_only": validate_only}

            def answers(response: Any, key: Callable[[int, str], ConfigResource | None] = key
                        ) -> Iterable[Answer[ConfigResource | None, None]]:
                return ((key(r.resource_type, r.resource_name), r.error_code, r.error_message,
                         None) for r in response.responses)

            out.update(await self._call_each(
                "incrementalAlterConfigs", target, ApiKey.INCREMENTAL_ALTER_CONFIGS, members,
                body, answers, self._config_what, timeout=timeout))
        return out

    async def incremental_alter_configs(
            self, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
            validate_only: bool = False, timeout: float | None = None) -> None:
        """Set, delete, append to or subtract from individual settings."""
        _raise_first(await self.incremental_alter_configs_each(
            changes, validate_only=validate_only, timeout=timeout))

    # -------------------------------------------------------------------------- ACLs

    async def create_acls_each(self, bindings: Iterable[AclBinding], *,
                               timeout: float | None = None
                               ) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs with one CreateAcls request to any broker (it forwards to the
        controller); per binding None when created (or already there), else its error:
        InvalidRequestError for one the controller refuses (a principal without its type,
        a CLUSTER name other than kafka-cluster) or that holds a filter's ANY, MATCH or
        UNKNOWN (refused before sending), ClusterAuthorizationFailedError without ALTER on
        the cluster, SecurityDisabledError when the brokers have no authorizer."""
        wanted = list(dict.fromkeys(bindings))
        out = {binding: access.creation_error(binding) for binding in wanted}
        valid = [binding for binding in wanted if out[binding] is None]
        if valid:
            body, answers = _by_position(
                lambda batch: {"creations": [access.creation(b) for b in batch]},
                lambda response: response.results,
                lambda binding, result: (binding, result.error_code, result.error_message,
                                         None))
            out.update(await self._call_each("createAcls", self._any("createAcls"),
                                             ApiKey.CREATE_ACLS, valid, body, answers,
                                             access.binding_text, timeout=timeout))
        return out

    async def create_acls(self, bindings: Iterable[AclBinding], *,
                          timeout: float | None = None) -> None:
        """Create ACLs; raises the first binding's error."""
        _raise_first(await self.create_acls_each(bindings, timeout=timeout))

    async def describe_acls(self, acl_filter: AclBindingFilter, *,
                            timeout: float | None = None) -> list[AclBinding]:
        """The ACLs that match the filter (`AclBindingFilter()`: all of them), from any
        broker's metadata. Pattern type MATCH finds every ACL that applies to the named
        resource: literal, `*` and prefixes of the name."""
        error = access.filter_error(acl_filter)
        if error is not None:
            raise error

        def handle(response: Any, _node: int) -> list[AclBinding]:
            _check(response.error_code, response.error_message, "describeAcls")
            return access.described(response)

        return await self._call("describeAcls", self._any("describeAcls"),
                                ApiKey.DESCRIBE_ACLS, access.filter_fields(acl_filter),
                                handle, timeout=timeout)

    async def delete_acls_each(self, filters: Iterable[AclBindingFilter], *,
                               timeout: float | None = None
                               ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete the ACLs matching each filter with one DeleteAcls request to any broker;
        per filter the ACLs it deleted, or its error (as for create_acls_each)."""
        wanted = list(dict.fromkeys(filters))
        out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
        for acl_filter in wanted:
            error = access.filter_error(acl_filter)
            if error is not None:
                out[acl_filter] = error
        valid = [acl_filter for acl_filter in wanted if acl_filter not in out]

        def answer(acl_filter: AclBindingFilter, result: Any
                   ) -> Answer[AclBindingFilter, list[AclBinding] | None]:
            # The filter's error, or else the first ACL that failed to be deleted.
            errors = [r for r in (result, *result.matching_acls)
                      if r.error_code != ErrorCode.none]
            if errors:
                return acl_filter, errors[0].error_code, errors[0].error_message, None
            return (acl_filter, ErrorCode.none, None,
                    [access.binding_of(m, m) for m in result.matching_acls])

        if valid:
            body, answers = _by_position(
                lambda batch: {"filters": [access.filter_fields(f) for f in batch]},
                lambda response: response.filter_results, answer)
            found = await self._call_each("deleteAcls", self._any("deleteAcls"),
                                          ApiKey.DELETE_ACLS, valid, body, answers,
                                          access.filter_text, timeout=timeout)
            out.update({f: value for f, value in found.items() if value is not None})
        return {acl_filter: out[acl_filter] for acl_filter in wanted}

    async def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                          timeout: float | None = None) -> list[AclBinding]:
        """Delete the ACLs matching any of the filters; returns those deleted, or raises the
        first filter's error."""
        found = await self.delete_acls_each(filters, timeout=timeout)
        _raise_first(found)
        deleted = (binding for value in found.values() if not isinstance(value, KafkaError)
                   for binding in value)
        return list(dict.fromkeys(deleted))

    # -------------------------------------------------------------------------- SCRAM users

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None, *,
                                              timeout: float | None = None
                                              ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (never the credentials). None
        or no users: every user that has one, as in Kafka; named users without any are
        left out."""
        names = [] if users is None else list(dict.fromkeys(users))
        # Every user is asked for with an empty list, not null, as Kafka's admin client
        # does: Kafka's broker fails to answer a refused request whose list is null.
        body = {"users": [{"name": name} for name in names]}

        def handle(response: Any, _node: int) -> dict[str, list[ScramCredentialInfo]]:
            _check(response.error_code, response.error_message,
                   "describeUserScramCredentials")
            out: dict[str, list[ScramCredentialInfo]] = {}
            for result in response.results:
                if result.error_code == ErrorCode.resource_not_found:
                    continue
                _check(result.error_code, result.error_message, f"User '{result.user}'")
                out[result.user] = [ScramCredentialInfo(ScramMechanism.of(info.mechanism),
                                                        info.iterations)
                                    for info in result.credential_infos]
            return out

        return await self._call("describeUserScramCredentials",
                                self._any("describeUserScramCredentials"),
                                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body, handle,
                                timeout=timeout)

    async def alter_user_scram_credentials_each(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout: float | None = None) -> dict[str, KafkaError | None]:
        """Upsert and delete SCRAM credentials with one AlterUserScramCredentials request;
        per user None when changed, else its error: UnacceptableCredentialError (no user
        name or password, iterations outside 4096..16384), UnsupportedSaslMechanismError
        (refused before sending; the user's other changes are not sent either),
        ResourceNotFoundError (deleting a credential that does not exist),
        DuplicateResourceError (Kafka changes a user once per request: change its second
        mechanism in another call). The salted passwords are derived off the event loop."""
        by_user: dict[str, list[access.ScramAlteration]] = {}
        out: dict[str, KafkaError | None] = {}
        for alteration in alterations:
            by_user.setdefault(alteration.user, []).append(alteration)
            error = access.alteration_error(alteration)
            if error is not None and alteration.user not in out:
                out[alteration.user] = error
        users = [user for user in by_user if user not in out]
        if users:
            def prepare() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
                return {user: ([access.deletion(a) for a in by_user[user]
                                if isinstance(a, UserScramCredentialDeletion)],
                               [access.upsertion(a) for a in by_user[user]
                                if isinstance(a, UserScramCredentialUpsertion)])
                        for user in users}

            wire = await asyncio.to_thread(prepare)

            def body(batch: Sequence[str]) -> dict[str, Any]:
                return {"deletions": [d for user in batch for d in wire[user][0]],
                        "upsertions": [u for user in batch for u in wire[user][1]]}

            def answers(response: Any) -> Iterable[Answer[str, None]]:
                return ((r.user, r.error_code, r.error_message, None)
                        for r in response.results)

            name = "alterUserScramCredentials"
            out.update(await self._call_each(name, self._to_controller(name),
                                             ApiKey.ALTER_USER_SCRAM_CREDENTIALS, users,
                                             body, answers, lambda user: f"User '{user}'",
                                             timeout=timeout))
        return {user: out[user] for user in by_user}

    async def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout: float | None = None) -> None:
        """Upsert and delete SCRAM credentials; raises the first user's error."""
        _raise_first(await self.alter_user_scram_credentials_each(alterations,
                                                                  timeout=timeout))

    # -------------------------------------------------------------------------- cluster

    async def describe_cluster(self, *, include_fenced_brokers: bool = False,
                               timeout: float | None = None) -> ClusterDescription:
        """The cluster id, the controller and the registered, unfenced brokers; with
        `include_fenced_brokers` (DescribeCluster v2, KIP-1073) the fenced ones too, named
        in `fenced`."""
        def handle(response: Any, _node: int) -> ClusterDescription:
            _check(response.error_code, response.error_message, "describeCluster")
            nodes = tuple(Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers)
            fenced = frozenset(b.broker_id for b in response.brokers
                               if getattr(b, "is_fenced", False))
            controller = next((n for n in nodes if n.node_id == response.controller_id), None)
            return ClusterDescription(response.cluster_id, controller, nodes, fenced)

        try:
            return await self._call("describeCluster", self._any("describeCluster"),
                                    ApiKey.DESCRIBE_CLUSTER,
                                    {"include_cluster_authorized_operations": False,
                                     "endpoint_type": 1,
                                     "include_fenced_brokers": include_fenced_brokers},
                                    handle, timeout=timeout,
                                    min_version=2 if include_fenced_brokers else None)
        except UnsupportedVersionError:
            if include_fenced_brokers:
                raise
            # Older brokers: the same facts from Metadata.
            response = await self._topic_metadata([], "describeCluster", timeout)
            nodes = tuple(Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers)
            controller = next((n for n in nodes if n.node_id == response.controller_id), None)
            return ClusterDescription(response.cluster_id, controller, nodes)

    async def unregister_broker(self, broker_id: int, *, timeout: float | None = None) -> None:
        """Remove a broker's registration (Kafka's Admin.unregisterBroker, KIP-631), e.g.
        after it was drained and shut down for good. BrokerIdNotRegisteredError when the
        controller does not know it; a broker still running registers again."""
        def handle(response: Any, _node: int) -> None:
            _check(response.error_code, response.error_message, f"Broker {broker_id}")

        await self._call("unregisterBroker", self._any("unregisterBroker"),
                         ApiKey.UNREGISTER_BROKER, {"broker_id": broker_id}, handle,
                         timeout=timeout)

    async def describe_metadata_quorum(self, *, timeout: float | None = None) -> QuorumInfo:
        """The metadata quorum: leader, epoch and each voter's and observer's progress.
        Any broker answers (it forwards to the active controller), as for Kafka's
        `kafka-metadata-quorum --bootstrap-server`."""
        def replicas(entries: Any) -> tuple[QuorumReplica, ...]:
            return tuple(QuorumReplica(r.replica_id, r.log_end_offset,
                                       getattr(r, "last_fetch_timestamp", -1),
                                       getattr(r, "last_caught_up_timestamp", -1))
                         for r in entries)

        def handle(response: Any, _node: int) -> QuorumInfo:
            _check(response.error_code, getattr(response, "error_message", None),
                   "describeMetadataQuorum")
            partition = response.topics[0].partitions[0]
            _check(partition.error_code, getattr(partition, "error_message", None),
                   "describeMetadataQuorum")
            return QuorumInfo(partition.leader_id, partition.leader_epoch,
                              partition.high_watermark, replicas(partition.current_voters),
                              replicas(partition.observers))

        body = {"topics": [{"topic_name": _METADATA_TOPIC,
                            "partitions": [{"partition_index": 0}]}]}
        return await self._call("describeMetadataQuorum", self._any("describeMetadataQuorum"),
                                ApiKey.DESCRIBE_QUORUM, body, handle, timeout=timeout)

    async def describe_log_dirs(self, broker_ids: Iterable[int] | None = None, *,
                                timeout: float | None = None
                                ) -> dict[int, dict[str, LogDirDescription]]:
        """Per broker, per log directory: the replicas it holds, their sizes and lags."""
        if broker_ids is None:
            cluster = await self._cluster(self._deadline(timeout), "describeLogDirs")
            broker_ids = [node.node_id for node in cluster.nodes]
        out: dict[int, dict[str, LogDirDescription]] = {}
        for broker_id in broker_ids:
            def handle(response: Any, _node: int) -> dict[str, LogDirDescription]:
                _check(getattr(response, "error_code", 0), None, "describeLogDirs")
                dirs = {}
                for result in response.results:
                    replicas = {TopicPartition(t.name, p.partition_index): ReplicaInfo(
                        p.partition_size, p.offset_lag, bool(p.is_future_key))
                        for t in result.topics for p in t.partitions}
                    error = None if result.error_code == ErrorCode.none else error_for(
                        result.error_code, f"Log dir {result.log_dir}")
                    total = getattr(result, "total_bytes", -1)
                    usable = getattr(result, "usable_bytes", -1)
                    dirs[result.log_dir] = LogDirDescription(
                        result.log_dir, error, replicas, None if total < 0 else total,
                        None if usable < 0 else usable)
                return dirs

            out[broker_id] = await self._call(
                "describeLogDirs", self._to_broker(broker_id, "describeLogDirs"),
                ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, handle, timeout=timeout)
        return out

    # -------------------------------------------------------------------------- records

    async def _leaders(self, partitions: Iterable[TopicPartition], deadline: float,
                       name: str) -> dict[int, list[TopicPartition]]:
        """Group partitions by leader, refreshing metadata for their topics."""
        partitions = list(partitions)
        topics = sorted({tp.topic for tp in partitions})
        response = await self._topic_metadata(topics, name,
                                              max(deadline - time.monotonic(), 0.001))
        leaders: dict[TopicPartition, int] = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                raise error_for(topic.error_code, f"Topic '{topic.name}'")
            for p in topic.partitions:
                leaders[TopicPartition(topic.name, p.partition_index)] = p.leader_id
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            if tp not in leaders:
                raise error_for(ErrorCode.unknown_topic_or_partition,
                                f"Partition {tp} does not exist")
            if leaders[tp] < 0:
                raise error_for(ErrorCode.leader_not_available, f"No leader for {tp}")
            by_node.setdefault(leaders[tp], []).append(tp)
        return by_node

    @staticmethod
    def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        return topics

    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout: float | None = None) -> dict[TopicPartition, int]:
        """Delete records below the given offsets (-1: the high watermark); returns each
        partition's new low watermark."""
        deadline = self._deadline(timeout)
        out: dict[TopicPartition, int] = {}
        leaders = await self._leaders(before, deadline, "deleteRecords")
        timeout_ms = round((self.default_timeout if timeout is None else timeout) * 1000)
        for node, tps in leaders.items():
            body = {"topics": [{"name": topic, "partitions": [
                {"partition_index": p, "offset": before[TopicPartition(topic, p)]}
                for p in parts]} for topic, parts in self._by_topic(tps).items()],
                "timeout": timeout_ms}

            def handle(response: Any, _node: int) -> dict[TopicPartition, int]:
                result = {}
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        _check(p.error_code, None, f"Partition {tp}")
                        result[tp] = p.low_watermark
                return result

            out.update(await self._call("deleteRecords", self._to_broker(node, "deleteRecords"),
                                        ApiKey.DELETE_RECORDS, body, handle,
                                        timeout=max(deadline - time.monotonic(), 0.001)))
        return out

    async def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                           isolation_level: int = 0, timeout: float | None = None
                           ) -> dict[TopicPartition, ListedOffset]:
        """Offsets by OffsetSpec (EARLIEST, LATEST, MAX_TIMESTAMP or a timestamp); a
        timestamp with no record at or after it gives offset -1."""
        deadline = self._deadline(timeout)
        out: dict[TopicPartition, ListedOffset] = {}
        leaders = await self._leaders(specs, deadline, "listOffsets")
        timeout_ms = round((self.default_timeout if timeout is None else timeout) * 1000)
        for node, tps in leaders.items():
            body = {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1,
                         "timestamp": specs[TopicPartition(topic, p)], "max_num_offsets": 1}
                        for p in parts]} for topic, parts in self._by_topic(tps).items()],
                    "timeout": timeout_ms}

            def handle(response: Any, _node: int) -> dict[TopicPartition, ListedOffset]:
                result = {}
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        _check(p.error_code, None, f"Partition {tp}")
                        epoch = getattr(p, "leader_epoch", -1)
                        result[tp] = ListedOffset(p.offset, p.timestamp,
                                                  None if epoch < 0 else epoch)
                return result

            out.update(await self._call("listOffsets", self._to_broker(node, "listOffsets"),
                                        ApiKey.LIST_OFFSETS, body, handle,
                                        timeout=max(deadline - time.monotonic(), 0.001)))
        return out

    # -------------------------------------------------------------------------- groups

    async def list_groups(self, *, timeout: float | None = None) -> list[GroupListing]:
        """Every group known to any broker."""
        cluster = await self._cluster(self._deadline(timeout), "listGroups")
        found: dict[str, GroupListing] = {}
        for node in cluster.nodes:
            def handle(response: Any, _node: int) -> list[GroupListing]:
                _check(response.error_code, None, "listGroups")
                return [GroupListing(g.group_id, g.protocol_type,
                                     getattr(g, "group_state", None) or None,
                                     getattr(g, "group_type", None) or None)
                        for g in response.groups]

            body = {"states_filter": [], "types_filter": []}
            for listing in await self._call("listGroups",
                                            self._to_broker(node.node_id, "listGroups"),
                                            ApiKey.LIST_GROUPS, body, handle, timeout=timeout):
                found[listing.group_id] = listing
        return sorted(found.values(), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: Iterable[str], *,
                              timeout: float | None = None) -> dict[str, GroupDescription]:
        """Members, assignments and state per group. A group that does not exist raises
        GroupIdNotFoundError (Kafka 4 brokers; older ones describe it in state Dead)."""
        out: dict[str, GroupDescription] = {}
        for group_id in group_ids:
            def handle(response: Any, node: int, group_id: str = group_id
                       ) -> GroupDescription:
                group = response.groups[0]
                _check(group.error_code, getattr(group, "error_message", None),
                       f"Group '{group_id}'")
                members = []
                for m in group.members:
                    assignment: tuple[TopicPartition, ...] = ()
                    if group.protocol_type == "consumer" and m.member_assignment:
                        with contextlib.suppress(Exception):
                            assignment = tuple(Assignment.decode(m.member_assignment)
                                               .partitions)
                    members.append(MemberDescription(
                        m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                        m.client_host, assignment))
                return GroupDescription(group.group_id, group.group_state, group.protocol_type,
                                        group.protocol_data, tuple(members),
                                        self.metadata.cluster.node(node))

            out[group_id] = await self._call(
                "describeGroups", self._to_coordinator(group_id, "describeGroups"),
                ApiKey.DESCRIBE_GROUPS, {"groups": [group_id],
                                         "include_authorized_operations": False},
                handle, timeout=timeout, on_retry=self._forget_coordinator(group_id))
        return out

    async def delete_groups(self, group_ids: Iterable[str], *,
                            timeout: float | None = None) -> None:
        """Delete empty groups; raises GroupIdNotFoundError or NonEmptyGroupError."""
        for group_id in group_ids:
            def handle(response: Any, _node: int, group_id: str = group_id) -> None:
                for result in response.results:
                    _check(result.error_code, None, f"Group '{group_id}'")

            await self._call("deleteGroups", self._to_coordinator(group_id, "deleteGroups"),
                             ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}, handle,
                             timeout=timeout, on_retry=self._forget_coordinator(group_id))

    async def list_group_offsets(self, group_id: str,
                                 partitions: Iterable[TopicPartition] | None = None, *,
                                 timeout: float | None = None
                                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (all its partitions when None)."""
        topics = None if partitions is None else [
            {"name": topic, "partition_indexes": parts}
            for topic, parts in self._by_topic(partitions).items()]
        body = {"group_id": group_id, "topics": topics, "require_stable": False,
                "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                            "topics": topics}]}

        def handle(response: Any, _node: int) -> dict[TopicPartition, OffsetAndMetadata]:
            groups = getattr(response, "groups", None)
            if groups is not None and not hasattr(response, "topics"):
                group = groups[0]
                _check(group.error_code, None, f"Group '{group_id}'")
                topic_list = group.topics
            else:
                _check(response.error_code, None, f"Group '{group_id}'")
                topic_list = response.topics
            result = {}
            for topic in topic_list:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    _check(p.error_code, None, f"Partition {tp} of group '{group_id}'")
                    if p.committed_offset < 0:
                        continue
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    result[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "",
                                                   None if epoch < 0 else epoch)
            return result

        return await self._call("listConsumerGroupOffsets",
                                self._to_coordinator(group_id, "listConsumerGroupOffsets"),
                                ApiKey.OFFSET_FETCH, body, handle, timeout=timeout,
                                on_retry=self._forget_coordinator(group_id))

    async def alter_group_offsets(self, group_id: str,
                                  offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *,
                                  timeout: float | None = None) -> None:
        """Commit offsets for a group that has no active members (as Kafka requires)."""
        normalized = {tp: value if isinstance(value, OffsetAndMetadata)
                      else OffsetAndMetadata(value) for tp, value in offsets.items()}
        topics = [{"name": topic, "partitions": [{
            "partition_index": p,
            "committed_offset": normalized[TopicPartition(topic, p)].offset,
            "committed_leader_epoch": normalized[TopicPartition(topic, p)].leader_epoch
            if normalized[TopicPartition(topic, p)].leader_epoch is not None else -1,
            "committed_metadata": normalized[TopicPartition(topic, p)].metadata}
            for p in parts]} for topic, parts in self._by_topic(normalized).items()]
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time": -1, "topics": topics}

        def handle(response: Any, _node: int) -> None:
            for topic in response.topics:
                for p in topic.partitions:
                    _check(p.error_code, None,
                           f"Partition {topic.name}-{p.partition_index} of group '{group_id}'")

        await self._call("alterConsumerGroupOffsets",
                         self._to_coordinator(group_id, "alterConsumerGroupOffsets"),
                         ApiKey.OFFSET_COMMIT, body, handle, timeout=timeout,
                         on_retry=self._forget_coordinator(group_id))

    # -------------------------------------------------------------------------- transactions

    async def complete_transactions(self, prepared: Iterable[PreparedTransaction], *,
                                    commit: bool = True, timeout: float | None = None) -> None:
        """Commit (or abort) transactions that producers left prepared
        (`prepare_transaction()`): EndTxn on their behalf, to each transactional id's
        coordinator, all at once. A transaction fenced or timed out since it was prepared
        raises ProducerFencedError; the others still end. Retrying a commit that went
        through is harmless: the coordinator answers it as done."""
        calls = [self._end_transaction(p, commit, timeout) for p in prepared]
        errors = [r for r in await asyncio.gather(*calls, return_exceptions=True)
                  if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _end_transaction(self, prepared: PreparedTransaction, commit: bool,
                               timeout: float | None) -> None:
        txn_id = prepared.transactional_id
        body = {"transactional_id": txn_id, "producer_id": prepared.producer_id,
                "producer_epoch": prepared.producer_epoch, "committed": commit}

        def handle(response: Any, _node: int) -> None:
            code = ErrorCode(response.error_code)
            what = f"EndTxn for transactional id {txn_id}"
            if code is ErrorCode.concurrent_transactions:  # still ending the previous one
                raise _Retry(error_for(code, what))
            if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
                raise ProducerFencedError(
                    f"{what} (producer {prepared.producer_id}, epoch "
                    f"{prepared.producer_epoch}): fenced; a newer producer or the transaction "
                    f"timeout ended the transaction")
            _check(code, None, what)

        await self._call("endTxn",
                         self._to_coordinator(txn_id, "endTxn", CoordinatorType.TRANSACTION),
                         ApiKey.END_TXN, body, handle, timeout=timeout,
                         on_retry=self._forget_coordinator(txn_id, CoordinatorType.TRANSACTION),
                         max_version=TXN_V1_MAX[ApiKey.END_TXN])
