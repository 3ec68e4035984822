"""Seeded fault-injection runs of whole quorums, and proof that their checks bite.

MOLDAU_RAFT_SOAK=1 runs many more seeds (a number instead of 1 sets how many per test); the
default is sized to finish in well under a minute on two cores.
"""

import io
import os

import pytest

from moldau.broker.raft.actions import FlushLog, PersistState
from moldau.broker.raft.node import RaftNode
from moldau.broker.raft.simulation import SimResult, Simulation, main, run_seeds

_SOAK = os.environ.get("MOLDAU_RAFT_SOAK", "")
SOAK_SEEDS = (int(_SOAK) if _SOAK.isdigit() and int(_SOAK) > 1 else 20_000) if _SOAK else 0
JOBS = min(2, os.cpu_count() or 1)
soak_timeout = pytest.mark.timeout(0 if SOAK_SEEDS else 300)


def assert_all_ok(results: list[SimResult]) -> None:
    failures = [r for r in results if not r.ok]
    assert not failures, "\n".join(r.report() for r in failures[:10])


@soak_timeout
@pytest.mark.parametrize(("nodes", "profile", "seeds"), [
    (3, "mixed", 800), (3, "churn", 300), (5, "mixed", 300), (5, "churn", 120)])
def test_random_schedules_keep_every_invariant(nodes, profile, seeds):
    count = SOAK_SEEDS or seeds
    results = run_seeds(range(count), nodes, jobs=JOBS, profile=profile)
    assert_all_ok(results)
    assert len(results) == count
    # The runs did what they are for: leaders came and went, data was committed, snapshots
    # were shipped, nodes crashed, and every run ended in a calm phase that made progress.
    assert sum(r.leaders for r in results) > 3 * count
    assert sum(r.committed for r in results) > 50 * count
    assert sum(r.snapshots_installed for r in results) > count
    assert sum(r.crashes for r in results) > 5 * count
    assert all(r.calm_phases >= 1 for r in results)


def test_a_seed_replays_exactly():
    traces = []
    for _ in range(2):
        out = io.StringIO()
        result = Simulation(7, 3, 800, verbose=True, out=out).run()
        assert result.ok, result.report()
        traces.append(out.getvalue())
    assert traces[0] == traces[1]
    assert "is LEADER of epoch" in traces[0] and "CommitUpTo" in traces[0]


def test_command_line_single_seed(capsys):
    assert main(["--seed", "3", "--nodes", "5", "--steps", "300"]) == 0
    assert capsys.readouterr().out.startswith("seed 3: ok")


# -- the checks catch broken rules (classes at module level so worker processes can load them)


class VotesWithoutComparingLogs(RaftNode):
    def _candidate_log_ok(self, last_epoch, end_offset):
        return True


class CountsEntriesOfOlderEpochs(RaftNode):
    def _high_watermark_candidate(self, st):
        ends = sorted([self._flushed_end] + [r.end_offset for r in st.replicas.values()])
        return ends[-self._majority]


class LeaderCountsUnflushedEntries(RaftNode):
    def _high_watermark_candidate(self, st):
        ends = sorted([self.log.end_offset] + [r.end_offset for r in st.replicas.values()])
        majority_end = ends[-self._majority]
        return majority_end if majority_end > st.epoch_start_offset else None


class RepliesBeforePersisting(RaftNode):
    def _on_vote_request(self, req, now, actions):
        own = []
        super()._on_vote_request(req, now, own)
        actions.extend(a for a in own if not isinstance(a, PersistState))
        actions.extend(a for a in own if isinstance(a, PersistState))


class FollowerSkipsFsync(RaftNode):
    def _on_fetch_response(self, resp, now, actions):
        own = []
        super()._on_fetch_response(resp, now, own)
        actions.extend(a for a in own if not isinstance(a, FlushLog))


@pytest.mark.parametrize(("broken", "nodes", "profile", "budget", "expected"), [
    (VotesWithoutComparingLogs, 3, "mixed", 50, "leader completeness"),
    (VotesWithoutComparingLogs, 5, "mixed", 50, "leader completeness"),
    (RepliesBeforePersisting, 3, "mixed", 50, "persisted"),
    (FollowerSkipsFsync, 3, "mixed", 50, "leader completeness"),
    (LeaderCountsUnflushedEntries, 3, "mixed", 600, "leader completeness"),
    # Raft's "figure 8": needs leaders cut off right after their election.
    (CountsEntriesOfOlderEpochs, 3, "churn", 2000, "leader completeness"),
])
def test_checks_find_a_broken_rule(broken, nodes, profile, budget, expected):
    results = run_seeds(range(budget), nodes, jobs=JOBS, node_factory=broken, profile=profile,
                        stop_on_failure=True)
    failing = [r for r in results if not r.ok]
    assert failing, f"{broken.__name__}: no violation in {budget} seeds"
    report = failing[0].report()
    assert expected in report
    assert f"--seed {failing[0].seed} --nodes {nodes}" in report
    # The reported seed fails the same way when run again on its own.
    again = Simulation(failing[0].seed, nodes, node_factory=broken, profile=profile).run()
    assert (again.violation, again.violation_step) == (
        failing[0].violation, failing[0].violation_step)
