"""Seeded fault-injection runs of whole quorums (voters and observers), and proof that their
checks bite.

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
    assert {r.observers for r in results} == {1, 2}


def test_voters_that_lose_their_disk_rejoin_in_probation():
    results = run_seeds(range(150), 3, jobs=JOBS, profile="lost-disk")
    assert_all_ok(results)
    assert sum(r.disks_lost for r in results) > 50
    assert sum(r.committed for r in results) > 50 * len(results)


def test_observers_catch_up_in_every_calm_phase():
    # More observers than voters: they crash, get partitioned and lose their leader like the
    # voters, and each calm phase still waits for every one of them to apply the probe.
    results = run_seeds(range(60), 3, jobs=JOBS, observers=4)
    assert_all_ok(results)
    assert all(r.observers == 4 and r.calm_phases >= 1 for r in results)


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
    assert main(["--seed", "3", "--nodes", "3", "--observers", "0", "--steps", "300"]) == 0
    assert capsys.readouterr().out.startswith("seed 3: ok")


def test_observers_never_vote_and_follow_leaders():
    out = io.StringIO()
    sim = Simulation(11, 3, 600, verbose=True, out=out, observers=2)
    result = sim.run()
    assert result.ok, result.report()
    for observer in sim.observers:
        node = sim.nodes[observer]
        assert node.observer and node.quorum.voted_for is None
        assert node.sm is not None and node.sm.applied > 0
    assert all(voter not in sim.observers for voter in sim.checker.leaders.values())
    assert all(voter not in sim.observers for voter, _epoch in sim.checker.votes)


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


class LeaderCountsObservers(RaftNode):
    def _high_watermark_candidate(self, st):
        ends = sorted([self._flushed_end] + [r.end_offset for r in st.replicas.values()]
                      + [o.end_offset for o in st.observers.values()], reverse=True)
        majority_end = ends[self._majority - 1]
        return majority_end if majority_end > st.epoch_start_offset else None


class ObserverStands(RaftNode):
    def _lose_leader(self, st, now, actions):
        self.is_observer = False
        self._become_candidate(now, actions)


class ObserverCommitsItsLogEnd(RaftNode):
    def _advance_commit(self, offset, actions):
        super()._advance_commit(max(offset, self._flushed_end) if self.is_observer else offset,
                                actions)


class IgnoresLostState(RaftNode):
    def __init__(self, *args, lost_state=False, **kwargs):
        super().__init__(*args, **kwargs)


class FollowerSkipsFsync(RaftNode):
    def _on_fetch_response(self, resp, now, actions):
        own = []
        super()._on_fetch_response(resp, now, own)
        actions.extend(a for a in own if not isinstance(a, FlushLog))


@pytest.mark.parametrize(("broken", "nodes", "profile", "budget", "expected", "observers"), [
    (VotesWithoutComparingLogs, 3, "mixed", 50, "leader completeness", None),
    (VotesWithoutComparingLogs, 5, "mixed", 50, "leader completeness", None),
    (RepliesBeforePersisting, 3, "mixed", 50, "persisted", None),
    (FollowerSkipsFsync, 3, "mixed", 50, "leader completeness", None),
    (LeaderCountsUnflushedEntries, 3, "mixed", 600, "leader completeness", None),
    # Raft's "figure 8": needs leaders cut off right after their election; observers only
    # dilute such schedules.
    (CountsEntriesOfOlderEpochs, 3, "churn", 2000, "leader completeness", 0),
    (LeaderCountsObservers, 3, "mixed", 50, "leader completeness", None),
    (ObserverStands, 3, "mixed", 50, "observer", None),
    (ObserverCommitsItsLogEnd, 3, "mixed", 50, "before any voter committed", None),
    # A voter back from a lost disk that votes at once breaks what its old votes and entries
    # promised.
    (IgnoresLostState, 3, "lost-disk", 50, "leader completeness", None),
])
def test_checks_find_a_broken_rule(broken, nodes, profile, budget, expected, observers):
    results = run_seeds(range(budget), nodes, jobs=JOBS, node_factory=broken, profile=profile,
                        observers=observers, stop_on_failure=True)
    failing = [r for r in results if not r.ok]
    assert failing, f"{broken.__name__}: no violation in {budget} seeds"
    report = failing[0].report()
    assert expected in report
    assert f"--seed {failing[0].seed} --nodes {nodes} --observers" in report
    if profile != "mixed":
        assert f"--profile {profile}" in report
    # The reported seed fails the same way when run again on its own.
    again = Simulation(failing[0].seed, nodes, node_factory=broken, profile=profile,
                       observers=failing[0].observers).run()
    assert (again.violation, again.violation_step) == (
        failing[0].violation, failing[0].violation_step)
