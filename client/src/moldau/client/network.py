"""NetworkClient: connections to every broker, their states, and request dispatch.

Per node a connection is DISCONNECTED, CONNECTING (TCP, then ApiVersions) or READY. A failed
or lost connection may be retried after a backoff that starts at `reconnect.backoff.ms` and
doubles per consecutive failure up to `reconnect.backoff.max.ms`, with ±20% jitter. On
connect the client asks for the broker's API versions and uses, per API, the highest version
both sides support. A disconnect fails everything in flight on that node and asks the
metadata for a refresh.

Two ways to send: `send()` for callers that check `is_ready()` first and must never wait
(the producer's sender), and `await request()`, which connects and waits for capacity.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from moldau.client.config import client_security
from moldau.client.connection import BrokerConnection
from moldau.client.errors import (
    DisconnectedError,
    KafkaError,
    NoBrokersAvailableError,
    UnsupportedVersionError,  # type: ignore[attr-defined]
    error_for,
)
from moldau.client.metadata import Metadata
from moldau.client.security import ClientSecurity
from moldau.client.types import Node
from moldau.client.versions import ApiKey, client_versions, negotiate
from moldau.client.wakeup import Wakeup
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

log = logging.getLogger("moldau.client.network")

SOFTWARE_NAME = "moldau-python"
JITTER = 0.2


def _software_version() -> str:
    try:
        from importlib.metadata import version

        return version("moldau")
    except Exception:  # not installed as a distribution
        return "0.0.0"


class ConnectionState(Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    READY = "ready"


class ExponentialBackoff:
    """initial * 2**attempts, capped at `maximum`, times a random factor in [0.8, 1.2]."""

    def __init__(self, initial: float, maximum: float, jitter: float = JITTER) -> None:
        self.initial = initial
        self.maximum = max(maximum, initial)
        self.jitter = jitter
        self._exp_max = (math.log2(self.maximum / initial) if initial > 0 and
                         self.maximum > initial else 0.0)

    def backoff(self, attempts: int) -> float:
        if self.initial <= 0:
            return 0.0
        term = self.initial * 2 ** min(attempts, self._exp_max)
        if self.jitter:
            term *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return term


class NodeState:
    __slots__ = ("backoff_until", "conn", "failures", "last_attempt", "last_error", "node_id",
                 "state", "task", "throttle_until", "versions")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.state = ConnectionState.DISCONNECTED
        self.conn: BrokerConnection | None = None
        self.failures = 0
        self.last_attempt = float("-inf")
        self.backoff_until = float("-inf")
        self.throttle_until = float("-inf")
        self.versions: dict[int, int] = {}
        self.task: asyncio.Task[None] | None = None
        self.last_error: KafkaError | None = None


# Errors of a refused SASL exchange: Kafka's clients give up rather than retry.
AUTHENTICATION_ERRORS = frozenset({ErrorCode.sasl_authentication_failed,
                                   ErrorCode.unsupported_sasl_mechanism,
                                   ErrorCode.illegal_sasl_state})

RequestBody = Mapping[str, Any] | Callable[[int], bytes] | Any


class NetworkClient:
    def __init__(self, metadata: Metadata, *, client_id: str, max_in_flight: int = 5,
                 request_timeout_ms: int = 30000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000,
                 connection_setup_timeout_ms: int = 10000, send_buffer_bytes: int = -1,
                 receive_buffer_bytes: int = -1, security: ClientSecurity | None = None
                 ) -> None:
        self.metadata = metadata
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.request_timeout_ms = request_timeout_ms
        self.connection_setup_timeout = connection_setup_timeout_ms / 1000
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.security = security
        self.backoff = ExponentialBackoff(reconnect_backoff_ms / 1000,
                                          reconnect_backoff_max_ms / 1000)
        self._states: dict[int, NodeState] = {}
        # Extra node ids with a broker's address, for a second connection to it.
        self._aliases: dict[int, Node] = {}
        self._listeners: list[Callable[[], None]] = []
        self._wakeup = Wakeup()
        self._closed = False
        self._software_version = _software_version()
        metadata.add_listener(self._on_metadata)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], metadata: Metadata) -> NetworkClient:
        return cls(metadata, client_id=config["client.id"],
                   max_in_flight=config["max.in.flight.requests.per.connection"],
                   request_timeout_ms=config["request.timeout.ms"],
                   reconnect_backoff_ms=config["reconnect.backoff.ms"],
                   reconnect_backoff_max_ms=config["reconnect.backoff.max.ms"],
                   connection_setup_timeout_ms=config["socket.connection.setup.timeout.ms"],
                   send_buffer_bytes=config["send.buffer.bytes"],
                   receive_buffer_bytes=config["receive.buffer.bytes"],
                   security=client_security(config))

    # -------------------------------------------------------------------------- events

    def add_listener(self, callback: Callable[[], None]) -> None:
        """callback() on the loop whenever a node may have become ready or lost requests."""
        self._listeners.append(callback)

    def _notify(self) -> None:
        for callback in self._listeners:
            callback()
        self._wakeup.notify()

    async def wait_for_event(self, timeout: float) -> None:
        """Wait until some connection changes state or completes a request, or `timeout`."""
        await self._wakeup.wait(timeout)

    # -------------------------------------------------------------------------- states

    def _state(self, node_id: int) -> NodeState:
        state = self._states.get(node_id)
        if state is None:
            state = self._states[node_id] = NodeState(node_id)
        return state

    def connection_state(self, node_id: int) -> ConnectionState:
        state = self._states.get(node_id)
        return ConnectionState.DISCONNECTED if state is None else state.state

    def is_ready(self, node_id: int, now: float | None = None) -> bool:
        """Connected, versions known, not throttled, and able to take another request."""
        state = self._states.get(node_id)
        if state is None or state.state is not ConnectionState.READY:
            return False
        conn = state.conn
        if conn is None or not conn.can_send():
            return False
        return state.throttle_until <= (time.monotonic() if now is None else now)

    def is_connected(self, node_id: int) -> bool:
        state = self._states.get(node_id)
        return state is not None and state.state is ConnectionState.READY

    def is_connecting(self, node_id: int) -> bool:
        state = self._states.get(node_id)
        return state is not None and state.state is ConnectionState.CONNECTING

    def is_throttled(self, node_id: int, now: float | None = None) -> bool:
        state = self._states.get(node_id)
        return state is not None and state.throttle_until > (
            time.monotonic() if now is None else now)

    def can_connect(self, node_id: int, now: float | None = None) -> bool:
        state = self._states.get(node_id)
        if state is None:
            return True
        now = time.monotonic() if now is None else now
        return state.state is ConnectionState.DISCONNECTED and now >= state.backoff_until

    def connection_delay(self, node_id: int, now: float | None = None) -> float:
        """Seconds until a connection attempt to the node is allowed (0: now; inf: it is
        connected or connecting already)."""
        state = self._states.get(node_id)
        if state is None:
            return 0.0
        if state.state is not ConnectionState.DISCONNECTED:
            return math.inf
        now = time.monotonic() if now is None else now
        return max(state.backoff_until - now, 0.0)

    def min_connection_delay(self) -> float:
        now = time.monotonic()
        delays = [self.connection_delay(node.node_id, now)
                  for node in self.metadata.cluster.nodes]
        return min(delays, default=0.0)

    def in_flight_count(self, node_id: int | None = None) -> int:
        if node_id is None:
            return sum(len(s.conn.in_flight) for s in self._states.values() if s.conn)
        state = self._states.get(node_id)
        return 0 if state is None or state.conn is None else len(state.conn.in_flight)

    def last_error(self, node_id: int) -> KafkaError | None:
        state = self._states.get(node_id)
        return None if state is None else state.last_error

    def api_version(self, node_id: int, api_key: int) -> int | None:
        state = self._states.get(node_id)
        return None if state is None else state.versions.get(api_key)

    def ready(self, node_id: int, now: float | None = None) -> bool:
        """is_ready(); if not connected, start connecting when the backoff allows it."""
        if self.is_ready(node_id, now):
            return True
        if self.can_connect(node_id, now):
            self.connect(node_id)
        return False

    # -------------------------------------------------------------------------- connecting

    def connect(self, node_id: int) -> None:
        if self._closed:
            return
        state = self._state(node_id)
        if state.state is not ConnectionState.DISCONNECTED:
            return
        node = self.metadata.cluster.node(node_id) or self._aliases.get(node_id)
        if node is None:
            raise DisconnectedError(f"Node {node_id} is not in the cluster metadata")
        state.state = ConnectionState.CONNECTING
        state.last_attempt = time.monotonic()
        state.task = asyncio.get_running_loop().create_task(
            self._connect(state, node.host, node.port), name=f"moldau-connect-{node_id}")

    async def _connect(self, state: NodeState, host: str, port: int) -> None:
        conn = BrokerConnection(state.node_id, host, port, client_id=self.client_id,
                                max_in_flight=self.max_in_flight,
                                request_timeout_ms=self.request_timeout_ms,
                                send_buffer_bytes=self.send_buffer_bytes,
                                receive_buffer_bytes=self.receive_buffer_bytes,
                                on_event=self._on_conn_event, on_close=self._on_conn_close,
                                security=self.security)
        try:
            await asyncio.wait_for(conn.open(), self.connection_setup_timeout)
            state.conn = conn
            state.versions = await self._negotiate(conn)
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, TimeoutError, KafkaError) as exc:
            if isinstance(exc, TimeoutError):
                reason = f"no connection within {round(self.connection_setup_timeout * 1000)} ms"
            else:
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            error = exc if isinstance(exc, KafkaError) and not isinstance(
                exc, DisconnectedError) else DisconnectedError(
                f"Connection to node {state.node_id} ({host}:{port}) failed: {reason}")
            if state.conn is conn:
                state.conn = None
            conn._on_close = None
            conn.close(error)
            if error.code in AUTHENTICATION_ERRORS:
                self.metadata.authentication_failed(error)
            if state.state is ConnectionState.CONNECTING:  # not already handled on close
                self._failed(state, error)
            return
        finally:
            state.task = None
        if conn.closed:  # lost during negotiation; _on_conn_close already did the rest
            return
        state.state = ConnectionState.READY
        state.failures = 0
        state.last_error = None
        log.debug("connected to node %d at %s:%d", state.node_id, host, port)
        self._notify()

    async def _negotiate(self, conn: BrokerConnection) -> dict[int, int]:
        versions = client_versions(ApiKey.API_VERSIONS)
        assert versions is not None
        version = versions[1]
        for _ in range(3):
            body = build(request_class(ApiKey.API_VERSIONS, version), {
                "client_software_name": SOFTWARE_NAME,
                "client_software_version": self._software_version})
            response = await conn.send(ApiKey.API_VERSIONS, version, body)
            broker = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if response.error_code == ErrorCode.unsupported_version and version > 0:
                # Retry with the highest ApiVersions version the broker says it knows.
                version = min(version - 1, broker.get(ApiKey.API_VERSIONS, (0, 0))[1])
                continue
            if response.error_code != ErrorCode.none:
                raise error_for(response.error_code, "ApiVersions failed")
            return negotiate(broker)
        raise UnsupportedVersionError("No ApiVersions version in common with the broker")

    def _failed(self, state: NodeState, error: KafkaError) -> None:
        state.state = ConnectionState.DISCONNECTED
        state.conn = None
        state.versions = {}
        state.last_error = error
        now = time.monotonic()
        state.last_attempt = now
        state.backoff_until = now + self.backoff.backoff(state.failures)
        state.failures += 1
        log.debug("node %d: %s", state.node_id, error)
        self.metadata.request_update()
        self._notify()

    def _on_conn_event(self, conn: BrokerConnection) -> None:
        if conn.node_id < 0 and not conn.in_flight and not self.metadata.cluster.is_bootstrap:
            # A bootstrap connection that was busy when the real brokers became known.
            asyncio.get_running_loop().call_soon(self._drop_orphan, conn.node_id)
        self._notify()

    def _drop_orphan(self, node_id: int) -> None:
        state = self._states.get(node_id)
        if state is not None and state.conn is not None and not state.conn.in_flight \
                and self.metadata.cluster.node(node_id) is None:
            self.disconnect(node_id)
            del self._states[node_id]

    def _on_conn_close(self, conn: BrokerConnection, error: KafkaError) -> None:
        state = self._states.get(conn.node_id)
        if state is None or state.conn is not conn:
            return
        if state.state is ConnectionState.READY:
            # A drop after a good connection: back off from the first step again.
            state.failures = 0
        self._failed(state, error)

    def disconnect(self, node_id: int, error: KafkaError | None = None) -> None:
        state = self._states.get(node_id)
        if state is None:
            return
        if state.task is not None:
            state.task.cancel()
            state.task = None
        if state.conn is not None:
            state.conn.close(error)
        state.state = ConnectionState.DISCONNECTED
        state.conn = None

    def alias(self, node: Node) -> int:
        """A node id of its own for a separate connection to `node`'s address, as Kafka's
        consumer keeps one for its group coordinator so that group requests held by the
        broker (JoinGroup) never queue behind fetches, nor fetches behind them."""
        alias_id = 0x7FFFFFFF - node.node_id
        known = self._aliases.get(alias_id)
        if known is not None and (known.host, known.port) != (node.host, node.port):
            self.disconnect(alias_id)
        self._aliases[alias_id] = Node(alias_id, node.host, node.port, node.rack)
        return alias_id

    def _on_metadata(self, cluster: Any) -> None:
        # Bootstrap addresses have served their purpose once real brokers are known; close
        # their idle connections (busy ones finish their requests first).
        known = {node.node_id for node in cluster.nodes}
        for node_id, state in list(self._states.items()):
            if node_id in known or node_id in self._aliases:
                continue
            if state.conn is None or not state.conn.in_flight:
                self.disconnect(node_id)
                del self._states[node_id]

    # -------------------------------------------------------------------------- sending

    def _version(self, state: NodeState, api_key: int, max_version: int | None,
                 min_version: int | None) -> int:
        version = state.versions.get(api_key)
        if version is not None and max_version is not None:
            version = min(version, max_version)
        if version is None or (min_version is not None and version < min_version):
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ \
                else f"API {api_key}"
            raise UnsupportedVersionError(
                f"Node {state.node_id} does not support {name}"
                + (f" v{min_version}+" if min_version is not None else ""))
        return version

    def send(self, node_id: int, api_key: int, body: RequestBody, *,
             expect_response: bool = True, max_version: int | None = None,
             min_version: int | None = None, timeout: float | None = None
             ) -> asyncio.Future[Any]:
        """Send now; the node must be ready (see is_ready). `body` is a plain mapping (built
        for the negotiated version), a callable(version) -> encoded bytes, or an entity."""
        state = self._states.get(node_id)
        if state is None or state.conn is None or state.state is not ConnectionState.READY:
            raise DisconnectedError(f"Node {node_id} is not connected")
        version = self._version(state, api_key, max_version, min_version)
        if isinstance(body, Mapping):
            payload: Any = build(request_class(api_key, version), body)
        elif callable(body):
            payload = body(version)
        else:
            payload = body
        future = state.conn.send(api_key, version, payload, expect_response=expect_response,
                                 timeout=timeout)
        if expect_response:
            future.add_done_callback(lambda f: self._check_throttle(state, f))
        return future

    def _check_throttle(self, state: NodeState, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        throttle = getattr(future.result(), "throttle_time", None)
        if throttle:
            seconds = throttle.total_seconds()
            if seconds > 0:
                state.throttle_until = time.monotonic() + seconds
                asyncio.get_running_loop().call_later(seconds, self._notify)

    async def request(self, node_id: int, api_key: int, body: RequestBody, *,
                      max_version: int | None = None, min_version: int | None = None,
                      expect_response: bool = True, timeout: float | None = None) -> Any:
        """Connect if needed, wait for capacity, send, and return the response. Raises
        DisconnectedError if the node cannot be reached."""
        attempted = False
        while True:
            if self._closed:
                raise DisconnectedError("The client is closed")
            if self.is_ready(node_id):
                return await self.send(node_id, api_key, body, expect_response=expect_response,
                                       max_version=max_version, min_version=min_version,
                                       timeout=timeout)
            state = self._state(node_id)
            if state.state is ConnectionState.DISCONNECTED:
                if attempted or not self.can_connect(node_id):
                    error = state.last_error
                    raise DisconnectedError(
                        f"Cannot reach node {node_id}"
                        + (f": {error}" if error is not None else " (backing off)"))
                self.connect(node_id)
                attempted = True
            await self.wait_for_event(1.0)

    # -------------------------------------------------------------------------- choosing

    def least_loaded_node(self, now: float | None = None) -> int | None:
        """The node to send a request to when any will do, chosen as Kafka's client does:
        scan from a random offset; a ready node with nothing in flight wins at once; else the
        ready node with fewest in flight; else one that is connecting; else one that may
        connect, preferring the oldest last attempt. Nodes in backoff or throttled are
        skipped. None when nothing qualifies; an error when there are no nodes at all."""
        nodes = self.metadata.cluster.nodes
        if not nodes:
            raise NoBrokersAvailableError("No broker addresses are known")
        now = time.monotonic() if now is None else now
        offset = random.randrange(len(nodes))
        fewest = math.inf
        found_ready: int | None = None
        found_connecting: int | None = None
        found_connectable: int | None = None
        oldest_attempt = math.inf
        for i in range(len(nodes)):
            node_id = nodes[(offset + i) % len(nodes)].node_id
            if self.is_ready(node_id, now):
                in_flight = self.in_flight_count(node_id)
                if in_flight == 0:
                    return node_id
                if in_flight < fewest:
                    fewest = in_flight
                    found_ready = node_id
            elif self.is_connecting(node_id):
                found_connecting = node_id
            elif self.can_connect(node_id, now) and not self.is_throttled(node_id, now):
                state = self._states.get(node_id)
                attempt = -math.inf if state is None else state.last_attempt
                if found_connectable is None or attempt < oldest_attempt:
                    oldest_attempt = attempt
                    found_connectable = node_id
        if found_ready is not None:
            return found_ready
        if found_connecting is not None:
            return found_connecting
        return found_connectable

    # -------------------------------------------------------------------------- closing

    async def close(self) -> None:
        self._closed = True
        for node_id in list(self._states):
            self.disconnect(node_id, DisconnectedError("The client is closed"))
        self._states.clear()
        self._notify()
