"""The roll order and when the roller waits: broker-only nodes first, then controllers with
the quorum leader last; one pod at a time, only when the last restart has settled and the
pod's restart is safe; a stuck pod first; and a roll that carries on from the pods alone."""

from __future__ import annotations

from moldau.client.admin import QuorumInfo, QuorumReplica
from moldau.operator.kafkaview import KafkaView, PartitionState
from moldau.operator.restarts import CONFIG_CHANGED, MANUAL
from moldau.operator.rolling import STUCK_SECONDS, RollPod, next_step, roll_order

LEADER = 1


def pod(name: str, node_id: int, *, broker: bool = True, controller: bool = False,
        stale: bool = True, ready: bool = True, unready_for: float = 0.0) -> RollPod:
    return RollPod(name, node_id, broker, controller, ready,
                   (CONFIG_CHANGED,) if stale else (), unready_for)


def healthy(*partitions: PartitionState, min_isr: dict | None = None,
            ends: dict | None = None, moving=()) -> KafkaView:
    ends = ends or {0: 40, 1: 40, 2: 40}
    return KafkaView(frozenset({100, 101, 102}), tuple(partitions), min_isr or {},
                     quorum=QuorumInfo(LEADER, 4, 40, tuple(QuorumReplica(v, e)
                                                            for v, e in ends.items()), ()),
                     targets={key: (1, 2, 3) for key in moving})


def cluster(**stale: bool) -> list[RollPod]:
    """Three controllers (1 leads) and three brokers, stale unless told otherwise."""
    pods = [pod(f"c-{i}", i, broker=False, controller=True) for i in range(3)]
    pods += [pod(f"b-{i}", 100 + i) for i in range(3)]
    return [RollPod(p.name, p.node_id, p.broker, p.controller, p.ready,
                    p.reasons if stale.get(p.name.replace("-", "_"), True) else ())
            for p in pods]


def step(pods, view=None, ready=True):
    return next_step(pods, cluster_ready=ready, view=healthy() if view is None else view,
                     leader_id=LEADER)


def test_brokers_first_then_controller_followers_then_the_leader() -> None:
    pods = cluster()
    assert [p.name for p in roll_order([p for p in pods if p.stale], LEADER)] == [
        "b-0", "b-1", "b-2", "c-0", "c-2", "c-1"]
    done: list[str] = []
    while True:
        chosen = step(pods).restart
        if chosen is None:
            break
        done.append(chosen.name)
        # The pod comes back current: nothing is remembered but the pods themselves.
        pods = [RollPod(p.name, p.node_id, p.broker, p.controller, True, ())
                if p.name == chosen.name else p for p in pods]
    assert done == ["b-0", "b-1", "b-2", "c-0", "c-2", "c-1"]


def test_a_roll_resumes_from_the_pods_alone() -> None:
    # As an operator started afresh finds it: two brokers already restarted.
    pods = cluster(b_0=False, b_1=False)
    found = step(pods)
    assert found.restart is not None and found.restart.name == "b-2"
    assert found.message == "restarting b-2: its config changed (3 more pods to go)"
    assert [p.name for p in found.pending] == ["b-2", "c-0", "c-2", "c-1"]


def test_combined_nodes_roll_with_the_controllers_and_are_checked_as_brokers() -> None:
    combined = [pod(f"n-{i}", i, controller=True) for i in range(3)]
    seen = healthy(PartitionState("t", 0, (0, 1, 2), (0, 2), 0), min_isr={"t": 2})
    # Node 0 is in the two-member ISR at min.insync.replicas=2; node 2 too; 1 leads.
    found = step(combined, seen)
    assert found.restart is None
    assert found.message == "waiting to restart n-0: t-0 would go under min.insync.replicas"


def test_an_unsafe_broker_is_passed_over_for_a_safe_one_of_its_group() -> None:
    seen = healthy(PartitionState("t", 0, (100, 101, 102), (100, 101), 100),
                   min_isr={"t": 2})
    assert seen.partitions[0].isr == (100, 101)
    found = step(cluster(), seen)
    # 100 and 101 hold the ISR at its limit; 102 is not in it (and being out of sync, the
    # cluster is not settled: it waits for that first).
    assert found.restart is None
    assert found.message.startswith("waiting for t-0 to have its live replicas back in sync")
    partial = KafkaView(frozenset({100, 101}), seen.partitions, seen.min_isr,
                        quorum=seen.quorum)
    found = step(cluster(), partial)
    assert found.restart is not None and found.restart.name == "b-2"


def test_nothing_restarts_while_a_pod_or_the_cluster_is_not_ready() -> None:
    pods = cluster(b_1=False)
    pods[4] = RollPod("b-1", 101, True, False, False, ())
    found = step(pods)
    assert (found.restart, found.message) == (
        None, "waiting for b-1 to be ready before restarting b-0")
    found = step(cluster(), ready=False)
    assert found.message == "waiting for the cluster to be Ready before restarting b-0"
    found = next_step(cluster(), cluster_ready=True, view=None, leader_id=LEADER)
    assert found.message == "waiting for the cluster to answer before restarting b-0"


def test_nothing_restarts_until_the_last_restart_settled_or_while_partitions_move() -> None:
    found = step(cluster(), healthy(ends={0: 400, 1: 400, 2: 30}))
    assert found.message == ("waiting for controllers 2 to catch up with the metadata quorum "
                             "before restarting b-0")
    found = step(cluster(), healthy(moving=[("t", 0)]))
    assert found.message == "waiting for 1 partition move(s) to finish before restarting b-0"


def test_the_leader_waits_for_a_caught_up_majority() -> None:
    pods = cluster(b_0=False, b_1=False, b_2=False, c_0=False, c_2=False)
    assert step(pods).restart.name == "c-1"
    # Voter 2 trails: the cluster has not settled, nothing restarts.
    assert step(pods, healthy(ends={0: 400, 1: 400, 2: 0})).restart is None


def test_a_stuck_pod_goes_first_whatever_the_rest() -> None:
    pods = cluster()
    pods[5] = pod("b-2", 102, ready=False, unready_for=STUCK_SECONDS + 5)
    found = step(pods, ready=False)
    assert found.restart is not None and found.restart.name == "b-2"
    assert found.message == ("restarting b-2: its config changed; not ready for 125 s, so it "
                             "goes first (5 more pods to go)")
    # Not ready for a short while: it may be starting; wait.
    pods[5] = pod("b-2", 102, ready=False, unready_for=10)
    assert step(pods).restart is None


def test_nothing_stale_is_nothing_to_do_and_reasons_add_up() -> None:
    current = [pod("b-0", 100, stale=False)]
    assert step(current) == next_step(current, cluster_ready=False, view=None, leader_id=-1)
    assert step(current).message is None
    manual = [RollPod("b-0", 100, True, False, True, (MANUAL,))]
    assert step(manual).message == ("restarting b-0: the moldau.io/manual-rolling-update "
                                    "annotation asks for it (0 more pods to go)")
