"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.group.coordinator import OffsetCommit
from moldau.broker.coordinators.group.writes import TxnProducer
from moldau.broker.handlers.registry import Deferred, Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker


def _commits(body: Any) -> list[OffsetCommit]:
    return [OffsetCommit(topic.name, p.partition_index, p.committed_offset,
                         getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
            for topic in body.topics for p in topic.partitions]


def _per_partition(request: Request, errors: list[ErrorCode]) -> Response:
    """The commit response: each requested partition with its error, in request order."""
    answers = iter(errors)
    return respond(request, {"topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": next(answers)}
            for p in topic.partitions]}
        for topic in request.body.topics]})


@api(8, "OffsetCommit", 2, 9)
async def handle_offset_commit(broker: Broker, request: Request) -> Result:
    body = request.body

    async def commit() -> Response:
        # Waits for the in-sync replicas, so it does not hold a handler meanwhile.
        return _per_partition(request, await broker.groups.commit(
            body.group_id, body.generation_id_or_member_epoch, body.member_id,
            getattr(body, "group_instance_id", None), _commits(body)))

    return Deferred(commit())


@api(28, "TxnOffsetCommit", 0, 5)
async def handle_txn_offset_commit(broker: Broker, request: Request) -> Result:
    """Offsets committed in the producer's transaction: pending until its marker."""
    body = request.body
    producer = TxnProducer(body.producer_id, body.producer_epoch)

    async def commit() -> Response:
        errors = await broker.groups.commit(
            body.group_id, getattr(body, "generation_id", -1), getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None), _commits(body), producer=producer)
        if request.header.api_version < 2:
            # As Kafka: clients before v2 do not know that this error is retriable.
            errors = [ErrorCode.coordinator_not_available
                      if error is ErrorCode.coordinator_load_in_progress else error
                      for error in errors]
        return _per_partition(request, errors)

    return Deferred(commit())


def _fetch_group(broker: Broker, group_id: str, topics: Any, require_stable: bool
                 ) -> list[dict[str, Any]]:
    """With `require_stable` (KIP-447), a partition with an offset pending in a transaction
    answers UNSTABLE_OFFSET_COMMIT (the consumer retries); without it, the last committed."""
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    found = broker.groups.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), stored in found.items():
        if require_stable and broker.groups.has_pending_offsets(group_id, topic, partition):
            error, stored = ErrorCode.unstable_offset_commit, None
        else:
            error = ErrorCode.none
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "error_code": error,
            "committed_offset": stored.offset if stored else -1,
            "committed_leader_epoch": stored.leader_epoch if stored else -1,
            "metadata": stored.metadata if stored else ""})
    return [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]


@api(9, "OffsetFetch", 1, 9)
async def handle_offset_fetch(broker: Broker, request: Request) -> Result:
    body = request.body
    stable = getattr(body, "require_stable", False)
    if request.header.api_version >= 8:
        groups = []
        for group in body.groups:
            error = broker.groups.group_error(group.group_id)
            groups.append({"group_id": group.group_id, "error_code": error,
                           "topics": _fetch_group(broker, group.group_id, group.topics, stable)
                           if error is ErrorCode.none else []})
        return respond(request, {"groups": groups})
    error = broker.groups.group_error(body.group_id)
    return respond(request, {"error_code": error,
                             "topics": _fetch_group(broker, body.group_id, body.topics, stable)
                             if error is ErrorCode.none else []})


@api(47, "OffsetDelete", 0, 0)
async def handle_offset_delete(broker: Broker, request: Request) -> Result:
    body = request.body
    partitions = [(topic.name, p.partition_index) for topic in body.topics
                  for p in topic.partitions]
    owner_error = broker.groups.group_error(body.group_id)
    if owner_error is not ErrorCode.none:
        return respond(request, {"error_code": owner_error, "topics": []})
    error, results = broker.groups.delete_offsets(body.group_id, partitions)
    if error is not ErrorCode.none:
        return respond(request, {"error_code": error, "topics": []})
    errors = iter(results)
    return respond(request, {"error_code": ErrorCode.none, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": next(errors)}
            for p in topic.partitions]}
        for topic in body.topics]})
