"""What the controller listener serves besides Raft: the brokers' requests to the controller
(BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds), the admin requests
brokers forward to the active controller in an Envelope carrying the client's principal and
address (KIP-590), and the same admin requests sent to the listener directly.

A node that is not the active controller answers NOT_CONTROLLER, so the sender looks for the
new one. With an authorizer, the brokers' requests and Envelopes need CLUSTER_ACTION on the
cluster for the connection's principal (brokers are super users, as in Kafka); an admin request
is authorized for its client by the handler that serves it, the Envelope's client or the
connection's own principal.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from moldau.broker.metadata.controller import Controller
from moldau.broker.raft.tcp_transport import Caller, Service
from moldau.broker.security.forwarding import host_of, principal_of
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import (
    MalformedRequest,
    decode_request,
    encode_response,
    is_flexible_request,
    parse_header,
    response_class,
)

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
ALTER_PARTITION = 56
ALLOCATE_PRODUCER_IDS = 67
ENVELOPE = 58

log = logging.getLogger("moldau.broker.controller")

# Admin requests a broker forwards to the active controller: (api key, min, max version).
FORWARDED_APIS = {
    19: "CreateTopics", 20: "DeleteTopics", 37: "CreatePartitions", 33: "AlterConfigs",
    44: "IncrementalAlterConfigs", 43: "ElectLeaders", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 55: "DescribeQuorum", 51: "AlterUserScramCredentials",
    30: "CreateAcls", 31: "DeleteAcls", 64: "UnregisterBroker",
}


def _parse(frame: bytes) -> tuple[Any, Any]:
    api_key, version = int.from_bytes(frame[0:2], "big"), int.from_bytes(frame[2:4], "big")
    header = parse_header(frame, is_flexible_request(api_key, version))
    return header, decode_request(api_key, version, frame, header.size)


def _answer(header: Any, data: dict[str, Any]) -> bytes:
    body = build(response_class(header.api_key, header.api_version), data)
    return encode_response(header.correlation_id, body)


class ControllerService:
    def __init__(self, controller: Controller, forwarded: Callable[[int], Service | None],
                 cluster_action: Callable[[Caller], bool] = lambda caller: True) -> None:
        self.controller = controller
        self._forwarded = forwarded
        # Whether a caller may act as a broker (CLUSTER_ACTION on the cluster).
        self._cluster_action = cluster_action

    def services(self) -> dict[int, Service]:
        internal: dict[int, tuple[int, int, Callable[[bytes], Awaitable[bytes]]]] = {
            BROKER_REGISTRATION: (0, 4, self._broker_registration),
            BROKER_HEARTBEAT: (0, 1, self._broker_heartbeat),
            ALTER_PARTITION: (0, 3, self._alter_partition),
            ALLOCATE_PRODUCER_IDS: (0, 0, self._allocate_producer_ids),
        }
        services: dict[int, Service] = {
            key: (low, high, self._for_brokers(serve))
            for key, (low, high, serve) in internal.items()}
        services[ENVELOPE] = (0, 0, self._envelope)
        for api_key in FORWARDED_APIS:
            service = self._forwarded(api_key)
            if service is not None:
                services[api_key] = service
        return services

    def _refused(self, caller: Caller, what: str) -> bool:
        if self._cluster_action(caller):
            return False
        log.warning("Refusing %s from %s (/%s) on the controller listener: it needs "
                    "CLUSTER_ACTION on the cluster (make the brokers' principal a super user)",
                    what, caller.principal, caller.host)
        return True

    def _for_brokers(self, serve: Callable[[bytes], Awaitable[bytes]]
                     ) -> Callable[[bytes, Caller], Awaitable[bytes]]:
        async def gated(frame: bytes, caller: Caller) -> bytes:
            header, _ = _parse(frame)
            if self._refused(caller, f"api {header.api_key}"):
                return _answer(header, {"error_code": ErrorCode.cluster_authorization_failed})
            return await serve(frame)
        return gated

    async def _envelope(self, frame: bytes, caller: Caller) -> bytes:
        """A client's admin request forwarded by a broker, served as that client."""
        header, body = _parse(frame)
        if self._refused(caller, "a forwarded request"):
            return _answer(header, {"error_code": ErrorCode.cluster_authorization_failed})
        if not self.controller.quorum.is_active:
            return _answer(header, {"error_code": ErrorCode.not_controller})
        inner = bytes(body.request_data)
        api_key = int.from_bytes(inner[0:2], "big")
        version = int.from_bytes(inner[2:4], "big")
        service = self._forwarded(api_key) if api_key in FORWARDED_APIS else None
        try:
            client = Caller(principal_of(bytes(body.request_principal or b"")),
                            host_of(bytes(body.client_host_address)))
        except ValueError as exc:
            log.warning("Refusing a forwarded request from %s: %s", caller.principal, exc)
            return _answer(header, {"error_code": ErrorCode.invalid_request})
        if service is None or len(inner) < 8:
            return _answer(header, {"error_code": ErrorCode.invalid_request})
        low, high, serve = service
        if not low <= version <= high:
            return _answer(header, {"error_code": ErrorCode.unsupported_version})
        try:
            response = await serve(inner, client)
        except MalformedRequest as exc:
            log.warning("Refusing a forwarded request from %s: %s", caller.principal, exc)
            return _answer(header, {"error_code": ErrorCode.invalid_request})
        return _answer(header, {"error_code": ErrorCode.none, "response_data": response[4:]})

    async def _broker_registration(self, frame: bytes) -> bytes:
        header, body = _parse(frame)
        try:
            endpoints = [(item.name, item.host, int(item.port)) for item in body.listeners]
            epoch = await self.controller.register_broker(
                int(body.broker_id), uuid.UUID(str(body.incarnation_id)), endpoints,
                body.rack)
            return _answer(header, {"error_code": ErrorCode.none, "broker_epoch": epoch})
        except KafkaError as exc:
            return _answer(header, {"error_code": exc.code, "broker_epoch": -1})

    async def _broker_heartbeat(self, frame: bytes) -> bytes:
        header, body = _parse(frame)
        try:
            caught_up, fenced, shut_down = await self.controller.heartbeat(
                int(body.broker_id), int(body.broker_epoch), int(body.current_metadata_offset),
                want_fence=body.want_fence, want_shut_down=body.want_shut_down)
            return _answer(header, {"error_code": ErrorCode.none, "is_caught_up": caught_up,
                                    "is_fenced": fenced, "should_shut_down": shut_down})
        except KafkaError as exc:
            return _answer(header, {"error_code": exc.code, "is_fenced": True})

    async def _alter_partition(self, frame: bytes) -> bytes:
        header, body = _parse(frame)
        version = header.api_version
        topics = []
        for topic in body.topics:
            if version >= 2:
                topic_id = uuid.UUID(str(topic.topic_id))
                name_field: dict[str, Any] = {"topic_id": topic.topic_id}
            else:
                image = self.controller.image.topics.get(topic.topic_name)
                topic_id = image.topic_id if image is not None else uuid.UUID(int=0)
                name_field = {"topic_name": topic.topic_name}
            partitions = []
            for wanted in topic.partitions:
                new_isr = ([int(item.broker_id) for item in wanted.new_isr_with_epochs]
                           if version >= 3 else [int(b) for b in wanted.new_isr])
                entry: dict[str, Any] = {"partition_index": wanted.partition_index}
                try:
                    record = await self.controller.alter_partition(
                        int(body.broker_id), int(body.broker_epoch), topic_id,
                        wanted.partition_index, wanted.leader_epoch, wanted.partition_epoch,
                        new_isr)
                    entry.update(error_code=ErrorCode.none, leader_id=record.leader,
                                 leader_epoch=record.leader_epoch, isr=list(record.isr),
                                 partition_epoch=record.partition_epoch)
                except KafkaError as exc:
                    code = exc.code
                    if code is ErrorCode.unknown_topic_or_partition and version >= 2:
                        code = ErrorCode.unknown_topic_id
                    entry.update(error_code=code, leader_id=-1, leader_epoch=-1, isr=[],
                                 partition_epoch=-1)
                partitions.append(entry)
            topics.append({**name_field, "partitions": partitions})
        error = ErrorCode.none if self.controller.quorum.is_active else ErrorCode.not_controller
        return _answer(header, {"error_code": error, "topics": topics})

    async def _allocate_producer_ids(self, frame: bytes) -> bytes:
        header, body = _parse(frame)
        try:
            first, count = await self.controller.allocate_producer_ids(int(body.broker_id))
            return _answer(header, {"error_code": ErrorCode.none, "producer_id_start": first,
                                    "producer_id_len": count})
        except KafkaError as exc:
            return _answer(header, {"error_code": exc.code, "producer_id_start": -1,
                                    "producer_id_len": 0})
