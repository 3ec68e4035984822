"""The roll order after a config change, and when it waits."""

from __future__ import annotations

from moldau.operator.rolling import RunningPod, next_step


def pod(name: str, node_id: int, controller: bool, stale: bool = True,
        ready: bool = True) -> RunningPod:
    return RunningPod(name, node_id, controller, ready, "old" if stale else "new", "new")


def test_controllers_first_the_leader_last_then_brokers() -> None:
    pods = [pod("b-0", 100, False), pod("c-0", 0, True), pod("c-1", 1, True)]
    assert next_step(pods, True, leader_id=0).restart == "c-1"
    pods[2] = pod("c-1", 1, True, stale=False)
    assert next_step(pods, True, leader_id=0).restart == "c-0"
    pods[1] = pod("c-0", 0, True, stale=False)
    step = next_step(pods, True, leader_id=1)
    assert (step.restart, step.message) == ("b-0", "restarting b-0: its config changed "
                                                   "(1 pods to go)")


def test_nothing_stale_is_nothing_to_do() -> None:
    step = next_step([pod("b-0", 100, False, stale=False)], True, 0)
    assert (step.restart, step.message) == (None, None)


def test_waits_while_a_pod_is_not_ready_or_the_cluster_is_not_ready() -> None:
    pods = [pod("c-0", 0, True), pod("b-0", 100, False, stale=False, ready=False)]
    step = next_step(pods, True, 0)
    assert step.restart is None
    assert step.message == "waiting for b-0 to be ready before restarting c-0"
    step = next_step([pod("c-0", 0, True)], False, 0)
    assert step.restart is None
    assert step.message == "waiting for the cluster to be Ready before restarting c-0"
