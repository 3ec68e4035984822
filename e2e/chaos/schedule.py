"""Seeded fault schedules: a seed determines which faults strike, on which nodes, when and
for how long, so a failing schedule is replayed with `--chaos-seed N`.

A schedule is a list of steps; each waits `gap` seconds, injects one fault, holds it for
`duration` seconds and heals it. Some steps overlap a second fault with the first: it starts
`overlap_after` seconds into the step and is healed first. Pauses last longer than the broker
session timeout (the controller fences the paused broker while it sleeps).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from e2e.chaos.faults import Fault, Faults, partition_leader
from moldau.cluster.probe import ProbeError

KINDS = ("isolate-leader", "isolate-controller", "split", "one-way", "all-apart", "bridge",
         "ring", "loss", "pause-leader", "pause-controller", "crash-leader",
         "crash-controller", "power-cut-leader", "clock-jump")
STEPS = 3
OVERLAP_CHANCE = 0.3  # of a step holding a second fault at the same time
LOSS_PERCENTS = (10, 30, 60)
# Wall-clock steps in seconds: minutes and hours, both ways (two hours back puts producers'
# timestamps past message.timestamp.after.max.ms, so that leader refuses them, as Kafka's).
CLOCK_JUMPS = (300, 3600, 6 * 3600, -300, -3000, -7200)
SESSION_TIMEOUT = 3.0  # broker.session.timeout.ms of the chaos cluster, in seconds


def replay_command(seed: int, test_file: str = "e2e/chaos/test_chaos.py") -> str:
    return f"pytest {test_file} --chaos-seed {seed}"


@dataclass(frozen=True)
class Step:
    kind: str
    gap: float  # seconds before the fault
    duration: float  # seconds the fault is held
    pick: int  # chooses the node(s) or partition the fault aims at
    also: str = ""  # a second fault held at the same time ("" for none)
    also_pick: int = 0
    overlap_after: float = 0.0  # seconds into the step the second fault starts

    def __str__(self) -> str:
        text = f"after {self.gap:.1f} s: {self.kind} (pick {self.pick}) for {self.duration:.1f} s"
        if self.also:
            text += f", with {self.also} (pick {self.also_pick}) from {self.overlap_after:.1f} s"
        return text


def _duration(rng: random.Random, kind: str) -> float:
    shortest = SESSION_TIMEOUT + 1 if kind.startswith("pause") else 2.0
    return round(rng.uniform(shortest, shortest + 5), 1)


@dataclass(frozen=True)
class Schedule:
    seed: int
    steps: tuple[Step, ...]

    @classmethod
    def from_seed(cls, seed: int, steps: int = STEPS, kinds: tuple[str, ...] = KINDS
                  ) -> Schedule:
        rng = random.Random(seed)
        made = []
        for _ in range(steps):
            kind = rng.choice(kinds)
            gap, duration, pick = round(rng.uniform(1, 4), 1), _duration(rng, kind), \
                rng.randrange(6)
            also, also_pick, after = "", 0, 0.0
            if rng.random() < OVERLAP_CHANCE:
                also, also_pick = rng.choice(kinds), rng.randrange(6)
                after = round(rng.uniform(0, duration / 2), 1)
                # The second fault must be held as long as its kind needs.
                duration = max(duration, round(after + _duration(rng, also), 1))
            made.append(Step(kind, gap, duration, pick, also, also_pick, after))
        return cls(seed, tuple(made))

    def describe(self) -> str:
        return f"schedule {self.seed}: " + "; ".join(map(str, self.steps))

    def run(self, faults: Faults, topic: str, partitions: int) -> None:
        """Inject every step's fault(s) in turn; each step is healed before the next."""
        for step in self.steps:
            time.sleep(step.gap)
            held = [inject(step.kind, step.pick, faults, topic, partitions)]
            try:
                if step.also:
                    time.sleep(step.overlap_after)
                    held.append(inject(step.also, step.also_pick, faults, topic, partitions))
                time.sleep(step.duration - step.overlap_after)
            finally:
                for fault in reversed(held):
                    faults.heal(fault)


def full_isrs(faults: Faults) -> bool:
    try:
        view = faults.cluster.metadata()
    except ProbeError:
        return False
    return not view.under_replicated and not view.offline


def inject(kind: str, pick: int, faults: Faults, topic: str, partitions: int) -> Fault:
    nodes = [node.node_id for node in faults.cluster.nodes]
    chosen = nodes[pick % len(nodes)]
    other = nodes[(pick + 1) % len(nodes)]
    partition = pick % partitions
    # A leader or controller may be unknown for a moment after the previous step: then the
    # fault strikes the chosen node instead.
    leader = partition_leader(faults.cluster, topic, partition)
    leader = leader if leader in nodes else chosen
    controller = faults.cluster.active_controller()
    controller = controller if controller in nodes else chosen
    of_leader = f" (leader of {topic}-{partition})"
    if kind == "isolate-leader":
        return faults.isolate(leader, of_leader)
    if kind == "isolate-controller":
        return faults.isolate(controller, " (active controller)")
    if kind == "split":
        return faults.partition([{chosen}, set(nodes) - {chosen}])
    if kind == "one-way":
        return faults.one_way(chosen, other)
    if kind == "all-apart":
        return faults.all_apart()
    if kind == "bridge":
        return faults.bridge(chosen)
    if kind == "ring":
        return faults.ring(pick)
    if kind == "loss":
        return faults.loss(LOSS_PERCENTS[pick % len(LOSS_PERCENTS)], chosen, other,
                           both_ways=pick % 2 == 0)
    if kind == "pause-leader":
        return faults.pause(leader, of_leader)
    if kind == "pause-controller":
        return faults.pause(controller, " (active controller)")
    if kind == "crash-leader":
        return faults.crash(leader, of_leader)
    if kind == "crash-controller":
        return faults.crash(controller, " (active controller)")
    if kind == "clock-jump":
        return faults.clock_jump(chosen, CLOCK_JUMPS[pick % len(CLOCK_JUMPS)])
    if kind == "power-cut-leader":
        # At most one node has lost unsynced data at a time: the one before must be back in
        # every ISR (so every acknowledged record is on all three replicas again).
        if not faults.disks or not full_isrs(faults):
            return faults.crash(leader, of_leader + " (no power cut: an ISR is short)")
        return faults.crash_losing_unsynced(leader, of_leader)
    raise ValueError(f"unknown fault kind {kind!r}")
