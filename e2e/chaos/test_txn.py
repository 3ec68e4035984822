"""The transactional workload under a seeded fault schedule: read_committed consumers never
see aborted writes (G1a), write-read dependencies form no cycle (G1c), and committed
transactions are in the final read, whole."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from e2e.chaos.faults import Faults
from e2e.chaos.recovery import conclude, say, under_schedule
from e2e.chaos.schedule import Schedule
from e2e.chaos.txn_checker import check, summary
from e2e.chaos.txn_workload import TxnWorkload
from moldau.cluster.launcher import LocalCluster

pytestmark = pytest.mark.chaos
TEST_FILE = "e2e/chaos/test_txn.py"
# Five fault kinds, none on the group coordinator's last word. Seed 1, the short mode's until
# then, makes librdkafka's send_offsets_to_transaction hang past its timeout in about one run
# of three on a loaded machine (docs/chaos.md, transactional finding 5): every worker stuck, no
# progress after healing, the schedule failed for a client's bug. `make chaos` still runs it.
SHORT_SEEDS = (53,)


def test_transactions_under_faults(chaos_seed: int, chaos_cluster: LocalCluster,
                                   chaos_faults: Faults, tmp_path: Path) -> None:
    schedule = Schedule.from_seed(chaos_seed)
    say(schedule.describe())
    workload = TxnWorkload(chaos_cluster.bootstrap_servers, f"txn-{chaos_seed}")
    workload.create_topic()
    unrecovered = under_schedule(schedule, chaos_cluster, chaos_faults, workload,
                                 workload.committed, 10, 10, "the first commits", 90)
    say("final read")
    workload.final_read()
    anomalies = check(workload.history)
    conclude(tmp_path / "history.json", TEST_FILE, chaos_seed, schedule, chaos_faults,
             anomalies, unrecovered, f"{summary(workload.history, anomalies)}; "
             f"{workload.restarts} producer restart(s); final read after "
             f"{workload.settled_after_s:.1f} s without open transactions",
             client_errors=workload.errors[:200], producer_restarts=workload.restarts,
             history=asdict(workload.history))
