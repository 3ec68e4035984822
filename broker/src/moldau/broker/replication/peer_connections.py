"""One client connection per peer broker, opened on first use and shared by concurrent
senders (the transaction coordinator's markers, the partition leaders' transaction
verification)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from moldau.client.connection import BrokerConnection
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.replication.manager import ReplicaManager

SEND_WAIT_S = 0.005


class PeerConnections:
    def __init__(self, node_id: int, replicas: ReplicaManager, *, purpose: str,
                 request_timeout_ms: int, max_in_flight: int,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas  # knows the peers' inter-broker endpoints
        self.client_id = f"broker-{node_id}-{purpose}"
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        # The inter-broker listener's protocol and this broker's credentials on it.
        self.security = security
        self._connections: dict[int, BrokerConnection] = {}
        self._opening: dict[int, asyncio.Future[BrokerConnection]] = {}

    async def send(self, broker_id: int, api_key: int, version: int, body: Any) -> Any:
        """Send one request to `broker_id` and return its response; raises KafkaError,
        OSError or TimeoutError (the connection is dropped then, and reopened next time)."""
        try:
            connection = await self._connection(broker_id)
            while not connection.can_send():
                # Other requests to this broker are in flight: wait for room.
                if connection.closed:
                    raise KafkaError(ErrorCode.network_exception,
                                     f"the connection to broker {broker_id} closed")
                await asyncio.sleep(SEND_WAIT_S)
            return await connection.send(api_key, version, body)
        except (KafkaError, OSError, TimeoutError):
            self.drop(broker_id)
            raise

    async def _connection(self, broker_id: int) -> BrokerConnection:
        connection = self._connections.get(broker_id)
        if connection is not None and not connection.closed:
            return connection
        # Concurrent senders wait for the one connection being opened.
        opening = self._opening.get(broker_id)
        if opening is None:
            opening = self._opening[broker_id] = asyncio.ensure_future(self._open(broker_id))
            opening.add_done_callback(lambda _done: self._opening.pop(broker_id, None))
        return await asyncio.shield(opening)

    async def _open(self, broker_id: int) -> BrokerConnection:
        endpoint = self.replicas.leader_endpoint(broker_id)
        if endpoint is None:
            raise KafkaError(ErrorCode.broker_not_available,
                             f"no endpoint known for broker {broker_id}")
        connection = BrokerConnection(broker_id, *endpoint, max_in_flight=self.max_in_flight,
                                      client_id=self.client_id,
                                      request_timeout_ms=self.request_timeout_ms,
                                      security=self.security)
        try:
            await asyncio.wait_for(connection.open(), self.request_timeout_ms / 1000)
        except BaseException:
            connection.close()
            raise
        self._connections[broker_id] = connection
        return connection

    def drop(self, broker_id: int) -> None:
        connection = self._connections.pop(broker_id, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def close(self) -> None:
        for opening in self._opening.values():
            opening.cancel()
        for broker_id in list(self._connections):
            self.drop(broker_id)
