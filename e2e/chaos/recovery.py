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


def wait_for_agreement(cluster: LocalCluster, topic: str) -> None:
    """Wait until every node's own Metadata answer names the same leader and ISR for each of
    the topic's partitions. A deposed leader that has not yet applied the metadata that moved
    its partition still answers as leader, with its own, older high watermark (Kafka's
    brokers do too); a final read that asked it would find acknowledged records "lost"."""
    differing: list[str] = []

    def agreed() -> bool:
        views = {}
        try:
            for node in cluster.alive_nodes():
                view = cluster.metadata(ask=[node.node_id])
                views[node.node_id] = {(state.partition, state.leader, state.isr)
                                       for state in view.partitions if state.topic == topic}
        except ProbeError as exc:
            differing[:] = [str(exc)]
            return False
        answers = set(map(frozenset, views.values()))
        differing[:] = [f"node {node}: {sorted(answer)}" for node, answer in views.items()]
        return len(answers) == 1 and bool(next(iter(answers)))

    try:
        wait_until(agreed, RECOVERY_TIMEOUT, f"every node to agree on {topic}'s leaders")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; answers: {'; '.join(differing)}") from None


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
    happens, and then every node must agree on the topic's leaders before the final read
    (wait_for_agreement). Returns what did not recover, or None."""
    workload.start()
    try:
        wait_until(lambda: progress() >= first, first_timeout, what)
        run_schedule(schedule, faults, workload.topic, workload.partitions)
        unrecovered = recover(cluster, progress, more)
    finally:
        say("stopping the clients")
        workload.stop()
    try:
        wait_for_agreement(cluster, workload.topic)
    except AssertionError as exc:
        say(f"not recovered: {exc}")
        return f"{unrecovered}; {exc}" if unrecovered else str(exc)
    return unrecovered


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
