"""Workers that take requests off the channel and run their handlers (Kafka's
KafkaRequestHandlerPool). A handler that must wait returns a Deferred, which completes on its
own so the worker moves on at once, as Kafka parks such requests in a purgatory."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from moldau.broker.handlers.registry import Deferred, Result
from moldau.broker.network.channel import Request, RequestChannel
from moldau.broker.network.connection import CloseConnection
from moldau.broker.network.response import Response

log = logging.getLogger("moldau.broker.handlers")


class RequestHandlerPool:
    def __init__(self, channel: RequestChannel, handle: Callable[[Request], Awaitable[Result]],
                 workers: int) -> None:
        self.channel = channel
        self.handle = handle
        self.workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._deferred: set[asyncio.Task[Response | None]] = set()
        self.started_at = time.monotonic()
        self.idle_s = 0.0  # all workers together, in waits that have ended
        self._waiting_since = [0.0] * workers  # per worker: when its current wait began

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._tasks = [asyncio.create_task(self._work(index), name=f"request-handler-{index}")
                       for index in range(self.workers)]

    async def _work(self, index: int) -> None:
        while True:
            waiting = self._waiting_since[index] = time.monotonic()
            request = await self.channel.get()
            self._waiting_since[index] = 0.0
            self.idle_s += time.monotonic() - waiting
            try:
                result = await self.handle(request)
            except asyncio.CancelledError:
                raise
            except CloseConnection as exc:
                _fail(request, exc)
                continue
            except Exception as exc:
                log.exception("Error handling %s from %s", request.header, request.client_address)
                _fail(request, exc)
                continue
            if isinstance(result, Deferred):
                task = asyncio.ensure_future(result.wait)
                self._deferred.add(task)
                task.add_done_callback(lambda done, req=request: self._complete(req, done))
            elif not request.response.done():
                request.response.set_result(result)

    def _complete(self, request: Request, task: asyncio.Task[Response | None]) -> None:
        self._deferred.discard(task)
        if request.response.done():
            return
        if task.cancelled():
            request.response.cancel()
        elif task.exception() is not None:
            log.error("Error completing %s", request.header, exc_info=task.exception())
            _fail(request, task.exception())
        else:
            request.response.set_result(task.result())

    def idle_fraction(self) -> float:
        """Share of the workers' time spent waiting since start (Kafka's
        RequestHandlerAvgIdlePercent mean rate), from 0 to 1."""
        if not self._tasks:
            return 1.0  # not started: no request has waited for a worker
        now = time.monotonic()
        elapsed = (now - self.started_at) * self.workers
        idle = self.idle_s + sum(now - since for since in self._waiting_since if since)
        return min(idle / elapsed, 1.0) if elapsed > 0 else 1.0

    async def stop(self) -> None:
        for task in [*self._tasks, *self._deferred]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._deferred, return_exceptions=True)


def _fail(request: Request, exc: BaseException | None) -> None:
    # The connection closes: Kafka would send a generic error response; closing tells the
    # client the same thing and it reconnects and retries.
    if not request.response.done():
        request.response.set_exception(exc or RuntimeError("handler failed"))
