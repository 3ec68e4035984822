"""Seeded fault schedules: a seed determines which faults strike, on which nodes, when and
for how long, so a failing schedule is replayed with `--chaos-seed N`.

A schedule is a list of steps; each waits `gap` seconds, injects one fault, holds it for
`duration` seconds and heals it. Pauses last longer than the broker session timeout (the
controller fences the paused broker while it sleeps).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from e2e.chaos.faults import Fault, Faults, partition_leader

KINDS = ("isolate-leader", "isolate-controller", "split", "one-way", "pause-leader",
         "crash-leader", "crash-controller")
STEPS = 3
SESSION_TIMEOUT = 3.0  # broker.session.timeout.ms of the chaos cluster, in seconds


def replay_command(seed: int) -> str:
    return f"pytest e2e/chaos/test_chaos.py --chaos-seed {seed}"


@dataclass(frozen=True)
class Step:
    kind: str
    gap: float  # seconds before the fault
    duration: float  # seconds the fault is held
    pick: int  # chooses the node(s) or partition the fault aims at

    def __str__(self) -> str:
        return f"after {self.gap:.1f} s: {self.kind} (pick {self.pick}) for {self.duration:.1f} s"


@dataclass(frozen=True)
class Schedule:
    seed: int
    steps: tuple[Step, ...]

    @classmethod
    def from_seed(cls, seed: int, steps: int = STEPS) -> Schedule:
        rng = random.Random(seed)
        made = []
        for _ in range(steps):
            kind = rng.choice(KINDS)
            shortest = SESSION_TIMEOUT + 1 if kind.startswith("pause") else 2.0
            made.append(Step(kind, round(rng.uniform(1, 4), 1),
                             round(rng.uniform(shortest, shortest + 5), 1), rng.randrange(6)))
        return cls(seed, tuple(made))

    def describe(self) -> str:
        return f"schedule {self.seed}: " + "; ".join(map(str, self.steps))

    def run(self, faults: Faults, topic: str, partitions: int) -> None:
        """Inject every step's fault in turn; each is healed before the next step."""
        for step in self.steps:
            time.sleep(step.gap)
            fault = inject(step, faults, topic, partitions)
            try:
                time.sleep(step.duration)
            finally:
                faults.heal(fault)


def inject(step: Step, faults: Faults, topic: str, partitions: int) -> Fault:
    nodes = [node.node_id for node in faults.cluster.nodes]
    chosen = nodes[step.pick % len(nodes)]
    partition = step.pick % partitions
    # A leader or controller may be unknown for a moment after the previous step: then the
    # fault strikes the chosen node instead.
    leader = partition_leader(faults.cluster, topic, partition)
    leader = leader if leader in nodes else chosen
    controller = faults.cluster.active_controller()
    controller = controller if controller in nodes else chosen
    if step.kind == "isolate-leader":
        return faults.isolate(leader, f" (leader of {topic}-{partition})")
    if step.kind == "isolate-controller":
        return faults.isolate(controller, " (active controller)")
    if step.kind == "split":
        return faults.partition([{chosen}, set(nodes) - {chosen}])
    if step.kind == "one-way":
        return faults.one_way(chosen, nodes[(step.pick + 1) % len(nodes)])
    if step.kind == "pause-leader":
        return faults.pause(leader, f" (leader of {topic}-{partition})")
    if step.kind == "crash-leader":
        return faults.crash(leader, f" (leader of {topic}-{partition})")
    if step.kind == "crash-controller":
        return faults.crash(controller, " (active controller)")
    raise ValueError(f"unknown fault kind {step.kind!r}")
