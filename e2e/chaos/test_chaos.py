"""Jepsen's Kafka queue workload under a seeded fault schedule on a 3-node cluster in
network namespaces; every history is checked and the replicas' segment files compared.

A failing schedule names the command that replays it: the seed fixes the faults, their
targets and their timings (not the exact interleaving with the clients)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from e2e.chaos.checker import check, replica_divergence, summary
from e2e.chaos.faults import Faults
from e2e.chaos.recovery import conclude, say, under_schedule
from e2e.chaos.schedule import Schedule
from e2e.chaos.workload import QueueWorkload
from moldau.cluster.launcher import LocalCluster

pytestmark = pytest.mark.chaos
TEST_FILE = "e2e/chaos/test_chaos.py"


def test_queue_under_faults(chaos_seed: int, chaos_cluster: LocalCluster, chaos_faults: Faults,
                            tmp_path: Path) -> None:
    schedule = Schedule.from_seed(chaos_seed)
    say(schedule.describe())
    workload = QueueWorkload(chaos_cluster.bootstrap_servers, f"queue-{chaos_seed}")
    workload.create_topic()
    unrecovered = under_schedule(schedule, chaos_cluster, chaos_faults, workload,
                                 workload.acknowledged, 100, 100, "the first acknowledgements")
    say("final read")
    high_watermarks = workload.final_read()
    anomalies = check(workload.history)
    say("stopping the cluster to compare the replicas")
    chaos_cluster.stop(timeout=30)
    if unrecovered is None:  # replicas out of the ISR may lag: compare only full ISRs
        anomalies += replica_divergence(workload.history,
                                        workload.stored_replicas(chaos_cluster),
                                        high_watermarks)
    conclude(tmp_path / "history.json", TEST_FILE, chaos_seed, schedule, chaos_faults,
             anomalies, unrecovered, summary(workload.history, anomalies),
             client_errors=workload.errors[:200], history=asdict(workload.history))
