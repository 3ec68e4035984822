"""Which pod to restart next (StatefulSets use OnDelete: the operator decides), from why each
pod needs a restart (restarts.py) and whether restarting it is safe now (roll_safety.py).

One pod at a time, in this order: broker-only nodes, then controllers (combined nodes among
them), followers first and the active controller (the quorum leader) last. A pod that needs a
restart and has not been ready for STUCK_SECONDS goes first without waiting: it serves
nothing, and the new config may be what it needs. Otherwise nothing restarts until every pod
is ready, the cluster is Ready, no partition is being moved and the last restart has settled
(roll_safety.unsettled); then the first pod of the current group that is safe restarts.

Nothing is remembered between reconciles: a roll is what the pods say (their config hash,
image, revision and annotations), so an operator restarted in the middle of one carries on
where it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moldau.operator.kafkaview import KafkaView
from moldau.operator.restarts import explain
from moldau.operator.roll_safety import broker_blockers, controller_blockers, unsettled

STUCK_SECONDS = 120.0


@dataclass(frozen=True)
class RollPod:
    name: str
    node_id: int
    broker: bool
    controller: bool
    ready: bool
    reasons: tuple[str, ...] = ()  # why it needs a restart; empty: it is current
    unready_for: float = 0.0  # seconds since it was last ready (0 when ready)

    @property
    def stale(self) -> bool:
        return bool(self.reasons)


@dataclass(frozen=True)
class Step:
    restart: RollPod | None  # the pod to delete now, if any
    message: str | None  # what the roll does or waits for; None when nothing is stale
    pending: tuple[RollPod, ...] = ()  # the pods still to restart, in roll order


def roll_order(pods: Sequence[RollPod], leader_id: int) -> list[RollPod]:
    """Broker-only nodes first, then controllers with the quorum leader last; by node id."""
    return sorted(pods, key=lambda pod: (pod.controller, pod.node_id == leader_id,
                                         pod.node_id))


def candidates(stale: Sequence[RollPod], leader_id: int) -> list[RollPod]:
    """The group that may restart now: broker-only nodes while any is left, then the
    controllers that do not lead, then the leader."""
    ordered = roll_order(stale, leader_id)
    for group in ([p for p in ordered if not p.controller],
                  [p for p in ordered if p.controller and p.node_id != leader_id]):
        if group:
            return group
    return ordered


def blockers(pod: RollPod, view: KafkaView) -> list[str]:
    found = broker_blockers(pod.node_id, view) if pod.broker else []
    if pod.controller:
        found += controller_blockers(pod.node_id, view.quorum)
    return found


def _restart(pod: RollPod, pending: list[RollPod], why: str = "") -> Step:
    rest = len(pending) - 1
    message = (f"restarting {pod.name}: {explain(pod.reasons)}{why} "
               f"({rest} more pod{'s' if rest != 1 else ''} to go)")
    return Step(pod, message, tuple(pending))


def next_step(pods: Sequence[RollPod], *, cluster_ready: bool, view: KafkaView | None,
              leader_id: int) -> Step:
    pending = roll_order([pod for pod in pods if pod.stale], leader_id)
    if not pending:
        return Step(None, None)
    stuck = [pod for pod in pending if not pod.ready and pod.unready_for >= STUCK_SECONDS]
    if stuck:
        return _restart(stuck[0], pending,
                        f"; not ready for {stuck[0].unready_for:.0f} s, so it goes first")
    first = candidates(pending, leader_id)[0].name

    def wait(why: str) -> Step:
        return Step(None, f"waiting for {why} before restarting {first}", tuple(pending))

    not_ready = sorted(pod.name for pod in pods if not pod.ready)
    if not_ready:
        return wait(f"{', '.join(not_ready)} to be ready")
    if not cluster_ready:
        return wait("the cluster to be Ready")
    if view is None:
        return wait("the cluster to answer")
    if view.moving:
        return wait(f"{len(view.moving)} partition move(s) to finish")
    gaps = unsettled(view)
    if gaps:
        return wait("; ".join(gaps))
    group = candidates(pending, leader_id)
    for pod in group:
        if not blockers(pod, view):
            return _restart(pod, pending)
    return Step(None, f"waiting to restart {group[0].name}: "
                      f"{'; '.join(blockers(group[0], view))}", tuple(pending))
