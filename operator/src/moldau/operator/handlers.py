"""kopf handlers of KafkaCluster: create, update, resume and a timer all run one reconcile
(reconcile.py), one at a time per cluster, through the cluster's admin client that its Topic
resources share (topic_handlers.py); the status is patched only when it changed, so a
settled cluster writes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import kopf
from lightkube import AsyncClient

from moldau.operator.certificates import FORCE_RENEW
from moldau.operator.conditions import status_changed
from moldau.operator.metrics import RECONCILE_ERRORS, RECONCILE_SECONDS, RECONCILES
from moldau.operator.reconcile import reconcile
from moldau.operator.resource import FIELD_MANAGER, FINALIZER, GROUP, PLURAL, VERSION
from moldau.operator.restarts import MANUAL_ROLLING_UPDATE
from moldau.operator.topic_handlers import CLUSTER_CLIENTS, managed_topics

RESYNC_SECONDS = 10.0
# Kopf keeps its own bookkeeping in annotations under our prefix, never in the status.
ANNOTATION_PREFIX = "operator.moldau.io"

_locks: dict[tuple[str, str], asyncio.Lock] = {}
_client: AsyncClient | None = None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _client
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX)
    # Only Topic resources get one (their deletion handler): it names what holds them.
    settings.persistence.finalizer = FINALIZER
    # Reconnect watches regularly, so an API server that went away is noticed.
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    _client = AsyncClient(field_manager=FIELD_MANAGER)


# The API client is not closed at cleanup: a timer still finishing would fail on it, and the
# process ends right after.


async def _run(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
               topic_claims: kopf.Index) -> None:
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        assert _client is not None
        started = time.monotonic()

        def report(reason: str, message: str, warning: bool) -> None:
            kopf.event(body, type="Warning" if warning else "Normal", reason=reason,
                       message=message)

        try:
            outcome = await reconcile(
                _client, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"],
                generation=meta.get("generation", 0), spec=body.get("spec") or {},
                previous=body.get("status") or {}, report=report, clients=CLUSTER_CLIENTS,
                managed_topics=managed_topics(topic_claims, meta["namespace"], meta["name"]),
                annotations=meta.get("annotations"))
        except Exception as exc:
            RECONCILES.labels("error").inc()
            RECONCILE_ERRORS.labels(type(exc).__name__).inc()
            logger.exception("reconcile of %s/%s failed", *key)
            raise kopf.TemporaryError(f"reconcile failed: {exc}", delay=RESYNC_SECONDS) from exc
        finally:
            RECONCILE_SECONDS.observe(time.monotonic() - started)
        RECONCILES.labels("ready" if outcome.ready else "not_ready").inc()
        if not outcome.ready and outcome.reason in ("InvalidSpec", "ApplyFailed"):
            RECONCILE_ERRORS.labels(outcome.reason).inc()
        if outcome.clear_manual:
            # The pods carry it now (and lose it as they restart).
            patch.meta.annotations[MANUAL_ROLLING_UPDATE] = None
        if outcome.clear_force_renew:
            patch.meta.annotations[FORCE_RENEW] = None
        old = body.get("status") or {}
        if status_changed(outcome.status, old):
            if outcome.reason in ("InvalidSpec", "ApplyFailed") and \
                    old.get("observedGeneration") != outcome.status["observedGeneration"]:
                ready = outcome.status["conditions"][0]
                report(outcome.reason, ready["message"], True)
            patch.status.update(outcome.status)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def on_change(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
                    topic_claims: kopf.Index, **_: Any) -> None:
    await _run(body, patch, logger, topic_claims)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def resync(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
                 topic_claims: kopf.Index, **_: Any) -> None:
    await _run(body, patch, logger, topic_claims)


def _timers_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """kopf puts a finalizer on every object with a timer, to stop the timer before the
    object goes; an operator uninstalled first would leave every KafkaCluster undeletable.
    Our timer holds nothing to clean up (a deleted object's timer just stops), so it needs
    none. kopf has no option for this: the registered handler is replaced (kopf is pinned)."""
    spawning = registry._spawning  # noqa: SLF001
    spawning._handlers = [  # noqa: SLF001
        dataclasses.replace(handler, requires_finalizer=False) for handler in spawning._handlers]


_timers_without_finalizer(kopf.get_default_registry())
