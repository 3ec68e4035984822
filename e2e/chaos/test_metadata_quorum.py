"""The metadata-quorum workload under a seeded fault schedule: topics created and partitions
reassigned during partitions, every node's Raft state sampled throughout; at most one active
controller and one leader per epoch, and every acknowledged change still there once healed."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from e2e.chaos.faults import Faults
from e2e.chaos.metadata_workload import MetadataWorkload
from e2e.chaos.quorum_checker import check, crashes, summary
from e2e.chaos.recovery import (
    RECOVERY_TIMEOUT,
    conclude,
    recover,
    run_schedule,
    say,
)
from e2e.chaos.schedule import Schedule
from e2e.support import wait_until
from moldau.cluster.launcher import LocalCluster

pytestmark = pytest.mark.chaos
TEST_FILE = "e2e/chaos/test_metadata_quorum.py"
SHORT_SEEDS = (1,)


def test_metadata_under_faults(chaos_seed: int, chaos_cluster: LocalCluster,
                               chaos_faults: Faults, tmp_path: Path) -> None:
    schedule = Schedule.from_seed(chaos_seed)
    say(schedule.describe())
    workload = MetadataWorkload(chaos_cluster, f"meta{chaos_seed}").start()
    try:
        wait_until(lambda: workload.acknowledged() >= (3, 1), 60,
                   "the first topics and reassignment")
        run_schedule(schedule, chaos_faults, workload.first_topic, 1)
        unrecovered = recover(chaos_cluster, lambda: sum(workload.acknowledged()), 4)
    finally:
        say("stopping the clients")
        workload.stop()
    admin = KafkaAdminClient(bootstrap_servers=chaos_cluster.bootstrap_servers.split(","),
                             request_timeout_ms=10000)
    try:
        if unrecovered is None:
            try:
                wait_until(lambda: not admin.list_partition_reassignments(), RECOVERY_TIMEOUT,
                           "every reassignment completed")
            except AssertionError as exc:
                unrecovered = str(exc)
        workload.final_state(admin)
    finally:
        admin.close()
    workload.history.crashes = crashes((e.wall, e.action, e.fault) for e in chaos_faults.events)
    anomalies = check(workload.history)
    conclude(tmp_path / "history.json", TEST_FILE, chaos_seed, schedule, chaos_faults,
             anomalies, unrecovered, summary(workload.history, anomalies),
             client_errors=workload.errors[:200], history=asdict(workload.history))
