"""One client connection: read a frame, hand it on, wait for its response, write it.

This is Kafka's mute-after-receive in asyncio form: one task per connection loops over
read -> handle -> write, so at most one request per connection is inside the broker and
responses leave in request order; pipelined requests wait in the socket buffer.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable

from moldau.broker.network.channel import Request, RequestChannel
from moldau.broker.network.response import Response, send_response
from moldau.broker.security.audit import AuthenticationLog
from moldau.broker.security.principal import ANONYMOUS, host_address
from moldau.broker.security.sasl import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslSession,
    Stage,
)
from moldau.protocol.messages import MalformedRequest, RequestHeader

log = logging.getLogger("moldau.broker.network")

_SIZE = struct.Struct(">i")

# Turns a raw frame into a Request (decoded) or an immediate Response (e.g. ApiVersions
# with an unsupported version). Raises MalformedRequest to close the connection.
Decoder = Callable[[bytes, "Connection"], Request | Response | None]


class CloseConnection(Exception):
    """Raised by a handler when Kafka's semantics say to drop the connection."""


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 listener: str, peer: str, channel: RequestChannel, decode: Decoder,
                 ready: Callable[[], Awaitable[None]], max_request_bytes: int,
                 idle_timeout_s: float, auth_log: AuthenticationLog | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.listener = listener
        self.peer = peer
        # The client's address as ACLs name hosts.
        self.host = host_address(peer.rsplit(":", 1)[0])
        self.channel = channel
        self.decode = decode
        self.ready = ready
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        self.client_software: tuple[str, str] | None = None  # from ApiVersions (KIP-511)
        # Who the client is: its certificate's or SASL identity (authorization's input).
        self.principal = ANONYMOUS
        self.auth_log = auth_log or AuthenticationLog()
        self.sasl: SaslSession | None = None  # on SASL listeners
        # Set by a handler whose response is the last (a failed authentication).
        self.close_after_response = False
        self.closing = False

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                frame = await self._read_frame()
                if frame is None:
                    return
                await self.ready()
                if self.sasl is not None and self.sasl.raw_tokens:
                    if not await self._raw_sasl_token(frame):
                        return
                    continue
                decoded = self.decode(frame, self)
                if isinstance(decoded, Request):
                    self._check_sasl_sequence(decoded.header.api_key)
                    await self.channel.put(decoded)
                    response = await decoded.response
                else:
                    response = decoded
                if response is not None:
                    await send_response(loop, self.writer, response)
                if isinstance(decoded, Request):
                    header = decoded.header
                    self.channel.stats.record(header.api_key, header.api_version,
                                              decoded.received_at, decoded.metric_name)
                if self.close_after_response:
                    return
        except (MalformedRequest, CloseConnection) as exc:
            log.warning("Closing connection from %s: %s", self.peer, exc)
        except TimeoutError:
            log.info("Closing connection from %s idle longer than connections.max.idle.ms",
                     self.peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            log.debug("Connection from %s closed by the client", self.peer)
        except asyncio.CancelledError:
            if not self.closing:
                raise
            # Broker shutdown: end quietly (a cancelled stream task gets logged by asyncio).
        except Exception:
            log.exception("Closing connection from %s after an internal error", self.peer)
        finally:
            self.writer.close()

    def _check_sasl_sequence(self, api_key: int) -> None:
        if self.sasl is None or self.sasl.permits(api_key):
            return
        if self.sasl.authenticated:
            raise CloseConnection("its SASL session expired (connections.max.reauth.ms) "
                                  "and it did not re-authenticate")
        raise CloseConnection(f"Unexpected Kafka request of type {api_key} during SASL "
                              "handshake")

    def authenticate(self, token: bytes) -> bytes:
        """One SASL token; the reply. A refusal is logged, closes the connection after the
        response and raises AuthenticationFailed with the message for the client."""
        assert self.sasl is not None
        try:
            reply = self.sasl.authenticate(token)
        except (AuthenticationFailed, IllegalSaslState) as exc:
            self.auth_log.failure(self.listener, self.peer, str(exc))
            self.close_after_response = True
            raise AuthenticationFailed(str(exc)) from None
        if self.sasl.stage is Stage.DONE:  # this token completed the exchange
            self.principal = self.sasl.principal or ANONYMOUS
            self.auth_log.success(self.listener)
        return reply

    async def _raw_sasl_token(self, frame: bytes) -> bool:
        """A bare token after a SaslHandshake v0; False when the connection must close."""
        try:
            reply = self.authenticate(frame)
        except AuthenticationFailed:
            return False
        self.writer.write(_SIZE.pack(len(reply)) + reply)
        await self.writer.drain()
        return True

    def close(self) -> None:
        self.closing = True
        self.writer.close()

    async def _read_frame(self) -> bytes | None:
        try:
            async with asyncio.timeout(self.idle_timeout_s):
                prefix = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise MalformedRequest("connection closed inside a size prefix") from None
            return None
        (size,) = _SIZE.unpack(prefix)
        sasl = self.sasl
        if sasl is not None and not sasl.authenticated and size > sasl.max_receive_bytes:
            raise MalformedRequest(
                f"request of {size} bytes before SASL authentication is larger than "
                f"sasl.server.max.receive.size ({sasl.max_receive_bytes})")
        if size < 0 or size > self.max_request_bytes:
            raise MalformedRequest(
                f"request of {size} bytes is larger than socket.request.max.bytes "
                f"({self.max_request_bytes}) or negative")
        try:
            return await self.reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            raise MalformedRequest(
                f"connection closed after {len(exc.partial)} of {size} request bytes") from None

    def new_request(self, header: RequestHeader, body: object) -> Request:
        return Request(header=header, body=body, connection=self,
                       received_at=time.monotonic(),
                       response=asyncio.get_running_loop().create_future())
