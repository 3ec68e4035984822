"""Metadata: brokers, controller, topics and partitions, with auto-creation as Kafka does it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.controller import INTERNAL_TOPICS, NewTopic, validate_topic_name
from moldau.broker.metadata.image import TopicImage
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

# Every operation on a topic is allowed: no authorizer is configured.
TOPIC_OPERATIONS = sum(1 << bit for bit in (3, 4, 5, 6, 7, 8, 10, 11))
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


def describe_topic(topic: TopicImage, *, with_operations: bool) -> dict[str, Any]:
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
        "topic_authorized_operations": TOPIC_OPERATIONS if with_operations else -2**31,
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
    with_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    wanted = body.topics
    cache = _caches.setdefault(id(broker), _ResponseCache())
    names_key = None if wanted is None or (version == 0 and not wanted) else \
        tuple(item.name for item in wanted)
    key = (version, request.listener, names_key, with_ops)
    offset = image.offset
    if names_key is None or (None not in names_key and
                             all(name in image.topics for name in names_key)):
        frame = cache.get(image.offset, key)
        if frame is not None:
            return _with_correlation_id(frame, request.header.correlation_id)
    else:
        key = ()  # errors or auto-creation: answered fresh every time
    if wanted is None or (version == 0 and not wanted):
        topics = [describe_topic(topic, with_operations=with_ops)
                  for topic in image.topics.values()]
    else:
        allow_create = (getattr(body, "allow_auto_topic_creation", True)
                        and broker.config["auto.create.topics.enable"])
        names = [item.name for item in wanted if item.name is not None]
        missing = [name for name in dict.fromkeys(names) if name not in image.topics]
        errors: dict[str, ErrorCode] = {}
        if missing and allow_create:
            errors = await _auto_create(broker, missing)
        topics = []
        for item in wanted:
            name = item.name
            if name is None:
                topic = image.topics_by_id.get(getattr(item, "topic_id", None))
                topics.append(describe_topic(topic, with_operations=with_ops) if topic else
                              _error_topic(None, ErrorCode(UNKNOWN_TOPIC_ID), item.topic_id))
            elif name in image.topics and name not in errors:
                topics.append(describe_topic(image.topics[name], with_operations=with_ops))
            else:
                code = errors.get(name, ErrorCode.unknown_topic_or_partition)
                if code is ErrorCode.unknown_topic_or_partition:
                    try:
                        validate_topic_name(name)
                    except KafkaError as exc:
                        code = exc.code
                topics.append(_error_topic(name, code))
    response = respond(request, {
        "brokers": brokers_for(broker, request.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": controller_id(broker),
        "topics": topics,
        "cluster_authorized_operations": -2**31,
    })
    if key and image.offset == offset:
        cache.get(offset, key)  # drops the answers of an older image
        cache.put(key, bytes(response.parts[0]))
    return response


@api(75, "DescribeTopicPartitions", 0, 0)
async def handle_describe_topic_partitions(broker: Broker, request: Request) -> Result:
    """KIP-966: topics in name order, partitions paged by a cursor and a partition limit.
    There is no eligible leader replica (ELR) election, so those lists are empty."""
    body = request.body
    image = broker.image
    names = sorted({t.name for t in body.topics} if body.topics else image.topics)
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
        described = describe_topic(topic, with_operations=True)
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
    return respond(request, {"topics": topics, "next_cursor": next_cursor})
