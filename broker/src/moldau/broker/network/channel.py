"""The bounded queue between connections and request handlers (Kafka's RequestChannel).

A connection puts one request and waits for its response before reading the next one, so
responses leave in request order. When `queued.max.requests` requests are waiting, `put`
blocks and the connections stop reading from their sockets: back-pressure, never drops.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moldau.broker.metrics.stats import RequestStats
from moldau.broker.network.response import Response
from moldau.protocol.messages import RequestHeader

if TYPE_CHECKING:
    from moldau.broker.network.connection import Connection


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: Any
    connection: Connection
    received_at: float
    response: asyncio.Future[Response | None] = field(repr=False)
    # A second RequestMetrics name a handler files the request under as well as its API's
    # (Kafka's FetchConsumer or FetchFollower).
    metric_name: str | None = None

    @property
    def client_address(self) -> str:
        return self.connection.peer

    @property
    def host(self) -> str:
        """The client's address as ACL hosts name it (`127.0.0.1`)."""
        return self.connection.host

    @property
    def listener(self) -> str:
        return self.connection.listener

    @property
    def principal(self) -> str:
        """`User:<name>` of the authenticated client, `User:ANONYMOUS` when none."""
        return self.connection.principal


class RequestChannel:
    def __init__(self, max_queued: int) -> None:
        self._queue: asyncio.Queue[Request] = asyncio.Queue(maxsize=max_queued)
        self.stats = RequestStats()

    async def put(self, request: Request) -> None:
        await self._queue.put(request)

    async def get(self) -> Request:
        return await self._queue.get()

    def qsize(self) -> int:
        return self._queue.qsize()
