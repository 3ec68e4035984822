"""ListOffsets (earliest, latest, by timestamp, max timestamp) and DeleteRecords."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import TOPIC, allowed_names, cluster_allowed
from moldau.broker.handlers.fetch import READ_COMMITTED, check_leader_epoch
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


def _refused(broker: Broker, request: Request, operation: Operation, names: Any) -> set[str]:
    """The topics among `names` on which the operation is not allowed."""
    names = set(names)
    return names - allowed_names(broker, request, operation, TOPIC, names)


def _per_partition(request_topics: Any, index_field: str,
                   answer: Callable[[str, Any], dict[str, Any]],
                   refused: set[str] | frozenset[str] = frozenset(),
                   denial: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Answer each requested partition, turning KafkaErrors into its error code; the
    partitions of `refused` topics get TOPIC_AUTHORIZATION_FAILED (and `denial`'s fields)."""
    topics = []
    for topic in request_topics:
        partitions = []
        for wanted in topic.partitions:
            index = getattr(wanted, index_field)
            if topic.name in refused:
                partitions.append({"partition_index": index, **(denial or {}),
                                   "error_code": ErrorCode.topic_authorization_failed})
                continue
            try:
                partitions.append({"partition_index": index, **answer(topic.name, wanted)})
            except KafkaError as exc:
                partitions.append({"partition_index": index, "error_code": exc.code})
        topics.append({"name": topic.name, "partitions": partitions})
    return topics


@api(2, "ListOffsets", 1, 10)
async def handle_list_offsets(broker: Broker, request: Request) -> Result:
    def answer(topic: str, wanted: Any) -> dict[str, Any]:
        partition = broker.replicas.leader(topic, wanted.partition_index)
        check_leader_epoch(partition, getattr(wanted, "current_leader_epoch", -1))
        log = partition.log
        target = wanted.timestamp
        # READ_COMMITTED (v2+) sees only up to the last stable offset.
        committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
        visible = log.last_stable_offset if committed else log.high_watermark
        found: tuple[int, int] | None
        if target == LATEST:
            found = (visible, -1)
        elif target in (EARLIEST, EARLIEST_LOCAL):
            found = (log.log_start_offset, -1)
        elif target == MAX_TIMESTAMP:
            found = log.offset_of_max_timestamp()
        elif target >= 0:
            found = log.offset_for_timestamp(target)
            if found is not None and found[0] >= visible:
                found = None
        else:
            found = None
        offset, timestamp = found if found is not None else (-1, -1)
        return {"error_code": ErrorCode.none, "offset": offset, "timestamp": timestamp,
                "leader_epoch": partition.leader_epoch if offset >= 0 else -1}

    refused = _refused(broker, request, Operation.DESCRIBE,
                       (topic.name for topic in request.body.topics))
    return respond(request, {"topics": _per_partition(
        request.body.topics, "partition_index", answer, refused,
        {"offset": -1, "timestamp": -1, "leader_epoch": -1})})


@api(21, "DeleteRecords", 0, 2)
async def handle_delete_records(broker: Broker, request: Request) -> Result:
    def answer(topic: str, wanted: Any) -> dict[str, Any]:
        log = broker.replicas.leader(topic, wanted.partition_index).log
        offset = log.high_watermark if wanted.offset == -1 else wanted.offset
        if offset < 0:
            raise KafkaError(ErrorCode.offset_out_of_range)
        return {"error_code": ErrorCode.none, "low_watermark": log.delete_records(offset)}

    refused = _refused(broker, request, Operation.DELETE,
                       (topic.name for topic in request.body.topics))

    def delete_all() -> list[dict[str, Any]]:
        topics = _per_partition(request.body.topics, "partition_index", answer, refused,
                                {"low_watermark": -1})
        broker.logs.checkpoint()  # the new log start offsets must survive a crash
        return topics

    # Deleting segments touches the disk: keep it off the event loop.
    topics = await asyncio.to_thread(delete_all)
    return respond(request, {"topics": topics})


@api(23, "OffsetForLeaderEpoch", 2, 4)
async def handle_offset_for_leader_epoch(broker: Broker, request: Request) -> Result:
    """KIP-101/320: the end offset of a leader epoch, so a client, or a follower starting
    to follow (replica_id >= 0, v3+), can tell where its log stops agreeing with the
    leader's. Only the leader answers, with its current epoch checked as for Fetch. A
    follower needs CLUSTER_ACTION on the cluster, a consumer DESCRIBE on the topic."""
    names = {topic.topic for topic in request.body.topics}
    refused: set[str] = set()
    if broker.authorizer.enabled and not cluster_allowed(
            broker, request, Operation.CLUSTER_ACTION, log_denied=False):
        refused = _refused(broker, request, Operation.DESCRIBE, names)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition": wanted.partition}
            if topic.topic in refused:
                entry.update(error_code=ErrorCode.topic_authorization_failed)
                partitions.append(entry)
                continue
            try:
                partition = broker.replicas.leader(topic.topic, wanted.partition)
                check_leader_epoch(partition, wanted.current_leader_epoch)
                epoch, end_offset = partition.log.end_offset_for_epoch(wanted.leader_epoch)
                entry.update(error_code=ErrorCode.none, leader_epoch=epoch,
                             end_offset=end_offset)
            except KafkaError as exc:
                entry.update(error_code=exc.code)
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return respond(request, {"topics": topics})
