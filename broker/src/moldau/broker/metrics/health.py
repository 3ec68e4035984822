"""Liveness and readiness: an event-loop lag monitor and the broker's readiness reason."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moldau.broker.server import Broker

LAG_CHECK_INTERVAL_S = 0.5
# /livez fails when the loop answered a timer this late, or has not run one for this long.
LIVENESS_BOUND_S = 10.0


class LoopLagMonitor:
    """How late the event loop runs a timer: a loop busy with one long step answers late."""

    def __init__(self) -> None:
        self.lag_s = 0.0
        self.max_lag_s = 0.0
        self.last_tick = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_CHECK_INTERVAL_S)
            self.last_tick = time.monotonic()
            self.lag_s = max(self.last_tick - before - LAG_CHECK_INTERVAL_S, 0.0)
            self.max_lag_s = max(self.max_lag_s, self.lag_s)

    def problem(self) -> str | None:
        """Why the loop does not count as live, or None."""
        silent = time.monotonic() - self.last_tick
        if silent > LIVENESS_BOUND_S:
            return f"event loop has not run its lag check for {silent:.1f} s"
        if self.lag_s > LIVENESS_BOUND_S:
            return f"event loop answered {self.lag_s:.1f} s late"
        return None


def not_ready_reason(broker: Broker) -> str | None:
    """Why the node cannot serve yet, or None once it can: a broker once registered,
    unfenced and its logs loaded; a controller-only node once it caught up with the quorum."""
    if broker.stage:
        return broker.stage
    if broker.config.is_broker:
        if broker.lifecycle.fenced:
            return "broker is fenced by the controller"
        return None
    quorum = broker.quorum
    driver = quorum.driver
    if driver is None or quorum.leader_id is None:
        return "no controller quorum leader known"
    if driver.applied_offset < driver.high_watermark:
        return (f"metadata applied up to {driver.applied_offset}, quorum high watermark "
                f"{driver.high_watermark}")
    return None
