"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.group.coordinator import OffsetCommit
from moldau.broker.coordinators.group.writes import TxnProducer
from moldau.broker.handlers.authz import (
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    allowed,
    allowed_names,
)
from moldau.broker.handlers.registry import Deferred, Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.broker.security.acl import Operation
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


def _refusal(broker: Broker, request: Request, transactional: bool) -> ErrorCode | None:
    """Why the whole commit is refused: a transactional one needs WRITE on its transactional
    id, any commit READ on the group."""
    body = request.body
    if transactional and not allowed(broker, request, Operation.WRITE, TRANSACTIONAL_ID,
                                     body.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return ErrorCode.group_authorization_failed
    return None


async def _commit(broker: Broker, request: Request, generation: int, member_id: str,
                  producer: TxnProducer | None = None) -> list[ErrorCode]:
    """Commit the offsets of the topics the client may READ; the others' partitions get
    TOPIC_AUTHORIZATION_FAILED."""
    body = request.body
    commits = _commits(body)
    readable = allowed_names(broker, request, Operation.READ, TOPIC,
                             (commit.topic for commit in commits))
    errors = iter(await broker.groups.commit(
        body.group_id, generation, member_id, getattr(body, "group_instance_id", None),
        [commit for commit in commits if commit.topic in readable], producer=producer))
    return [next(errors) if commit.topic in readable
            else ErrorCode.topic_authorization_failed for commit in commits]


@api(8, "OffsetCommit", 2, 9)
async def handle_offset_commit(broker: Broker, request: Request) -> Result:
    body = request.body
    refusal = _refusal(broker, request, transactional=False)
    if refusal is not None:
        return _per_partition(request, [refusal for _ in _commits(body)])

    async def commit() -> Response:
        # Waits for the in-sync replicas, so it does not hold a handler meanwhile.
        return _per_partition(request, await _commit(
            broker, request, body.generation_id_or_member_epoch, body.member_id))

    return Deferred(commit())


@api(28, "TxnOffsetCommit", 0, 5)
async def handle_txn_offset_commit(broker: Broker, request: Request) -> Result:
    """Offsets committed in the producer's transaction: pending until its marker."""
    body = request.body
    producer = TxnProducer(body.producer_id, body.producer_epoch)
    refusal = _refusal(broker, request, transactional=True)
    if refusal is not None:
        return _per_partition(request, [refusal for _ in _commits(body)])

    async def commit() -> Response:
        errors = await _commit(broker, request, getattr(body, "generation_id", -1),
                               getattr(body, "member_id", ""), producer)
        if request.header.api_version < 2:
            # As Kafka: clients before v2 do not know that this error is retriable.
            errors = [ErrorCode.coordinator_not_available
                      if error is ErrorCode.coordinator_load_in_progress else error
                      for error in errors]
        return _per_partition(request, errors)

    return Deferred(commit())


def _fetch_group(broker: Broker, request: Request, group_id: str, topics: Any,
                 require_stable: bool) -> list[dict[str, Any]]:
    """With `require_stable` (KIP-447), a partition with an offset pending in a transaction
    answers UNSTABLE_OFFSET_COMMIT (the consumer retries); without it, the last committed.
    Offsets of topics the client may not DESCRIBE are left out of an all-topics answer and
    refused when named."""
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    found = broker.groups.fetch_offsets(group_id, wanted)
    visible = allowed_names(broker, request, Operation.DESCRIBE, TOPIC,
                            (topic for topic, _ in found), log_denied=wanted is not None)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), stored in found.items():
        if topic not in visible:
            if wanted is not None:
                by_topic.setdefault(topic, []).append({
                    "partition_index": partition, "committed_offset": -1,
                    "error_code": ErrorCode.topic_authorization_failed})
            continue
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
            error = _fetch_error(broker, request, group.group_id)
            groups.append({"group_id": group.group_id, "error_code": error,
                           "topics": _fetch_group(broker, request, group.group_id,
                                                  group.topics, stable)
                           if error is ErrorCode.none else []})
        return respond(request, {"groups": groups})
    error = _fetch_error(broker, request, body.group_id)
    return respond(request, {"error_code": error,
                             "topics": _fetch_group(broker, request, body.group_id,
                                                    body.topics, stable)
                             if error is ErrorCode.none else []})


def _fetch_error(broker: Broker, request: Request, group_id: str) -> ErrorCode:
    if not allowed(broker, request, Operation.DESCRIBE, GROUP, group_id):
        return ErrorCode.group_authorization_failed
    return broker.groups.group_error(group_id)


@api(47, "OffsetDelete", 0, 0)
async def handle_offset_delete(broker: Broker, request: Request) -> Result:
    body = request.body
    if not allowed(broker, request, Operation.DELETE, GROUP, body.group_id):
        return respond(request, {"error_code": ErrorCode.group_authorization_failed,
                                 "topics": []})
    readable = allowed_names(broker, request, Operation.READ, TOPIC,
                             (topic.name for topic in body.topics))
    partitions = [(topic.name, p.partition_index) for topic in body.topics
                  if topic.name in readable for p in topic.partitions]
    owner_error = broker.groups.group_error(body.group_id)
    if owner_error is not ErrorCode.none:
        return respond(request, {"error_code": owner_error, "topics": []})
    error, results = broker.groups.delete_offsets(body.group_id, partitions)
    if error is not ErrorCode.none:
        return respond(request, {"error_code": error, "topics": []})
    errors = iter(results)
    return respond(request, {"error_code": ErrorCode.none, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": next(errors) if topic.name in readable
             else ErrorCode.topic_authorization_failed}
            for p in topic.partitions]}
        for topic in body.topics]})
