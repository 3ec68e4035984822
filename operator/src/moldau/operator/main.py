"""Run the operator: kopf's event loop for the KafkaCluster, Topic and KafkaUser handlers,
and the HTTP server of /metrics and /healthz beside it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time

import kopf
from aiohttp import web

from moldau.operator.metrics import http_app
from moldau.operator.resource import PEERING_NAME

log = logging.getLogger("moldau.operator")


async def _serve(port: int, operator: asyncio.Task[None]) -> web.AppRunner:
    runner = web.AppRunner(http_app(lambda: not operator.done()), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


# Microseconds since 1970 stay below this until the year 2262; the result fits an int64.
PRIORITY_CEILING_US = 2**63 // 1000


def peer_priority() -> int:
    """This replica's kopf peering priority: the replica that started first has the highest.
    kopf pauses every peer that shares a priority, and start times in microseconds do not
    repeat; a replacement pod joining later never takes over from the one at work."""
    return PRIORITY_CEILING_US - time.time_ns() // 1000


async def _main(namespaces: list[str], http_port: int, standalone: bool,
                topic_deletion_timeout: float) -> int:
    # The handlers register themselves with kopf on import.
    import moldau.operator.handlers  # noqa: F401
    import moldau.operator.user_handlers  # noqa: F401
    from moldau.operator.topic_handlers import configure_topics

    configure_topics(deletion_timeout=topic_deletion_timeout)

    stop = asyncio.Event()
    # A peering name makes kopf wait for its peering resources: only when peering is on.
    priority = peer_priority()
    operator = asyncio.create_task(kopf.operator(
        clusterwide=not namespaces, namespaces=namespaces, standalone=standalone,
        peering_name=None if standalone else PEERING_NAME, priority=priority,
        stop_flag=stop))
    try:
        runner = await _serve(http_port, operator)
    except OSError as exc:
        stop.set()
        with contextlib.suppress(Exception):
            await operator
        print(f"moldau operator: cannot serve on port {http_port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    where = ", ".join(namespaces) if namespaces else "every namespace"
    log.info("watching KafkaCluster, Topic and KafkaUser resources in %s; /metrics and /healthz on "
             "port %d", where, http_port)
    if not standalone:
        log.info("peering %r with priority %d", PEERING_NAME, priority)
    try:
        await operator
    finally:
        await runner.cleanup()
    return 0


def _kubernetes_config_problem() -> str | None:
    """Why no Kubernetes API can be reached (no kubeconfig, not in a pod), or None."""
    from lightkube import KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        KubeConfig.from_env()
    except (ConfigError, OSError, ValueError) as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def run(*, namespaces: list[str], http_port: int, standalone: bool, log_level: str,
        topic_deletion_timeout: float) -> int:
    problem = _kubernetes_config_problem()
    if problem:
        print(f"moldau operator: no Kubernetes configuration: {problem} (set KUBECONFIG, or "
              "run in a pod with a service account)", file=sys.stderr)
        return 1
    logging.basicConfig(level=getattr(logging, log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per API request is too much below DEBUG.
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        return asyncio.run(_main(namespaces, http_port, standalone, topic_deletion_timeout))
    except KeyboardInterrupt:
        return 0
