"""Metadata: brokers, controller, topics and partitions, with auto-creation as Kafka does it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import (
    TOPIC,
    allowed_names,
    authorized_operations,
    cluster_allowed,
    cluster_operations,
)
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.controller import INTERNAL_TOPICS, NewTopic, validate_topic_name
from moldau.broker.metadata.image import TopicImage
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

UNKNOWN_TOPIC_ID = 100


def brokers_for(broker: Broker, listener: str, *, include_fenced: bool = False
                ) -> list[dict[str, Any]]:
    """The registered brokers' addresses on `listener`; fenced ones only when asked
    (DescribeCluster v2), each entry then saying whether it is fenced."""
    nodes = []
    for record in sorted(broker.image.brokers.values(), key=lambda r: r.broker_id):
        if record.fenced and not include_fenced:
            continue  # as Kafka: clients see only brokers that can serve
        for name, host, port in record.endpoints:
            if name == listener:
                nodes.append({"node_id": record.broker_id, "host": host, "port": port,
                              "rack": record.rack, "is_fenced": record.fenced})
    return nodes


def controller_id(broker: Broker) -> int:
    """Clients cannot reach the controller listener; they are given the active controller
    when it is also a live broker (admin requests sent to it need no forwarding), else this
    broker, which forwards them."""
    leader = broker.quorum.leader_id
    registration = broker.image.brokers.get(leader) if leader is not None else None
    if registration is not None and not registration.fenced:
        return registration.broker_id
    return broker.node_id


def describe_topic(topic: TopicImage, operations: int | None) -> dict[str, Any]:
    """A topic's metadata; `operations` is its authorized-operations bit field, or None when
    the client did not ask for it."""
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": [{"error_code": ErrorCode.none, "partition_index": record.partition,
                        "leader_id": record.leader, "leader_epoch": record.leader_epoch,
                        "replica_nodes": list(record.replicas),
                        "isr_nodes": list(record.isr), "offline_replicas": []}
                       for record in sorted(topic.partitions.values(),
                                            key=lambda r: r.partition)],
        "topic_authorized_operations": -2**31 if operations is None else operations,
    }


def _error_topic(name: str | None, code: ErrorCode, topic_id: Any = None) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


async def _auto_create(broker: Broker, names: list[str]) -> dict[str, ErrorCode]:
    """Create missing topics with the broker defaults; returns errors by name."""
    errors: dict[str, ErrorCode] = {}
    creatable = []
    for name in names:
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            errors[name] = exc.code
            continue
        if name in INTERNAL_TOPICS:
            errors[name] = ErrorCode.unknown_topic_or_partition
        else:
            creatable.append(NewTopic(name))
    results = await broker.controller_channel.create_topics(creatable, validate_only=False)
    for topic, result in zip(creatable, results, strict=True):
        if isinstance(result, KafkaError) and result.code is not ErrorCode.topic_already_exists:
            errors[topic.name] = result.code
    return errors


class _ResponseCache:
    """Encoded Metadata responses of the current metadata image. Clients ask for the same
    topics again and again, and building a response costs milliseconds per few hundred
    partitions; the answer only changes with the image, so it is kept until the image is
    replaced. Only answers without side effects (no auto-creation) are kept."""

    LIMIT = 256
    # Every change to the image comes from a metadata record and moves its offset.

    def __init__(self) -> None:
        self.offset = -2
        self.frames: dict[tuple[Any, ...], bytes] = {}

    def get(self, offset: int, key: tuple[Any, ...]) -> bytes | None:
        """The frame for `key` if it was built from the image at metadata offset `offset`."""
        if offset != self.offset:
            self.offset = offset
            self.frames = {}
            return None
        return self.frames.get(key)

    def put(self, key: tuple[Any, ...], frame: bytes) -> None:
        if len(self.frames) >= self.LIMIT:
            self.frames.pop(next(iter(self.frames)))
        self.frames[key] = frame


_caches: dict[int, _ResponseCache] = {}


def _with_correlation_id(frame: bytes, correlation_id: int) -> Response:
    out = bytearray(frame)
    out[4:8] = correlation_id.to_bytes(4, "big", signed=True)
    return Response.of(bytes(out))


@api(3, "Metadata", 0, 12)
async def handle_metadata(broker: Broker, request: Request) -> Result:
    body = request.body
    version = request.header.api_version
    image = broker.image
    checked = broker.authorizer.enabled
    with_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    with_cluster_ops = 8 <= version <= 10 and bool(
        getattr(body, "include_cluster_authorized_operations", False))
    wanted = body.topics
    all_topics = wanted is None or (version == 0 and not wanted)
    cache = _caches.setdefault(id(broker), _ResponseCache())
    names_key = None if all_topics else tuple(item.name for item in wanted)
    # What a client may see depends on who and where it is once ACLs apply.
    who = (request.principal, request.host) if checked else None
    key = (version, request.listener, names_key, with_ops, with_cluster_ops, who)
    offset = image.offset
    if names_key is None or (None not in names_key and
                             all(name in image.topics for name in names_key)):
        frame = cache.get(image.offset, key)
        if frame is not None:
            return _with_correlation_id(frame, request.header.correlation_id)
    else:
        key = ()  # errors or auto-creation: answered fresh every time

    def described(topic: TopicImage) -> dict[str, Any]:
        operations = authorized_operations(broker, request, TOPIC, topic.name) \
            if with_ops else None
        return describe_topic(topic, operations)

    if all_topics:
        # Topics the client may not describe are left out, as if they did not exist.
        visible = allowed_names(broker, request, Operation.DESCRIBE, TOPIC, image.topics,
                                log_denied=False)
        topics = [described(topic) for topic in image.topics.values()
                  if topic.name in visible]
    else:
        topics = await _named_topics(broker, request, wanted, described)
    response = respond(request, {
        "brokers": brokers_for(broker, request.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": controller_id(broker),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations(broker, request)
        if with_cluster_ops else -2**31,
    })
    if key and image.offset == offset:
        cache.get(offset, key)  # drops the answers of an older image
        cache.put(key, bytes(response.parts[0]))
    return response


async def _named_topics(broker: Broker, request: Request, wanted: Any,
                        described: Callable[[TopicImage], dict[str, Any]]
                        ) -> list[dict[str, Any]]:
    """The topics a Metadata request names (or gives by id), auto-creating missing ones when
    allowed. Without DESCRIBE a topic is TOPIC_AUTHORIZATION_FAILED, exists or not; creating
    one needs CREATE on the cluster or on the topic."""
    image = broker.image
    body = request.body
    by_id = {item.topic_id: image.topics_by_id.get(item.topic_id)
             for item in wanted if item.name is None}
    names = [item.name for item in wanted if item.name is not None]
    named = names + [topic.name for topic in by_id.values() if topic is not None]
    describable = allowed_names(broker, request, Operation.DESCRIBE, TOPIC, named)
    allow_create = (getattr(body, "allow_auto_topic_creation", True)
                    and broker.config["auto.create.topics.enable"])
    missing = [name for name in dict.fromkeys(names)
               if name not in image.topics and name in describable]
    errors: dict[str, ErrorCode] = {}
    if missing and allow_create and broker.authorizer.enabled and not cluster_allowed(
            broker, request, Operation.CREATE, log_denied=False):
        creatable = allowed_names(broker, request, Operation.CREATE, TOPIC, missing)
        errors = {name: ErrorCode.topic_authorization_failed for name in missing
                  if name not in creatable}
        missing = [name for name in missing if name in creatable]
    if missing and allow_create:
        errors.update(await _auto_create(broker, missing))
    topics = []
    for item in wanted:
        name = item.name
        if name is None:
            topic = by_id[item.topic_id]
            if topic is None:
                topics.append(_error_topic(None, ErrorCode(UNKNOWN_TOPIC_ID), item.topic_id))
            elif topic.name not in describable:
                # Topic ids are not secret: Kafka answers with the id, but not the name.
                topics.append(_error_topic(None, ErrorCode.topic_authorization_failed,
                                           item.topic_id))
            else:
                topics.append(described(topic))
        elif name not in describable:
            topics.append(_error_topic(name, ErrorCode.topic_authorization_failed))
        elif name in image.topics and name not in errors:
            topics.append(described(image.topics[name]))
        else:
            code = errors.get(name, ErrorCode.unknown_topic_or_partition)
            if code is ErrorCode.unknown_topic_or_partition:
                try:
                    validate_topic_name(name)
                except KafkaError as exc:
                    code = exc.code
            topics.append(_error_topic(name, code))
    return topics


@api(75, "DescribeTopicPartitions", 0, 0)
async def handle_describe_topic_partitions(broker: Broker, request: Request) -> Result:
    """KIP-966: topics in name order, partitions paged by a cursor and a partition limit.
    There is no eligible leader replica (ELR) election, so those lists are empty."""
    body = request.body
    image = broker.image
    names = sorted({t.name for t in body.topics} if body.topics else image.topics)
    # Without DESCRIBE a topic is left out of a listing and refused when named.
    visible = allowed_names(broker, request, Operation.DESCRIBE, TOPIC, names,
                            log_denied=bool(body.topics))
    refused = [_error_topic(name, ErrorCode.topic_authorization_failed)
               for name in names if name not in visible] if body.topics else []
    names = [name for name in names if name in visible]
    cursor = body.cursor
    if cursor is not None:
        names = [name for name in names if name >= cursor.topic_name]
    budget = max(min(body.response_partition_limit, 2000), 1)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        topic = image.topics.get(name)
        if topic is None:
            topics.append(_error_topic(name, ErrorCode.unknown_topic_or_partition))
            continue
        described = describe_topic(
            topic, authorized_operations(broker, request, TOPIC, topic.name))
        first = cursor.partition_index if cursor is not None and \
            name == cursor.topic_name else 0
        partitions = [p for p in described["partitions"] if p["partition_index"] >= first]
        if len(partitions) > budget:
            next_cursor = {"topic_name": name,
                           "partition_index": partitions[budget]["partition_index"]}
            partitions = partitions[:budget]
        for partition in partitions:
            partition.update(eligible_leader_replicas=[], last_known_elr=[])
        described["partitions"] = partitions
        topics.append(described)
        budget -= len(partitions)
        if next_cursor is not None:
            break
        if budget == 0 and name != names[-1]:
            following = names[names.index(name) + 1]
            next_cursor = {"topic_name": following, "partition_index": 0}
            break
    return respond(request, {"topics": topics + refused, "next_cursor": next_cursor})
