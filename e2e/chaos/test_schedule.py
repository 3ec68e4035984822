"""Seeded schedules are reproducible, and --chaos-seed / CHAOS_SCHEDULES choose the seeds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e.chaos.schedule import KINDS, SESSION_TIMEOUT, Schedule, replay_command

ROOT = Path(__file__).resolve().parents[2]


def test_a_seed_fixes_the_schedule() -> None:
    assert Schedule.from_seed(7) == Schedule.from_seed(7)
    assert len({Schedule.from_seed(seed).steps for seed in range(20)}) == 20
    kinds = {step.kind for seed in range(50) for step in Schedule.from_seed(seed).steps}
    assert kinds == set(KINDS)


def test_pauses_outlast_the_session_timeout() -> None:
    pauses = [step for seed in range(100) for step in Schedule.from_seed(seed).steps
              if step.kind.startswith("pause")]
    assert pauses and all(step.duration > SESSION_TIMEOUT for step in pauses)


def collected(*args: str, **env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "e2e/chaos/test_chaos.py", *args], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, **env}, timeout=120)
    return [line.rpartition("[")[2].rstrip("]") for line in done.stdout.splitlines()
            if line.startswith("e2e/chaos/test_chaos.py::")]


def test_the_seeds_of_each_mode() -> None:
    env = {key: "" for key in ("CHAOS_SCHEDULES", "CHAOS_FIRST_SEED")}
    assert collected(**env) == ["seed1", "seed2"]
    assert collected("--chaos-seed", "42", **env) == ["seed42"]
    assert collected(CHAOS_SCHEDULES="3", CHAOS_FIRST_SEED="100") == [
        "seed100", "seed101", "seed102"]
    assert replay_command(42) == "pytest e2e/chaos/test_chaos.py --chaos-seed 42"


def test_overlapping_steps_hold_both_faults_long_enough() -> None:
    steps = [step for seed in range(100) for step in Schedule.from_seed(seed).steps]
    overlapping = [step for step in steps if step.also]
    assert 0.15 < len(overlapping) / len(steps) < 0.45
    assert {step.also for step in overlapping} == set(KINDS)
    for step in overlapping:
        assert 0 <= step.overlap_after <= step.duration / 2
        if step.also.startswith("pause"):
            assert step.duration - step.overlap_after > SESSION_TIMEOUT
