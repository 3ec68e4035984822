"""Liveness and readiness decisions: the event-loop lag monitor on a real loop, and the
readiness reason each start-up stage and node role gives."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from moldau.broker.metrics import health
from moldau.broker.metrics.health import LoopLagMonitor, not_ready_reason


def test_a_loop_that_answers_in_time_is_live() -> None:
    async def run() -> str | None:
        monitor = LoopLagMonitor()
        monitor.start()
        await asyncio.sleep(health.LAG_CHECK_INTERVAL_S * 2.5)
        await monitor.stop()
        return monitor.problem()

    assert asyncio.run(run()) is None


def test_a_loop_held_past_the_bound_is_not_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "LIVENESS_BOUND_S", 0.3)

    async def run() -> tuple[str | None, float]:
        monitor = LoopLagMonitor()
        monitor.start()
        await asyncio.sleep(0)
        time.sleep(health.LAG_CHECK_INTERVAL_S + 0.6)  # one step holding the loop
        await asyncio.sleep(0.05)  # the late timer runs
        problem = monitor.problem()
        await monitor.stop()
        return problem, monitor.max_lag_s

    problem, max_lag = asyncio.run(run())
    assert problem is not None and problem.startswith("event loop answered "), problem
    assert max_lag >= 0.5


def test_a_loop_silent_past_the_bound_is_not_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = LoopLagMonitor()
    monitor.last_tick = time.monotonic() - health.LIVENESS_BOUND_S - 1
    problem = monitor.problem()
    assert problem is not None and problem.startswith("event loop has not run its lag check")


def node(*, stage: str = "", roles: str = "broker", fenced: bool = False,
         leader: int | None = 1, applied: int = 10, high_watermark: int = 10):
    """The parts of a Broker that readiness reads."""
    driver = SimpleNamespace(applied_offset=applied, high_watermark=high_watermark)
    return SimpleNamespace(
        stage=stage, config=SimpleNamespace(is_broker="broker" in roles),
        lifecycle=SimpleNamespace(fenced=fenced),
        quorum=SimpleNamespace(driver=driver, leader_id=leader))


@pytest.mark.parametrize(("state", "reason"), [
    (node(stage="waiting for the controller quorum"), "waiting for the controller quorum"),
    (node(stage="loading logs", fenced=True), "loading logs"),
    (node(fenced=True), "broker is fenced by the controller"),
    (node(), None),
    (node(roles="broker,controller"), None),
    (node(roles="controller", leader=None), "no controller quorum leader known"),
    (node(roles="controller", applied=7, high_watermark=10),
     "metadata applied up to 7, quorum high watermark 10"),
    (node(roles="controller"), None),
], ids=["start-up stage", "stage before fencing", "fenced", "broker ready", "combined ready",
        "controller without leader", "controller behind", "controller ready"])
def test_readiness_reasons(state, reason: str | None) -> None:
    assert not_ready_reason(state) == reason
