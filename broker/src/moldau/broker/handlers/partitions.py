"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments, decided by the
controller (KIP-460, KIP-455). A broker that is not the active controller forwards them; when
no controller can be reached they answer NOT_CONTROLLER and the client asks again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import cluster_allowed, needs
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker


def _denied(request: Request, operation: Operation) -> KafkaError:
    return KafkaError(ErrorCode.cluster_authorization_failed, needs(request, operation))


def _error_fields(error: KafkaError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error.code, "error_message": error.message}


@api(43, "ElectLeaders", 0, 2)
async def handle_elect_leaders(broker: Broker, request: Request) -> Result:
    body = request.body
    election_type = int(getattr(body, "election_type", 0))  # v0: preferred only
    wanted: list[tuple[str, int]] | None = None
    if body.topic_partitions is not None:
        wanted = [(str(topic.topic), int(partition)) for topic in body.topic_partitions
                  for partition in topic.partitions]
    try:
        if not cluster_allowed(broker, request, Operation.ALTER):
            # Kafka's answer: the error at the top and on every partition named.
            denied = _denied(request, Operation.ALTER)
            return _elect_response(request, denied.code, dict.fromkeys(wanted or (), denied))
        results = await broker.controller.elect_leaders(election_type, wanted)
    except KafkaError as exc:
        if request.header.api_version >= 1 or wanted is None:
            return respond(request, {"error_code": exc.code, "replica_election_results": []})
        # v0 has no top-level error: every partition carries it.
        results = dict.fromkeys(wanted, exc)
    return _elect_response(request, ErrorCode.none, results)


def _elect_response(request: Request, error_code: ErrorCode,
                    results: dict[tuple[str, int], KafkaError | None]) -> Result:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": partition,
                                               **_error_fields(error)})
    return respond(request, {
        "error_code": error_code,
        "replica_election_results": [{"topic": topic, "partition_result": partitions}
                                     for topic, partitions in by_topic.items()]})


@api(45, "AlterPartitionReassignments", 0, 0)
async def handle_alter_partition_reassignments(broker: Broker, request: Request) -> Result:
    body = request.body
    wanted = [(str(topic.name), int(p.partition_index),
               None if p.replicas is None else [int(r) for r in p.replicas])
              for topic in body.topics for p in topic.partitions]
    if not cluster_allowed(broker, request, Operation.ALTER):
        denied = _denied(request, Operation.ALTER)
        return _reassignment_response(request, denied, dict.fromkeys(
            ((name, index) for name, index, _ in wanted), denied))
    try:
        results = await broker.controller.alter_partition_reassignments(wanted)
    except KafkaError as exc:
        return respond(request, {"error_code": exc.code, "error_message": exc.message,
                                 "responses": []})
    return _reassignment_response(request, None, results)


def _reassignment_response(request: Request, error: KafkaError | None,
                           results: dict[tuple[str, int], KafkaError | None]) -> Result:
    body = request.body
    responses = [{"name": topic.name, "partitions": [
        {"partition_index": p.partition_index,
         **_error_fields(results.get((str(topic.name), int(p.partition_index))))}
        for p in topic.partitions]} for topic in body.topics]
    return respond(request, {**_error_fields(error), "responses": responses})


@api(46, "ListPartitionReassignments", 0, 0)
async def handle_list_partition_reassignments(broker: Broker, request: Request) -> Result:
    body = request.body
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        return respond(request, {**_error_fields(_denied(request, Operation.DESCRIBE)),
                                 "topics": []})
    wanted = None if body.topics is None else [
        (str(topic.name), int(index)) for topic in body.topics
        for index in topic.partition_indexes]
    try:
        ongoing = broker.controller.list_partition_reassignments(wanted)
    except KafkaError as exc:
        return respond(request, {"error_code": exc.code, "error_message": exc.message,
                                 "topics": []})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), record in ongoing.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "replicas": list(record.replicas),
            "adding_replicas": list(record.adding_replicas),
            "removing_replicas": list(record.removing_replicas)})
    return respond(request, {"error_code": ErrorCode.none, "error_message": None,
                             "topics": [{"name": topic, "partitions": partitions}
                                        for topic, partitions in by_topic.items()]})
