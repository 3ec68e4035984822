"""Listeners, the acceptor and connection limits (Kafka's SocketServer and ConnectionQuotas)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from moldau.broker.config import BrokerConfig, Endpoint
from moldau.broker.network.channel import RequestChannel
from moldau.broker.network.connection import Connection, Decoder
from moldau.broker.network.tls_alerts import install as send_tls_alerts
from moldau.broker.security.audit import AuthenticationLog
from moldau.broker.security.principal import NoMatchingRule, PrincipalMapper
from moldau.broker.security.sasl import CredentialLookup, SaslSession, sasl_sessions
from moldau.broker.security.settings import SASL_PROTOCOLS, TLS_PROTOCOLS

if TYPE_CHECKING:
    from moldau.broker.security.tls import ListenerTls

log = logging.getLogger("moldau.broker.network")

# A client that connects to a TLS listener and does not finish the handshake in this time
# is dropped, so idle half-open sockets cannot pile up.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class SocketServer:
    def __init__(self, config: BrokerConfig, channel: RequestChannel, decode: Decoder,
                 ready: Callable[[], Awaitable[None]],
                 credentials: CredentialLookup = lambda user, mechanism: None) -> None:
        self.config = config
        self.channel = channel
        self.decode = decode
        self.ready = ready
        self.credentials = credentials
        self._servers: list[asyncio.Server] = []
        self._connections: dict[asyncio.Task[None], Connection] = {}
        self._per_ip: Counter[str] = Counter()
        self.bound: list[Endpoint] = []
        self._tls: dict[str, tuple[ListenerTls, PrincipalMapper]] = {}
        self._sasl: dict[str, Callable[[], SaslSession]] = {}
        self.auth_log = AuthenticationLog()

    async def start(self) -> list[Endpoint]:
        # A refused handshake tells the client why (every asyncio TLS connection of the
        # process: these listeners, the controller listener, the broker's own connections).
        send_tls_alerts()
        for endpoint in self.config.broker_listeners:
            protocol = self.config.protocol_of(endpoint.listener)
            if protocol in TLS_PROTOCOLS:
                self._tls[endpoint.listener] = self._listener_tls(endpoint.listener)
            if protocol in SASL_PROTOCOLS:
                self._sasl[endpoint.listener] = sasl_sessions(self.config, endpoint.listener,
                                                              self.credentials)
            server = await asyncio.start_server(
                lambda r, w, e=endpoint: self._accept(r, w, e.listener),
                host=endpoint.host or None, port=endpoint.port, reuse_address=True,
                backlog=1024)
            port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
            self.bound.append(Endpoint(endpoint.listener, endpoint.host, port))
        return self.bound

    def _listener_tls(self, listener: str) -> tuple[ListenerTls, PrincipalMapper]:
        from moldau.broker.security.tls import ListenerTls  # cryptography: only for TLS

        config = self.config

        def setting(key: str) -> object:
            return config.listener_setting(listener, key)

        def name(key: str) -> str:
            return config.setting_name(listener, key)

        rules_key = "ssl.principal.mapping.rules"
        return (ListenerTls(listener, setting, name),
                PrincipalMapper(setting(rules_key), name(rules_key)))

    async def _start_tls(self, writer: asyncio.StreamWriter, listener: str,
                         peer: str) -> str | None:
        """The TLS handshake; the client's principal, or None when it failed (logged)."""
        tls, mapper = self._tls[listener]
        try:
            async with asyncio.timeout(TLS_HANDSHAKE_TIMEOUT_S):
                await writer.start_tls(tls.context())
            ssl_object = writer.get_extra_info("ssl_object")
            principal = mapper.principal_of_certificate(ssl_object.getpeercert(True))
        except (ConnectionError, ssl.SSLEOFError) as exc:
            # The client went away during the handshake: a disconnect, as Kafka's SSL
            # transport layer takes it, not a failed authentication.
            log.debug("Connection from %s on listener %s closed during the TLS handshake "
                      "(%s)", peer, listener, type(exc).__name__)
            writer.close()
            return None
        except (ssl.SSLError, TimeoutError, NoMatchingRule, OSError) as exc:
            reason = (getattr(exc, "verify_message", None) or getattr(exc, "reason", None)
                      or str(exc) or type(exc).__name__)
            if isinstance(exc, TimeoutError):
                reason = f"no handshake within {TLS_HANDSHAKE_TIMEOUT_S:.0f} s"
            self.auth_log.failure(listener, peer, f"SSL handshake failed: {reason}")
            writer.close()
            return None
        if listener not in self._sasl:
            self.auth_log.success(listener)
        return principal

    def _limit_for(self, ip: str) -> int:
        return self.config.per_ip_overrides.get(ip, self.config["max.connections.per.ip"])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      listener: str) -> None:
        peername = writer.get_extra_info("peername") or ("?", 0)
        ip = peername[0]
        if (self._per_ip[ip] >= self._limit_for(ip)
                or len(self._connections) >= self.config["max.connections"]):
            log.warning("Rejecting connection from %s: max.connections.per.ip (%d) or "
                        "max.connections reached", ip, self._limit_for(ip))
            writer.close()
            return
        self._tune(writer.get_extra_info("socket"))
        peer = f"{ip}:{peername[1]}"
        self._per_ip[ip] += 1  # a handshake in progress counts against the limits too
        try:
            await self._serve(reader, writer, listener, peer)
        finally:
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     listener: str, peer: str) -> None:
        connection = Connection(
            reader, writer, listener=listener, peer=peer,
            channel=self.channel, decode=self.decode, ready=self.ready,
            max_request_bytes=self.config["socket.request.max.bytes"],
            idle_timeout_s=self.config["connections.max.idle.ms"] / 1000,
            auth_log=self.auth_log)
        if listener in self._sasl:
            connection.sasl = self._sasl[listener]()
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = connection
        try:
            if listener in self._tls:
                principal = await self._start_tls(writer, listener, peer)
                if principal is None:
                    return
                connection.principal = principal
            await connection.serve()
        finally:
            self._connections.pop(task, None)

    def _tune(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, name in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                             (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
            if self.config[name] > 0:
                sock.setsockopt(socket.SOL_SOCKET, option, self.config[name])

    def listener_of_connections(self) -> list[str]:
        """The listener of each open connection (for the connection-count metric)."""
        return [connection.listener for connection in self._connections.values()]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def stop(self) -> None:
        """Stop accepting, then close every connection (in-flight handlers finish on their own)."""
        for server in self._servers:
            server.close()
        for task, connection in list(self._connections.items()):
            connection.close()
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
