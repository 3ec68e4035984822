"""A `Transport` for the controller quorum over TCP, speaking Kafka's framing.

Each node listens on a port. Requests to a peer go over connections this node opens to it:
size prefix, request header v1/v2 (api key, version, correlation id, client id
`raft-<node id>`) and a body from wire.py. Responses come back on the same connection,
framed with the request's correlation id, and are mapped back to response messages with the
request they answer (so a FetchResponse gets the request's fetch position).

Two connections per peer: one for Fetch and FetchSnapshot, one for Vote, BeginQuorumEpoch and
EndQuorumEpoch, so that a fetch the leader holds (a long poll) never delays an election.

`peers` only needs the nodes this one sends requests to: an observer's transport knows the
voters, and nobody needs an observer's address because it only ever sends requests. An
observer's transport need not even listen: set `handler` instead of calling `start` (answers
come back on the connections it opens); `start` only adds a port for DescribeQuorum.

Incoming requests are handed to the node at once; the node answers later with a Send of the
response message, which is written on the connection the request came in on. Responses on one
connection leave in request order, as Kafka clients expect. A request the node never answers
(a held fetch dropped when leadership changes) is resolved by the requester: when its oldest
unanswered request is older than the request timeout, it closes the connection and opens a new
one.

Raft tolerates message loss, and this transport uses that: a message for a peer that is not
connected is queued while a connection attempt is under way and dropped while the attempt
backs off after a failure (exponentially, up to `reconnect_backoff_max_ms`).

ApiVersions is answered with the versions wire.py supports, and DescribeQuorum when a
`describe_quorum` callback is given, so that Kafka's tools can talk to the port as well.

Other APIs served on the same port (a controller's BrokerRegistration, BrokerHeartbeat,
AlterPartition...) are given as `services`: api key -> (min version, max version, coroutine
taking the request frame and its caller and returning the framed response). Their answers keep
request order on the connection like every other.

Who sends on an incoming connection (its `Caller`: principal and address) is told by
`identify` when the connection opens (a TLS client certificate's principal, say); a caller
`gate` refuses gets CLUSTER_AUTHORIZATION_FAILED for Raft and DescribeQuorum requests, as
Kafka's controller answers a client without CLUSTER_ACTION (or DESCRIBE) on the cluster.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from moldau.broker.raft.messages import (
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
)
from moldau.broker.raft.wire import (
    RESPONSE_TYPES,
    SUPPORTED_VERSIONS,
    ApiKey,
    QuorumInfo,
    UnsupportedRequest,
    api_key_of,
    error_response,
    node_id_from_client_id,
    parse_response_frame,
    quorum_info_to_wire,
    request_cluster_id,
    request_frame,
    request_from_wire,
    response_frame,
    response_from_wire,
)
from moldau.protocol.build import build
from moldau.protocol.messages import (
    MalformedRequest,
    decode_request,
    encode_response,
    is_flexible_request,
    parse_header,
    parse_header_prefix,
    response_class,
)

__all__ = ["TcpTransport"]

log = logging.getLogger("moldau.broker.raft.transport")

_SIZE = struct.Struct(">i")
_MAX_FRAME = 128 << 20
_MAX_QUEUED = 256  # messages held for a peer while connecting
_MAX_SLOTS = 1024  # unanswered requests on one incoming connection
_API_VERSIONS_MAX = 3
_CLOSE_TIMEOUT_S = 5.0

Handler = Callable[[Message], None]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request on an incoming connection."""

    principal: str
    host: str


Service = tuple[int, int, Callable[[bytes, Caller], Awaitable[bytes]]]
# The caller of a new connection (None: refuse it), and whether a caller may send a Raft
# request (True) or DescribeQuorum (False).
Identify = Callable[[asyncio.StreamWriter], Caller | None]
Gate = Callable[[Caller, bool], bool]
ANONYMOUS_CALLER = Caller("User:ANONYMOUS", "")


@dataclass(slots=True, eq=False)
class _Slot:
    """An incoming request waiting for the node's answer."""

    conn: _Incoming
    api_key: int
    version: int
    correlation_id: int
    request: Message | None
    frame: bytes | None = None


@dataclass(slots=True, eq=False)
class _Incoming:
    writer: asyncio.StreamWriter
    task: asyncio.Task[Any] | None
    caller: Caller = ANONYMOUS_CALLER
    slots: collections.deque[_Slot] = field(default_factory=collections.deque)
    closed: bool = False
    refused: bool = False  # a request was refused (logged once per connection)

    def flush(self) -> None:
        """Write the answered requests at the head of the queue, in request order."""
        while self.slots and self.slots[0].frame is not None and not self.closed:
            frame = self.slots.popleft().frame
            assert frame is not None
            self.writer.write(frame)


@dataclass(slots=True)
class ChannelCounters:
    """Traffic of the connections this node opens to its peers (Kafka's
    raft-channel-metrics): bumped once per request and per response."""

    requests: int = 0
    responses: int = 0
    outgoing_bytes: int = 0
    incoming_bytes: int = 0


@dataclass(slots=True, eq=False)
class _Outgoing:
    """One connection this node opens to a peer."""

    peer_id: int
    writer: asyncio.StreamWriter | None = None
    reader_task: asyncio.Task[None] | None = None
    connect_task: asyncio.Task[None] | None = None
    queued: list[Message] = field(default_factory=list)
    # correlation id -> (request, api key, version, monotonic time sent)
    in_flight: dict[int, tuple[Message, int, int, float]] = field(default_factory=dict)
    failures: int = 0
    backoff_until: float = 0.0
    next_correlation_id: int = 0
    refused: bool = False  # the peer refused a request as unauthorized (logged once)


def _answers(request: Message | None, response: Message) -> bool:
    """Is `response` the node's answer to `request` (of the same API, from the same peer)?"""
    if isinstance(response, FetchResponse):
        return isinstance(request, FetchRequest) and \
            request.fetch_offset == response.fetch_offset and \
            request.last_fetched_epoch == response.last_fetched_epoch
    if isinstance(response, FetchSnapshotResponse):
        return isinstance(request, FetchSnapshotRequest) and \
            request.snapshot_id == response.snapshot_id and \
            request.position == response.position
    return True


class TcpTransport:
    def __init__(self, node_id: int, host: str = "127.0.0.1", port: int = 0, *,
                 peers: Mapping[int, tuple[str, int]] | None = None,
                 cluster_id: str | None = None,
                 versions: Mapping[int, int] | None = None,
                 request_timeout_ms: int = 2000,
                 connect_timeout_ms: int = 1000,
                 reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000,
                 describe_quorum: Callable[[], QuorumInfo] | None = None,
                 services: Mapping[int, Service] | None = None,
                 ssl_server: ssl.SSLContext | None = None,
                 ssl_client: ssl.SSLContext | None = None,
                 identify: Identify | None = None, gate: Gate | None = None) -> None:
        self.node_id = node_id
        self.identify = identify
        self.gate = gate
        # TLS of the controller listener: what this node serves, and towards the voters.
        self.ssl_server = ssl_server
        self.ssl_client = ssl_client
        self.services: dict[int, Service] = dict(services or {})
        self._service_tasks: set[asyncio.Task[bytes]] = set()
        self.host = host
        self.port = port
        self.peers: dict[int, tuple[str, int]] = dict(peers or {})
        self.cluster_id = cluster_id
        self.versions = {key: high for key, (_low, high) in SUPPORTED_VERSIONS.items()}
        for key, version in (versions or {}).items():
            low, high = SUPPORTED_VERSIONS[key]
            if not low <= version <= high:
                raise ValueError(f"api {key} v{version} is outside the supported {low}..{high}")
            self.versions[key] = version
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.reconnect_backoff = reconnect_backoff_ms / 1000
        self.reconnect_backoff_max = reconnect_backoff_max_ms / 1000
        self.describe_quorum = describe_quorum
        self.handler: Handler | None = None
        self._server: asyncio.Server | None = None
        self._incoming: set[_Incoming] = set()
        self.counters = ChannelCounters()
        self._awaiting: dict[int, list[_Slot]] = collections.defaultdict(list)
        self._outgoing: dict[tuple[int, str], _Outgoing] = {}
        self._closed = False

    # -- life cycle -----------------------------------------------------------------------------

    async def start(self, handler: Handler | None = None) -> None:
        """Listen; messages that arrive are given to `handler` (or the `handler` attribute)."""
        if handler is not None:
            self.handler = handler
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  ssl=self.ssl_server)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_peer(self, node_id: int, host: str, port: int) -> None:
        self.peers[node_id] = (host, port)

    async def close(self) -> None:
        """Stop listening and close every connection; later sends are dropped."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        tasks: list[asyncio.Task[Any]] = []
        for conn in list(self._incoming):
            self._close_incoming(conn)
            if conn.task is not None and conn.task is not asyncio.current_task():
                tasks.append(conn.task)  # ends at the end of stream the close causes
        for channel in self._outgoing.values():
            for task in (channel.connect_task, channel.reader_task):
                if task is not None:
                    task.cancel()
                    tasks.append(task)
            self._disconnect(channel)
        if tasks:
            await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # -- sending ------------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        if self._closed:
            return
        if isinstance(message, RESPONSE_TYPES):
            self._respond(message)
        else:
            self._request(message)

    def _respond(self, message: Message) -> None:
        api_key = api_key_of(message)
        slots = self._awaiting.get(message.dst, [])
        for index, slot in enumerate(slots):
            if slot.api_key == api_key and _answers(slot.request, message):
                del slots[index]
                slot.frame = response_frame(message, slot.version, slot.correlation_id)
                slot.conn.flush()
                return
        log.debug("No request awaits %s from %d to %d; dropped", type(message).__name__,
                  message.src, message.dst)

    def _request(self, message: Message) -> None:
        address = self.peers.get(message.dst)
        if address is None:
            return
        kind = "fetch" if isinstance(message, (FetchRequest, FetchSnapshotRequest)) \
            else "control"
        channel = self._outgoing.get((message.dst, kind))
        if channel is None:
            channel = self._outgoing[(message.dst, kind)] = _Outgoing(message.dst)
        now = time.monotonic()
        if channel.writer is not None:
            oldest = min((sent for *_, sent in channel.in_flight.values()), default=now)
            if now - oldest < self.request_timeout:
                self._write_request(channel, message)
                return
            log.debug("Request to %d unanswered for %.0f ms; reconnecting", message.dst,
                      (now - oldest) * 1000)
            self._disconnect(channel)
        if channel.connect_task is not None:
            if len(channel.queued) < _MAX_QUEUED:
                channel.queued.append(message)
            return
        if now < channel.backoff_until:
            return  # dropped: the peer is unreachable and Raft will resend
        channel.queued.append(message)
        channel.connect_task = asyncio.get_running_loop().create_task(
            self._connect(channel, address))

    async def _connect(self, channel: _Outgoing, address: tuple[str, int]) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                *address, ssl=self.ssl_client,
                server_hostname=address[0] if self.ssl_client else None), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            channel.failures += 1
            delay = min(self.reconnect_backoff * (1 << min(channel.failures - 1, 16)),
                        self.reconnect_backoff_max)
            channel.backoff_until = time.monotonic() + delay
            channel.queued.clear()
            channel.connect_task = None
            log.debug("Cannot connect to %d at %s: %s; retry in %.0f ms", channel.peer_id,
                      address, exc, delay * 1000)
            return
        channel.connect_task = None
        if self._closed:
            writer.close()
            return
        channel.failures = 0
        channel.writer = writer
        channel.reader_task = asyncio.get_running_loop().create_task(
            self._read_responses(channel, reader, writer))
        queued, channel.queued = channel.queued, []
        for message in queued:
            self._write_request(channel, message)

    def _write_request(self, channel: _Outgoing, message: Message) -> None:
        writer = channel.writer
        assert writer is not None
        api_key = api_key_of(message)
        version = self.versions[api_key]
        channel.next_correlation_id = (channel.next_correlation_id + 1) & 0x7FFFFFFF
        correlation_id = channel.next_correlation_id
        frame = request_frame(message, version, correlation_id, cluster_id=self.cluster_id)
        channel.in_flight[correlation_id] = (message, api_key, version, time.monotonic())
        writer.write(frame)
        self.counters.requests += 1
        self.counters.outgoing_bytes += len(frame)

    async def _read_responses(self, channel: _Outgoing, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                frame = await _read_frame(reader)
                if frame is None:
                    return
                self.counters.responses += 1
                self.counters.incoming_bytes += _SIZE.size + len(frame)
                (correlation_id,) = _SIZE.unpack_from(frame)
                entry = channel.in_flight.pop(correlation_id, None)
                if entry is None:
                    log.warning("Response from %d with unknown correlation id %d",
                                channel.peer_id, correlation_id)
                    return
                request, api_key, version, _sent = entry
                _cid, body = parse_response_frame(api_key, version, frame)
                if body.error_code == ErrorCode.cluster_authorization_failed \
                        and not channel.refused:
                    channel.refused = True
                    log.error("Controller %d refuses this node's requests as not authorized: "
                              "with an authorizer, the nodes' principal on the controller "
                              "listener needs CLUSTER_ACTION on the cluster (super.users)",
                              channel.peer_id)
                self._deliver(response_from_wire(api_key, body, request))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken stream or an undecodable response
            log.debug("Connection to %d failed: %r", channel.peer_id, exc)
        finally:
            if channel.writer is writer:
                self._disconnect(channel)

    def _disconnect(self, channel: _Outgoing) -> None:
        writer, channel.writer = channel.writer, None
        channel.in_flight.clear()
        task, channel.reader_task = channel.reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if writer is not None:
            writer.close()

    def _deliver(self, message: Message) -> None:
        if self.handler is None or self._closed:
            return
        try:
            self.handler(message)
        except Exception:
            log.exception("Handler failed on %s", type(message).__name__)

    # -- serving ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        caller = ANONYMOUS_CALLER
        if self.identify is not None:
            identified = self.identify(writer)
            if identified is None:
                writer.close()
                return
            caller = identified
        conn = _Incoming(writer, asyncio.current_task(), caller)
        self._incoming.add(conn)
        try:
            while not conn.closed:
                frame = await _read_frame(reader)
                if frame is None:
                    return
                if not self._on_request(conn, frame):
                    return
                if len(conn.slots) > _MAX_SLOTS:
                    log.warning("Too many unanswered requests on one connection; closing")
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("Incoming connection failed: %r", exc)
        finally:
            self._close_incoming(conn)

    def _close_incoming(self, conn: _Incoming) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._incoming.discard(conn)
        for slot in conn.slots:
            if slot.request is not None:
                waiting = self._awaiting.get(slot.request.src)
                if waiting is not None and slot in waiting:
                    waiting.remove(slot)
        conn.slots.clear()
        conn.writer.close()

    def _answer_now(self, conn: _Incoming, correlation_id: int, frame: bytes) -> None:
        slot = _Slot(conn, -1, -1, correlation_id, None, frame)
        conn.slots.append(slot)
        conn.flush()

    def _on_request(self, conn: _Incoming, frame: bytes) -> bool:
        """Handle one request frame; False closes the connection."""
        api_key, version, correlation_id = parse_header_prefix(frame)
        if api_key == ApiKey.API_VERSIONS:
            self._answer_now(conn, correlation_id, self._api_versions(version, correlation_id))
            return True
        if api_key in self.services:
            return self._serve_service(conn, api_key, version, correlation_id, frame)
        if api_key not in SUPPORTED_VERSIONS:
            log.warning("Unsupported api %d on the controller quorum port", api_key)
            return False
        low, high = SUPPORTED_VERSIONS[api_key]
        if not low <= version <= high:
            log.warning("Unsupported version %d of api %d", version, api_key)
            return False
        header = parse_header(frame, is_flexible_request(api_key, version))
        body = decode_request(api_key, version, frame, header.size)
        if self.gate is not None and not self.gate(conn.caller,
                                                   api_key != ApiKey.DESCRIBE_QUORUM):
            if not conn.refused:
                conn.refused = True
                log.warning("Refusing api %d from %s (/%s) on the controller listener: not "
                            "authorized (it needs %s on the cluster)", api_key,
                            conn.caller.principal, conn.caller.host,
                            "DESCRIBE" if api_key == ApiKey.DESCRIBE_QUORUM
                            else "CLUSTER_ACTION")
            error = error_response(api_key, version, ErrorCode.cluster_authorization_failed)
            self._answer_now(conn, correlation_id, encode_response(correlation_id, error))
            return True
        if api_key == ApiKey.DESCRIBE_QUORUM:
            if self.describe_quorum is None:
                return False
            response = quorum_info_to_wire(self.describe_quorum(), version)
            self._answer_now(conn, correlation_id, encode_response(correlation_id, response))
            return True
        cluster_id = request_cluster_id(body)
        if self.cluster_id is not None and cluster_id is not None \
                and cluster_id != self.cluster_id:
            error = error_response(api_key, version, ErrorCode.inconsistent_cluster_id)
            self._answer_now(conn, correlation_id, encode_response(correlation_id, error))
            return True
        try:
            message = request_from_wire(api_key, body, dst=self.node_id,
                                        src=node_id_from_client_id(header.client_id))
        except UnsupportedRequest:
            error = error_response(api_key, version, ErrorCode.unsupported_version)
            self._answer_now(conn, correlation_id, encode_response(correlation_id, error))
            return True
        slot = _Slot(conn, api_key, version, correlation_id, message)
        conn.slots.append(slot)
        self._awaiting[message.src].append(slot)
        self._deliver(message)
        return True

    def _serve_service(self, conn: _Incoming, api_key: int, version: int, correlation_id: int,
                       frame: bytes) -> bool:
        low, high, serve = self.services[api_key]
        if not low <= version <= high:
            log.warning("Unsupported version %d of api %d", version, api_key)
            return False
        slot = _Slot(conn, api_key, version, correlation_id, None)
        conn.slots.append(slot)

        def done(task: asyncio.Task[bytes]) -> None:
            if task.cancelled() or task.exception() is not None:
                error = None if task.cancelled() else task.exception()
                if isinstance(error, MalformedRequest):
                    log.warning("Closing a connection from /%s to the controller listener: %s",
                                conn.caller.host, error)
                elif error is not None:
                    log.error("Serving api %d failed", api_key, exc_info=error)
                self._close_incoming(conn)
                return
            slot.frame = task.result()
            conn.flush()

        task = asyncio.get_running_loop().create_task(serve(frame, conn.caller))
        self._service_tasks.add(task)
        task.add_done_callback(self._service_tasks.discard)
        task.add_done_callback(done)
        return True

    def _api_versions(self, version: int, correlation_id: int) -> bytes:
        keys = [{"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())]
        keys += [{"api_key": key, "min_version": low, "max_version": high}
                 for key, (low, high, _) in sorted(self.services.items())]
        keys.append({"api_key": ApiKey.API_VERSIONS, "min_version": 0,
                     "max_version": _API_VERSIONS_MAX})
        keys.sort(key=lambda k: k["api_key"])
        error = ErrorCode.none
        if version > _API_VERSIONS_MAX:
            version, error = 0, ErrorCode.unsupported_version
        body: Any = build(response_class(ApiKey.API_VERSIONS, version),
                          {"error_code": error, "api_keys": keys, "throttle_time": 0})
        return encode_response(correlation_id, body, header_v0=True)


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One frame without its size prefix; None at a clean end of stream."""
    try:
        prefix = await reader.readexactly(_SIZE.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    (size,) = _SIZE.unpack(prefix)
    if not 0 < size <= _MAX_FRAME:
        raise ValueError(f"frame size {size}")
    return await reader.readexactly(size)
