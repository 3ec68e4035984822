"""Listeners, the acceptor and connection limits (Kafka's SocketServer and ConnectionQuotas)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from collections.abc import Awaitable, Callable

from moldau.broker.config import BrokerConfig, Endpoint
from moldau.broker.network.channel import RequestChannel
from moldau.broker.network.connection import Connection, Decoder
from moldau.config import ConfigError

log = logging.getLogger("moldau.broker.network")


class SocketServer:
    def __init__(self, config: BrokerConfig, channel: RequestChannel, decode: Decoder,
                 ready: Callable[[], Awaitable[None]]) -> None:
        self.config = config
        self.channel = channel
        self.decode = decode
        self.ready = ready
        self._servers: list[asyncio.Server] = []
        self._connections: dict[asyncio.Task[None], Connection] = {}
        self._per_ip: Counter[str] = Counter()
        self.bound: list[Endpoint] = []

    async def start(self) -> list[Endpoint]:
        for endpoint in self.config.broker_listeners:
            protocol = self.config.protocol_of(endpoint.listener)
            if protocol != "PLAINTEXT":
                raise ConfigError(f"Invalid value {endpoint} for configuration listeners: "
                                  f"security protocol {protocol} is not served yet")
            server = await asyncio.start_server(
                lambda r, w, e=endpoint: self._accept(r, w, e.listener),
                host=endpoint.host or None, port=endpoint.port, reuse_address=True,
                backlog=1024)
            port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
            self.bound.append(Endpoint(endpoint.listener, endpoint.host, port))
        return self.bound

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
        self._per_ip[ip] += 1
        connection = Connection(
            reader, writer, listener=listener, peer=f"{ip}:{peername[1]}",
            channel=self.channel, decode=self.decode, ready=self.ready,
            max_request_bytes=self.config["socket.request.max.bytes"],
            idle_timeout_s=self.config["connections.max.idle.ms"] / 1000)
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = connection
        try:
            await connection.serve()
        finally:
            self._connections.pop(task, None)
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]

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
