"""Jepsen's Kafka queue workload under a seeded fault schedule on a 3-node cluster in
network namespaces; every history is checked and the replicas' segment files compared.

A failing schedule names the command that replays it: the seed fixes the faults, their
targets and their timings (not the exact interleaving with the clients)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from e2e.chaos.checker import check, replica_divergence, summary
from e2e.chaos.clocks import NodeClocks
from e2e.chaos.disks import NodeDisk
from e2e.chaos.faults import Faults
from e2e.chaos.net import TestNetwork
from e2e.chaos.schedule import Schedule, replay_command
from e2e.chaos.workload import QueueWorkload
from e2e.support import wait_until
from moldau.cluster.launcher import ClusterStartError, LocalCluster
from moldau.cluster.probe import ProbeError

pytestmark = pytest.mark.chaos
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


def recover(cluster: LocalCluster, workload: QueueWorkload) -> str | None:
    """Wait until every node is registered, every ISR is full and the producers are
    acknowledged again; None when that happened, else what did not (the history is still
    checked: the cluster may serve while an ISR stays short)."""
    try:
        cluster.wait_ready(RECOVERY_TIMEOUT)
        wait_for_full_isrs(cluster)
        before = workload.acknowledged()
        wait_until(lambda: workload.acknowledged() >= before + 100, RECOVERY_TIMEOUT,
                   "acknowledgements after healing")
    except (AssertionError, ClusterStartError) as exc:
        say(f"not recovered: {exc}")
        return str(exc)
    return None


def test_queue_under_faults(chaos_seed: int, chaos_cluster: LocalCluster,
                            chaos_net: TestNetwork, chaos_disks: dict[int, NodeDisk],
                            chaos_clocks: NodeClocks, tmp_path: Path) -> None:
    schedule = Schedule.from_seed(chaos_seed)
    say(schedule.describe())
    faults = Faults(chaos_cluster, chaos_net, disks=chaos_disks, clocks=chaos_clocks)
    workload = QueueWorkload(chaos_cluster.bootstrap_servers, f"queue-{chaos_seed}")
    workload.create_topic()
    workload.start()
    try:
        wait_until(lambda: workload.acknowledged() >= 100, 60, "the first acknowledgements")
        try:
            schedule.run(faults, workload.topic, workload.partitions)
        finally:
            faults.heal_all()
        say("healed; waiting for the cluster to recover")
        unrecovered = recover(chaos_cluster, workload)
    finally:
        say("stopping the clients")
        workload.stop()
    say("final read")
    high_watermarks = workload.final_read()
    anomalies = check(workload.history)
    say("stopping the cluster to compare the replicas")
    chaos_cluster.stop(timeout=30)
    if unrecovered is None:  # replicas out of the ISR may lag: compare only full ISRs
        anomalies += replica_divergence(workload.history,
                                        workload.stored_replicas(chaos_cluster),
                                        high_watermarks)
    history_path = tmp_path / "history.json"
    history_path.write_text(json.dumps({
        "seed": chaos_seed, "schedule": schedule.describe(),
        "faults": [str(event) for event in faults.events],
        "client_errors": workload.errors[:200], "anomalies": [str(a) for a in anomalies],
        "unrecovered": unrecovered,
        "history": asdict(workload.history)}, indent=1))
    say(summary(workload.history, anomalies))
    assert not anomalies and unrecovered is None, (
        f"{len(anomalies)} anomalies in schedule {chaos_seed} (history: {history_path}):\n"
        + "\n".join(map(str, anomalies[:20]))
        + (f"\nthe cluster did not recover: {unrecovered}" if unrecovered else "")
        + f"\nreplay with: {replay_command(chaos_seed)}")
