"""One TCP connection to a broker: framing, correlation ids and the in-flight deque.

Requests leave one at a time: another may be written only once the previous one has been
fully handed to the socket and fewer than `max_in_flight` are unanswered. Responses must
arrive in request order, so each one is matched against the oldest request in flight; any
other correlation id is a protocol error that closes the connection. A request that expects
no response (Produce with acks=0) completes as soon as it is written. When the oldest
request has waited longer than `request_timeout_ms`, the connection is closed and every
request on it fails as disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable
from functools import cache
from io import BytesIO
from typing import Any

from kio.serial import entity_reader, entity_writer

from moldau.client.errors import DisconnectedError, KafkaError, ProtocolError
from moldau.client.security import ClientSecurity
from moldau.client.versions import ApiKey
from moldau.protocol.messages import request_class, response_class

log = logging.getLogger("moldau.client.connection")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">ihhi")  # size, api key, api version, correlation id
# Larger responses than this are treated as a broken stream rather than allocated.
MAX_RESPONSE_SIZE = 512 * 1024 * 1024

# A request body: a kio entity, or bytes already encoded for the chosen version.
Body = Any


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(response_class(api_key, version))


@cache
def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


def encode_body(body: Any) -> bytes:
    out = BytesIO()
    _writer(type(body))(out, body)
    return out.getvalue()


def frame_request(api_key: int, version: int, correlation_id: int, client_id: bytes,
                  body: bytes | list[Any]) -> bytes:
    """Size prefix, request header (v1, or v2 with empty tagged fields when flexible), body.
    The body may be a list of byte pieces (joined here, the only copy)."""
    flexible = is_flexible(api_key, version)
    pieces = body if isinstance(body, list) else [body]
    size = 10 + len(client_id) + flexible + sum(map(len, pieces))
    head = _HEADER.pack(size, api_key, version, correlation_id)
    return b"".join((head, struct.pack(">h", len(client_id)), client_id,
                     b"\0" if flexible else b"", *pieces))


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    def uvarint(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = frame[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, at
            shift += 7

    count, pos = uvarint(pos)
    for _ in range(count):
        _tag, pos = uvarint(pos)
        size, pos = uvarint(pos)
        pos += size
    return pos


def decode_response(api_key: int, version: int, frame: bytes, pos: int) -> Any:
    """The response body starting at `pos` (after the correlation id)."""
    if api_key == ApiKey.API_VERSIONS:
        # A broker that does not know the requested version answers in v0 (KIP-511); the
        # header is always v0 for ApiVersions.
        if version > 0 and frame[pos:pos + 2] == b"\x00\x23":
            version = 0
    elif is_flexible(api_key, version):
        pos = _skip_tagged_fields(frame, pos)
    body, _size = _reader(api_key, version)(frame, pos)
    return body


class InFlightRequest:
    __slots__ = ("api_key", "correlation_id", "deadline", "expect_response", "future",
                 "version")

    def __init__(self, api_key: int, version: int, correlation_id: int,
                 future: asyncio.Future[Any], expect_response: bool, deadline: float) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.future = future
        self.expect_response = expect_response
        self.deadline = deadline


class BrokerConnection:
    """A connected socket to one broker. Create with `open()`; all use is on one loop."""

    def __init__(self, node_id: int, host: str, port: int, *, client_id: str,
                 max_in_flight: int = 5, request_timeout_ms: int = 30000,
                 send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1,
                 on_event: Callable[[BrokerConnection], None] | None = None,
                 on_close: Callable[[BrokerConnection, KafkaError], None] | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id.encode()
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout_ms / 1000
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self._on_event = on_event
        self._on_close = on_close
        self.security = security or ClientSecurity()
        self.in_flight: deque[InFlightRequest] = deque()
        self.sending = False  # the newest request is not yet fully written
        self.closed = False
        self.close_error: KafkaError | None = None
        self._correlation_id = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._transport: asyncio.WriteTransport | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    async def open(self) -> None:
        context = self.security.context
        reader, writer = await asyncio.open_connection(
            self.host, self.port, limit=1024 * 1024, ssl=context,
            server_hostname=self.host if context is not None else None)
        self._reader, self._writer = reader, writer
        transport = writer.transport
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer_bytes > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
                if self.receive_buffer_bytes > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                    self.receive_buffer_bytes)
        # With a zero high-water mark, drain() returns only once every byte has been handed
        # to the socket, which is what "the send has completed" means here.
        transport.set_write_buffer_limits(high=0)
        self._read_task = self._loop.create_task(self._read_loop(),
                                                 name=f"moldau-read-{self.node_id}")
        if self.security.sasl:
            await self.security.authenticate(self, f"node {self.node_id} "
                                                   f"({self.host}:{self.port})")

    # -------------------------------------------------------------------------- sending

    def can_send(self) -> bool:
        return (not self.closed and not self.sending and self._transport is not None
                and len(self.in_flight) < self.max_in_flight)

    def next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def send(self, api_key: int, version: int, body: Body, *,
             expect_response: bool = True, timeout: float | None = None
             ) -> asyncio.Future[Any]:
        """Write one request; the future resolves with the decoded response (None when no
        response is expected) or fails with DisconnectedError/ProtocolError. `timeout`
        (seconds) replaces request.timeout.ms for requests the broker may hold longer, such
        as JoinGroup."""
        if not self.can_send():
            raise DisconnectedError(f"Cannot send to node {self.node_id}: "
                                    + ("closed" if self.closed else "not ready"))
        correlation_id = self.next_correlation_id()
        payload = body if isinstance(body, bytes | bytearray | list) else encode_body(body)
        data = frame_request(api_key, version, correlation_id, self.client_id, payload)
        future: asyncio.Future[Any] = self._loop.create_future()
        request = InFlightRequest(api_key, version, correlation_id, future, expect_response,
                                  self._loop.time() + (self.request_timeout
                                                       if timeout is None else timeout))
        self.in_flight.append(request)
        transport = self._transport
        assert transport is not None
        transport.write(data)
        if transport.get_write_buffer_size():
            self.sending = True
            self._loop.create_task(self._finish_send(request))
        else:
            self._sent(request)
        if self._timer is None:
            self._arm_timer(request.deadline)
        return future

    async def _finish_send(self, request: InFlightRequest) -> None:
        assert self._writer is not None
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.close(DisconnectedError(f"Connection to node {self.node_id} failed while "
                                         f"sending: {exc}"))
            return
        except asyncio.CancelledError:
            return
        if self.closed:
            return
        self.sending = False
        self._sent(request)

    def _sent(self, request: InFlightRequest) -> None:
        if not request.expect_response:
            # The newest request is the one just written: complete it on send.
            if self.in_flight and self.in_flight[-1] is request:
                self.in_flight.pop()
            if not request.future.done():
                request.future.set_result(None)
        if self._on_event is not None:
            self._on_event(self)

    # -------------------------------------------------------------------------- timeouts

    def _arm_timer(self, deadline: float) -> None:
        self._timer = self._loop.call_at(deadline, self._check_timeout)

    def _check_timeout(self) -> None:
        self._timer = None
        if self.closed or not self.in_flight:
            return
        oldest = self.in_flight[0]
        if oldest.deadline <= self._loop.time():
            self.close(DisconnectedError(
                f"Disconnected from node {self.node_id} due to request timeout: no response "
                f"within {round(self.request_timeout * 1000)} ms", timed_out=True))
        else:
            self._arm_timer(oldest.deadline)

    # -------------------------------------------------------------------------- receiving

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > MAX_RESPONSE_SIZE:
                    raise ProtocolError(f"Invalid response size {size} from node "
                                        f"{self.node_id}")
                frame = await reader.readexactly(size)
                self._handle_frame(frame)
        except asyncio.CancelledError:
            return
        except ProtocolError as exc:
            self.close(exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            detail = "connection closed by the broker" if isinstance(
                exc, asyncio.IncompleteReadError) else str(exc)
            self.close(DisconnectedError(f"Connection to node {self.node_id} lost: {detail}"))

    def _handle_frame(self, frame: bytes) -> None:
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if not self.in_flight:
            raise ProtocolError(f"Response with correlation id {correlation_id} from node "
                                f"{self.node_id}, but no request is in flight")
        request = self.in_flight[0]
        if request.correlation_id != correlation_id:
            raise ProtocolError(f"Correlation id for response ({correlation_id}) does not "
                                f"match request ({request.correlation_id}) on node "
                                f"{self.node_id}")
        if not request.expect_response:
            raise ProtocolError(f"Response to a request that expects none from node "
                                f"{self.node_id}")
        self.in_flight.popleft()
        try:
            body = decode_response(request.api_key, request.version, frame, 4)
        except Exception as exc:  # kio's native reader raises several types
            error = ProtocolError(f"Cannot decode {ApiKey(request.api_key).name} "
                                  f"v{request.version} response from node {self.node_id}: "
                                  f"{exc}")
            if not request.future.done():
                request.future.set_exception(error)
            raise error from None
        if not request.future.done():
            request.future.set_result(body)
        if self._on_event is not None:
            self._on_event(self)

    # -------------------------------------------------------------------------- closing

    def close(self, error: KafkaError | None = None) -> None:
        """Close the socket and fail every request in flight with `error`."""
        if self.closed:
            return
        self.closed = True
        error = error or DisconnectedError(f"Connection to node {self.node_id} closed")
        self.close_error = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._read_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if self._transport is not None:
            self._transport.abort()
        pending = list(self.in_flight)
        self.in_flight.clear()
        self.sending = False
        for request in pending:
            if not request.future.done():
                request.future.set_exception(error)
                # Nobody may be waiting (e.g. acks=0); do not log "never retrieved".
                request.future.exception()
        if self._on_close is not None:
            self._on_close(self, error)
