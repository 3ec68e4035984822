"""How a broker reaches the active controller (Kafka's broker-to-controller channel).

When this node is the active controller the calls go straight to the local `Controller`;
otherwise they are Kafka requests to the quorum leader's controller listener. Calls retry
while there is no leader, the leader is unreachable or answers NOT_CONTROLLER (a hand-over
in progress), until their timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from moldau.broker.metadata.controller import Controller, CreatedTopic, NewTopic
from moldau.broker.metadata.controller_service import (
    ALLOCATE_PRODUCER_IDS,
    ALTER_PARTITION,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    ENVELOPE,
)
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.quorum import MetadataQuorum
from moldau.broker.metadata.records import PartitionRecord
from moldau.client.connection import BrokerConnection
from moldau.client.errors import KafkaError as ClientError
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

log = logging.getLogger("moldau.broker.controller_channel")

CREATE_TOPICS = 19
_RETRY_S = 0.05
T = TypeVar("T")


class _Retry(Exception):
    pass


class ControllerChannel:
    def __init__(self, node_id: int, quorum: MetadataQuorum, controller: Controller | None,
                 *, cluster_id: str, timeout_ms: int = 30000,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security  # of the controller listener
        self.quorum = quorum
        self.controller = controller
        self.cluster_id = cluster_id
        self.timeout_s = timeout_ms / 1000
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    @property
    def image(self) -> MetadataImage:
        return self.quorum.image

    def live_brokers(self) -> list[int]:
        return self.image.live_brokers()

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # --- transport ---------------------------------------------------------------------------

    def _drop_connection(self, leader: int | None) -> None:
        connection = self._connections.pop(leader, None) if leader is not None else None
        if connection is not None:
            connection.close()

    async def _connection(self, leader: int) -> BrokerConnection:
        connection = self._connections.get(leader)
        if connection is not None and not connection.closed:
            return connection
        lock = self._connecting.setdefault(leader, asyncio.Lock())
        async with lock:
            connection = self._connections.get(leader)
            if connection is not None and not connection.closed:
                return connection
            address = self.quorum.voters.get(leader)
            if address is None:
                raise _Retry(f"no address for controller {leader}")
            connection = BrokerConnection(leader, *address, client_id=f"broker-{self.node_id}"
                                          "-to-controller", request_timeout_ms=30000,
                                          security=self.security)
            try:
                await asyncio.wait_for(connection.open(), 5)
            except (OSError, TimeoutError, KafkaError) as exc:
                raise _Retry(f"cannot connect to controller {leader}: {exc}") from None
            self._connections[leader] = connection
            return connection

    async def _call(self, what: str, local: Callable[[Controller], Awaitable[T]],
                    api_key: int, version: int, body: dict[str, Any],
                    parse: Callable[[Any], T], timeout_s: float | None = None) -> T:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        last: str = "no controller is known"
        leader: int | None = None
        while True:
            try:
                leader = self.quorum.leader_id
                if leader is None:
                    raise _Retry("no controller is known")
                if leader == self.node_id:
                    if self.controller is None or not self.quorum.is_active:
                        raise _Retry("this node is becoming the controller")
                    try:
                        return await local(self.controller)
                    except KafkaError as exc:
                        if exc.code is ErrorCode.not_controller:
                            raise _Retry(str(exc)) from None
                        raise
                connection = await self._connection(leader)
                request = build(request_class(api_key, version), body)
                try:
                    response = await asyncio.wait_for(
                        connection.send(api_key, version, request),
                        max(deadline - time.monotonic(), 0.001))
                except TimeoutError:
                    raise _Retry(f"controller {leader}: no answer in time") from None
                except ClientError as exc:
                    raise _Retry(f"controller {leader}: {exc}") from None
                try:
                    return parse(response)
                except KafkaError as exc:
                    if exc.code is ErrorCode.not_controller:
                        raise _Retry(f"controller {leader} is not active") from None
                    raise
            except _Retry as retry:
                last = str(retry)
                if time.monotonic() >= deadline:
                    # As Kafka disconnects on a request timeout: a connection to a controller
                    # behind a partition can look alive for minutes, and a heartbeat stuck on
                    # it would get the broker fenced after the partition heals.
                    self._drop_connection(leader)
                    raise KafkaError(ErrorCode.request_timed_out,
                                     f"{what}: no answer from the controller ({last})"
                                     ) from None
                await asyncio.sleep(_RETRY_S)

    async def forward(self, request: bytes, principal: bytes, address: bytes,
                      timeout_s: float | None = None) -> bytes | None:
        """Send a client's admin request (its frame without the size) to the active
        controller in an Envelope with the client's principal and address; the controller's
        response (header and body, without the size). None when this node is the active
        controller (handle it here) or none can be reached; KafkaError when the controller
        refused the Envelope itself (this broker may not forward)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        envelope = {"request_data": request, "request_principal": principal,
                    "client_host_address": address}
        while time.monotonic() < deadline:
            leader = self.quorum.leader_id
            if leader == self.node_id and self.quorum.is_active:
                return None
            if leader is not None and leader != self.node_id:
                try:
                    connection = await self._connection(leader)
                    answer = await connection.send(
                        ENVELOPE, 0, build(request_class(ENVELOPE, 0), envelope))
                    if answer.error_code == ErrorCode.none.value:
                        return bytes(answer.response_data or b"")
                    if answer.error_code != ErrorCode.not_controller.value:
                        raise KafkaError(ErrorCode(answer.error_code),
                                         f"controller {leader} refused the forwarded request")
                except (_Retry, ClientError) as exc:
                    log.debug("Forwarding to controller %d failed: %s", leader, exc)
            await asyncio.sleep(_RETRY_S)
        return None

    # --- the calls -----------------------------------------------------------------------------

    @staticmethod
    def _check(code: int, message: str | None = None) -> None:
        if code != ErrorCode.none.value:
            raise KafkaError(ErrorCode(code), message)

    async def register_broker(self, incarnation_id: uuid.UUID,
                              endpoints: Sequence[tuple[str, str, int]],
                              rack: str | None) -> int:
        def parse(response: Any) -> int:
            self._check(response.error_code)
            return int(response.broker_epoch)

        body = {"broker_id": self.node_id, "cluster_id": self.cluster_id,
                "incarnation_id": incarnation_id,
                "listeners": [{"name": name, "host": host, "port": port,
                               "security_protocol": 0} for name, host, port in endpoints],
                "features": [], "rack": rack}
        return await self._call(
            "BrokerRegistration",
            lambda c: c.register_broker(self.node_id, incarnation_id, endpoints, rack),
            BROKER_REGISTRATION, 1, body, parse)

    async def heartbeat(self, broker_epoch: int, metadata_offset: int, *,
                        want_fence: bool = False, want_shut_down: bool = False,
                        timeout_s: float | None = None) -> tuple[bool, bool, bool]:
        def parse(response: Any) -> tuple[bool, bool, bool]:
            self._check(response.error_code)
            return (bool(response.is_caught_up), bool(response.is_fenced),
                    bool(response.should_shut_down))

        body = {"broker_id": self.node_id, "broker_epoch": broker_epoch,
                "current_metadata_offset": metadata_offset, "want_fence": want_fence,
                "want_shut_down": want_shut_down}
        return await self._call(
            "BrokerHeartbeat",
            lambda c: c.heartbeat(self.node_id, broker_epoch, metadata_offset,
                                  want_fence=want_fence, want_shut_down=want_shut_down),
            BROKER_HEARTBEAT, 0, body, parse, timeout_s)

    async def alter_partition(self, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, partition_epoch: int,
                              new_isr: Iterable[int]) -> PartitionRecord:
        isr = list(new_isr)

        def parse(response: Any) -> PartitionRecord:
            self._check(response.error_code)
            entry = response.topics[0].partitions[0]
            self._check(entry.error_code)
            record = self.image.topics_by_id[topic_id].partitions.get(partition)
            if record is not None and record.partition_epoch >= entry.partition_epoch:
                return record
            # Not applied here yet: the answer carries the new state.
            assert record is not None
            return PartitionRecord(topic_id, partition, record.replicas, tuple(entry.isr),
                                   entry.leader_id, entry.leader_epoch, entry.partition_epoch,
                                   record.adding_replicas, record.removing_replicas)

        body = {"broker_id": self.node_id, "broker_epoch": broker_epoch, "topics": [
            {"topic_id": topic_id, "partitions": [
                {"partition_index": partition, "leader_epoch": leader_epoch,
                 "new_isr": isr, "partition_epoch": partition_epoch}]}]}
        return await self._call(
            "AlterPartition",
            lambda c: c.alter_partition(self.node_id, broker_epoch, topic_id, partition,
                                        leader_epoch, partition_epoch, isr),
            ALTER_PARTITION, 2, body, parse)

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        def parse(response: Any) -> tuple[int, int]:
            self._check(response.error_code)
            return int(response.producer_id_start), int(response.producer_id_len)

        return await self._call(
            "AllocateProducerIds", lambda c: c.allocate_producer_ids(broker_id),
            ALLOCATE_PRODUCER_IDS, 0, {"broker_id": broker_id, "broker_epoch": -1}, parse)

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool
                            ) -> list[CreatedTopic | KafkaError]:
        if not topics:
            return []

        def parse(response: Any) -> list[CreatedTopic | KafkaError]:
            by_name = {item.name: item for item in response.topics}
            results: list[CreatedTopic | KafkaError] = []
            for topic in topics:
                item = by_name.get(topic.name)
                if item is None:
                    results.append(KafkaError(ErrorCode.unknown_server_error))
                elif item.error_code == ErrorCode.not_controller.value:
                    raise KafkaError(ErrorCode.not_controller)
                elif item.error_code != ErrorCode.none.value:
                    results.append(KafkaError(ErrorCode(item.error_code), item.error_message))
                else:
                    results.append(CreatedTopic(
                        item.name, uuid.UUID(str(item.topic_id)), item.num_partitions,
                        item.replication_factor,
                        {config.name: config.value for config in item.configs or ()
                         if config.value is not None}))
            return results

        body = {"topics": [
            {"name": topic.name, "num_partitions": topic.num_partitions,
             "replication_factor": topic.replication_factor,
             "assignments": [{"partition_index": index, "broker_ids": replicas}
                             for index, replicas in sorted(topic.assignments.items())],
             "configs": [{"name": name, "value": value}
                         for name, value in topic.configs.items()]} for topic in topics],
                "timeout": int(self.timeout_s * 1000), "validate_only": validate_only}
        return await self._call(
            "CreateTopics", lambda c: c.create_topics(topics, validate_only=validate_only),
            CREATE_TOPICS, 7, body, parse)
