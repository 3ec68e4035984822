"""The operator's own metrics (reconcile counts, durations, errors, topic batches) and the
small HTTP server that serves them on /metrics, next to the /healthz liveness answer."""

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
TOPIC_RECONCILES = Counter("moldau_operator_topic_reconciles",
                           "Topic resource reconciles, by outcome", ["outcome"],
                           registry=REGISTRY)
TOPIC_RECONCILE_SECONDS = Histogram("moldau_operator_topic_reconcile_duration_seconds",
                                    "Time one Topic resource waited for its reconcile "
                                    "(batched with others)", registry=REGISTRY)
TOPIC_BATCH_SIZE = Histogram("moldau_operator_topic_batch_size",
                             "Topic resources reconciled together in one batch",
                             buckets=(1, 5, 10, 50, 100, 250, 500, 1000), registry=REGISTRY)
TOPIC_BATCH_SECONDS = Histogram("moldau_operator_topic_batch_duration_seconds",
                                "Time one batch of Topic resources took", registry=REGISTRY)
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
