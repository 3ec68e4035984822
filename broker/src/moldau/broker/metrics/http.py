"""The broker's HTTP listener (http.listener): GET /metrics, /livez and /readyz, served by
aiohttp on the broker's own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from moldau.broker.metrics.broker_collector import BrokerCollector
from moldau.broker.metrics.end_offsets import RemoteEndOffsets
from moldau.broker.metrics.health import not_ready_reason
from moldau.broker.metrics.lag_collector import LagCollector, committed_partitions
from moldau.broker.metrics.moldau_collector import MoldauCollector
from moldau.broker.metrics.quorum_collector import QuorumCollector

if TYPE_CHECKING:
    from moldau.broker.server import Broker


class _Collected:
    """Metrics already collected, in the shape the encoders read from a registry."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def broker_registry(broker: Broker, remote_ends: RemoteEndOffsets) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)  # process_open_fds, CPU, memory
    for collector in (BrokerCollector(broker), LagCollector(broker, remote_ends),
                      MoldauCollector(broker)):
        registry.register(collector)
    return registry


def remote_end_offsets(broker: Broker) -> RemoteEndOffsets:
    """End offsets of the partitions this coordinator's groups committed, from their
    leaders; asked only once the broker has started (before, no group is loaded)."""
    return RemoteEndOffsets(
        broker.node_id, image=lambda: broker.image if broker.started else None,
        wanted=lambda: committed_partitions(broker),
        endpoint=lambda leader: broker.replicas.leader_endpoint(leader))


class HttpEndpoint:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.remote_ends = remote_end_offsets(broker)
        self.registry = broker_registry(broker, self.remote_ends)
        self._quorum_registered = False
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host or "0.0.0.0"
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host or None, self.port, reuse_address=True)
        await site.start()
        if self.port == 0 and self._runner.addresses:
            self.port = self._runner.addresses[0][1]  # the port the OS chose
        if self.broker.config.is_broker:
            self.remote_ends.start()

    def quorum_started(self) -> None:
        """The controller and Raft metrics exist from here on."""
        if not self._quorum_registered:
            self.registry.register(QuorumCollector(self.broker.quorum, self.broker.controller))
            self._quorum_registered = True

    async def stop(self) -> None:
        await self.remote_ends.stop()
        await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Read the broker's state on the loop, where it changes; text encoding is most of a
        # scrape's cost (~170 ms for 1,000 partitions), so a thread does it while the loop
        # keeps serving requests between the interpreter's thread switches.
        collected = _Collected(list(self.registry.collect()))
        body = await asyncio.to_thread(encoder, collected)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _livez(self, _request: web.Request) -> web.Response:
        problem = self.broker.loop_lag.problem()
        if problem is not None:
            return web.Response(status=503, text=f"not live: {problem}\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        reason = not_ready_reason(self.broker)
        if reason is not None:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text="ok\n")
