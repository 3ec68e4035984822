"""What every workload test does around its schedule: progress lines, running the workload
through the schedule, waiting for the cluster to recover after the faults are healed, and
the verdict with the history written."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from e2e.chaos.checker import Anomaly
from e2e.chaos.faults import Faults
from e2e.chaos.schedule import Schedule, replay_command
from e2e.support import wait_until
from moldau.cluster.launcher import ClusterStartError, LocalCluster
from moldau.cluster.probe import ProbeError

RECOVERY_TIMEOUT = 120.0


def say(text: str) -> None:
    """A timestamped progress line (pytest -s shows them; a failure's report keeps them)."""
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def wait_for_full_isrs(cluster: LocalCluster) -> None:
    """Wait until every partition has its full ISR and a leader, naming the ones that
    do not on a timeout."""
    lagging: list[str] = []

    def healed() -> bool:
        try:
            view = cluster.metadata()
        except ProbeError as exc:
            lagging[:] = [str(exc)]
            return False
        lagging[:] = [str(p) for p in (*view.under_replicated, *view.offline)]
        return not lagging

    try:
        wait_until(healed, RECOVERY_TIMEOUT, "full ISRs after healing")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still lagging: {', '.join(lagging)}") from None


def recover(cluster: LocalCluster, acknowledged: Callable[[], int], more: int) -> str | None:
    """Wait until every node is registered, every ISR is full and the workload has `more`
    acknowledgements again; None when that happened, else what did not (the history is
    still checked: the cluster may serve while an ISR stays short)."""
    try:
        cluster.wait_ready(RECOVERY_TIMEOUT)
        wait_for_full_isrs(cluster)
        before = acknowledged()
        wait_until(lambda: acknowledged() >= before + more, RECOVERY_TIMEOUT,
                   "acknowledgements after healing")
    except (AssertionError, ClusterStartError) as exc:
        say(f"not recovered: {exc}")
        return str(exc)
    return None


def write_history(path: Path, **content: object) -> Path:
    path.write_text(json.dumps(content, indent=1, default=str))
    return path


def run_schedule(schedule: Schedule, faults: Faults, topic: str, partitions: int) -> None:
    """Run the schedule's faults against `topic`'s leaders; heal whatever is left active."""
    try:
        schedule.run(faults, topic, partitions)
    finally:
        faults.heal_all()
    say("healed; waiting for the cluster to recover")


def verdict(seed: int, test_file: str, anomalies: list[Anomaly], unrecovered: str | None,
            history_path: Path) -> None:
    """Fail the schedule on any anomaly, or when the cluster did not recover."""
    assert not anomalies and unrecovered is None, (
        f"{len(anomalies)} anomalies in schedule {seed} (history: {history_path}):\n"
        + "\n".join(map(str, anomalies[:20]))
        + (f"\nthe cluster did not recover: {unrecovered}" if unrecovered else "")
        + f"\nreplay with: {replay_command(seed, test_file)}")


class Workload(Protocol):
    topic: str
    partitions: int

    def start(self) -> object: ...

    def stop(self) -> None: ...


def under_schedule(schedule: Schedule, cluster: LocalCluster, faults: Faults,
                   workload: Workload, progress: Callable[[], int], first: int, more: int,
                   what: str, first_timeout: float = 60.0) -> str | None:
    """Start the workload, wait for `first` units of `progress` (`what`), run the schedule
    against its topic, then recover() with `more`; the clients are stopped whatever
    happens. Returns what did not recover, or None."""
    workload.start()
    try:
        wait_until(lambda: progress() >= first, first_timeout, what)
        run_schedule(schedule, faults, workload.topic, workload.partitions)
        return recover(cluster, progress, more)
    finally:
        say("stopping the clients")
        workload.stop()


def conclude(path: Path, test_file: str, seed: int, schedule: Schedule, faults: Faults,
             anomalies: list[Anomaly], unrecovered: str | None, summary: str,
             **content: object) -> None:
    """Write the history (with the schedule, the faults as they struck and the anomalies),
    print the summary line and give the verdict."""
    history_path = write_history(
        path, seed=seed, schedule=schedule.describe(),
        faults=[str(event) for event in faults.events],
        anomalies=[str(a) for a in anomalies], unrecovered=unrecovered, **content)
    say(summary)
    verdict(seed, test_file, anomalies, unrecovered, history_path)
