"""Group membership APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups and DeleteGroups (Kafka's classic group protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.group.group import GroupState, JoinResult, SyncResult
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.handlers.authz import (
    GROUP,
    MESSAGES,
    TRANSACTIONAL_ID,
    allowed,
    allowed_names,
    authorized_operations,
    cluster_allowed,
)
from moldau.broker.handlers.registry import Deferred, Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import millis

if TYPE_CHECKING:
    from moldau.broker.server import Broker

GROUP_KEY = 0
TRANSACTION_KEY = 1


def client_host(request: Request) -> str:
    # Kafka shows the client's address the way Java prints an InetAddress.
    return "/" + request.client_address.rsplit(":", 1)[0]


def _coordinator(broker: Broker, topic_name: str, partition: int, listener: str
                 ) -> dict[str, Any]:
    """The leader of the coordinator's partition (of `__consumer_offsets` for a group, of
    `__transaction_state` for a transactional id), which coordinates the key (or will, once
    the partition is loaded: requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS)."""
    topic = broker.image.topics.get(topic_name)
    record = None if topic is None else topic.partitions.get(partition)
    leader = -1 if record is None else record.leader
    if leader == broker.node_id:
        endpoint = broker.endpoint_for(listener)
        return {"error_code": ErrorCode.none, "node_id": leader, "host": endpoint.host,
                "port": endpoint.port}
    registration = broker.image.brokers.get(leader)
    for name, host, port in () if registration is None else registration.endpoints:
        if name == listener:
            return {"error_code": ErrorCode.none, "node_id": leader, "host": host,
                    "port": port}
    return {"error_code": ErrorCode.coordinator_not_available,
            "error_message": "The coordinator is not available."}


def _group_coordinator(broker: Broker, group_id: str, listener: str) -> dict[str, Any]:
    topic = broker.offsets_topic
    return _coordinator(broker, topic.name, partition_for(group_id, topic.partitions), listener)


def _refused(error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "error_message": MESSAGES[error]}


async def _find(broker: Broker, request: Request, key_type: int, key: str
                ) -> dict[str, Any]:
    """The coordinator of a group or transactional id the client may describe."""
    listener = request.listener
    if key_type == GROUP_KEY:
        if not allowed(broker, request, Operation.DESCRIBE, GROUP, key):
            return _refused(ErrorCode.group_authorization_failed)
        await broker.offsets_topic.ensure_created()
        return _group_coordinator(broker, key, listener)
    if not allowed(broker, request, Operation.DESCRIBE, TRANSACTIONAL_ID, key):
        return _refused(ErrorCode.transactional_id_authorization_failed)
    if not key:
        return {"error_code": ErrorCode.invalid_request,
                "error_message": "The transactional id must not be empty"}
    topic = broker.transactions.topic
    await topic.ensure_created()
    return _coordinator(broker, topic.name, partition_for(key, topic.partitions), listener)


@api(10, "FindCoordinator", 0, 6)
async def handle_find_coordinator(broker: Broker, request: Request) -> Result:
    body = request.body
    version = request.header.api_version
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    key_type = body.key_type if version >= 1 else GROUP_KEY
    answers: list[dict[str, Any]] = []
    for key in keys:
        answer: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            answer.update(error_code=ErrorCode.invalid_request,
                          error_message=f"Unknown coordinator key type {key_type}")
        else:
            try:
                answer.update(await _find(broker, request, key_type, key))
            except KafkaError as exc:
                answer.update(error_code=ErrorCode.coordinator_not_available,
                              error_message=exc.message)
        answers.append(answer)
    if version >= 4:
        return respond(request, {"coordinators": answers})
    return respond(request, answers[0])


@api(11, "JoinGroup", 0, 9)
async def handle_join_group(broker: Broker, request: Request) -> Result:
    body = request.body
    version = request.header.api_version
    session_ms = millis(body.session_timeout)
    rebalance_ms = millis(body.rebalance_timeout) if version >= 1 else session_ms
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return respond(request, {
            "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
            "protocol_name": None if version >= 7 else "", "leader": "", "member_id": "",
            "members": []})

    async def join() -> Response:
        result: JoinResult = await broker.groups.join(
            body.group_id, body.member_id, getattr(body, "group_instance_id", None),
            request.header.client_id or "", client_host(request), session_ms, rebalance_ms,
            body.protocol_type, [(p.name, p.metadata) for p in body.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9)
        return respond(request, {
            "error_code": result.error, "generation_id": result.generation,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
            "leader": result.leader, "skip_assignment": result.skip_assignment,
            "member_id": result.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": meta}
                        for m, i, meta in result.members]})

    return Deferred(join())


@api(14, "SyncGroup", 0, 5)
async def handle_sync_group(broker: Broker, request: Request) -> Result:
    body = request.body
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return respond(request, {"error_code": ErrorCode.group_authorization_failed,
                                 "assignment": b""})

    async def sync() -> Response:
        result: SyncResult = await broker.groups.sync(
            body.group_id, body.generation_id, body.member_id,
            getattr(body, "group_instance_id", None), getattr(body, "protocol_type", None),
            getattr(body, "protocol_name", None),
            {a.member_id: a.assignment for a in body.assignments})
        return respond(request, {"error_code": result.error,
                                 "protocol_type": result.protocol_type,
                                 "protocol_name": result.protocol_name,
                                 "assignment": result.assignment})

    return Deferred(sync())


@api(12, "Heartbeat", 0, 4)
async def handle_heartbeat(broker: Broker, request: Request) -> Result:
    body = request.body
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return respond(request, {"error_code": ErrorCode.group_authorization_failed})
    error = broker.groups.heartbeat(body.group_id, body.generation_id, body.member_id,
                                    getattr(body, "group_instance_id", None))
    return respond(request, {"error_code": error})


@api(13, "LeaveGroup", 0, 5)
async def handle_leave_group(broker: Broker, request: Request) -> Result:
    body = request.body
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return respond(request, {"error_code": ErrorCode.group_authorization_failed,
                                 "members": []})
    if request.header.api_version <= 2:
        [error] = broker.groups.leave(body.group_id, [(body.member_id, None)])
        return respond(request, {"error_code": error})
    leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    errors = broker.groups.leave(body.group_id, leaving)
    return respond(request, {"error_code": ErrorCode.none, "members": [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": error}
        for (member_id, instance_id), error in zip(leaving, errors, strict=True)]})


@api(15, "DescribeGroups", 0, 6)
async def handle_describe_groups(broker: Broker, request: Request) -> Result:
    body = request.body
    version = request.header.api_version
    with_ops = bool(getattr(body, "include_authorized_operations", False))
    described = []
    for group_id in body.groups:
        if not allowed(broker, request, Operation.DESCRIBE, GROUP, group_id):
            described.append({"group_id": group_id, "group_state": "", "protocol_type": "",
                              "protocol_data": "", "members": [],
                              **_refused(ErrorCode.group_authorization_failed)})
            continue
        group = broker.groups.groups.get(group_id)
        owner_error = broker.groups.group_error(group_id)
        if owner_error is not ErrorCode.none:
            entry = {"group_id": group_id, "group_state": "", "protocol_type": "",
                     "protocol_data": "", "members": [], "error_code": owner_error}
        elif group is None:
            entry: dict[str, Any] = {"group_id": group_id, "group_state": "Dead",
                                     "protocol_type": "", "protocol_data": "", "members": [],
                                     "error_code": ErrorCode.none}
            if version >= 6:  # KIP-1043: say so instead of describing a dead group
                entry.update(error_code=ErrorCode.group_id_not_found,
                             error_message=f"Group {group_id} not found.")
        else:
            entry = {**group.describe(), "error_code": ErrorCode.none}
        entry["authorized_operations"] = (
            authorized_operations(broker, request, GROUP, group_id)
            if with_ops and version >= 3 and entry["error_code"] is ErrorCode.none
            else -2**31)
        described.append(entry)
    return respond(request, {"groups": described})


@api(16, "ListGroups", 0, 5)
async def handle_list_groups(broker: Broker, request: Request) -> Result:
    body = request.body
    states = {state.lower() for state in getattr(body, "states_filter", ())}
    types = {kind.lower() for kind in getattr(body, "types_filter", ())}
    # DESCRIBE on the cluster lists every group; otherwise the groups the client may describe.
    everything = cluster_allowed(broker, request, Operation.DESCRIBE, log_denied=False)
    listed = []
    for group in broker.groups.groups.values():
        if not everything and not allowed(broker, request, Operation.DESCRIBE, GROUP,
                                          group.group_id, log_denied=False):
            continue
        if group.is_(GroupState.DEAD):
            continue
        if states and group.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        listed.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                       "group_state": group.state.value, "group_type": "classic"})
    # While partitions load, the list is what is loaded so far, and says so.
    return respond(request, {"error_code": broker.groups.listing_error(), "groups": listed})


@api(42, "DeleteGroups", 0, 2)
async def handle_delete_groups(broker: Broker, request: Request) -> Result:
    names = list(request.body.groups_names)
    deletable = allowed_names(broker, request, Operation.DELETE, GROUP, names)
    errors = iter(broker.groups.delete_groups([name for name in names if name in deletable]))
    return respond(request, {"results": [
        {"group_id": name, "error_code": next(errors) if name in deletable
         else ErrorCode.group_authorization_failed} for name in names]})
