"""Which pod to restart next after a config change (StatefulSets use OnDelete: the operator
decides), kept apart from what changed: "why restart" is a pod whose config hash differs from
its pool's; "is it safe now" is every pod ready and the cluster Ready. One pod at a time:
controllers first with the quorum leader last among them, then brokers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RunningPod:
    name: str
    node_id: int
    controller: bool
    ready: bool
    config_hash: str | None
    desired_hash: str

    @property
    def stale(self) -> bool:
        return self.config_hash != self.desired_hash


@dataclass(frozen=True)
class Step:
    restart: str | None  # the pod to delete now, if any
    message: str | None  # what the roll is doing or waiting for; None when nothing is stale


def next_step(pods: Sequence[RunningPod], cluster_ready: bool, leader_id: int) -> Step:
    stale = sorted((pod for pod in pods if pod.stale),
                   key=lambda pod: (not pod.controller, pod.node_id == leader_id, pod.node_id))
    if not stale:
        return Step(None, None)
    waiting = [pod.name for pod in pods if not pod.ready]
    if waiting:
        return Step(None, f"waiting for {', '.join(sorted(waiting))} to be ready before "
                          f"restarting {stale[0].name}")
    if not cluster_ready:
        return Step(None, f"waiting for the cluster to be Ready before restarting "
                          f"{stale[0].name}")
    return Step(stale[0].name, f"restarting {stale[0].name}: its config changed "
                               f"({len(stale)} pods to go)")
