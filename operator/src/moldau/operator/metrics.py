"""The operator's own metrics (reconcile counts, durations, errors) and the small HTTP server
that serves them on /metrics, next to the /healthz liveness answer."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry()
RECONCILES = Counter("moldau_operator_reconciles", "KafkaCluster reconciles, by outcome",
                     ["outcome"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("moldau_operator_reconcile_duration_seconds",
                              "Time one KafkaCluster reconcile took", registry=REGISTRY)
RECONCILE_ERRORS = Counter("moldau_operator_reconcile_errors",
                           "Reconciles that failed, by reason", ["reason"], registry=REGISTRY)
APPLIED = Counter("moldau_operator_applied_objects",
                  "Objects sent to the API server with server-side apply, by kind", ["kind"],
                  registry=REGISTRY)


def http_app(alive: Callable[[], bool]) -> web.Application:
    """/metrics in Prometheus' text format; /healthz 200 while `alive()`, else 503."""

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        ok = alive()
        return web.Response(text="ok\n" if ok else "operator stopped\n",
                            status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
