"""The checker of the metadata-quorum workload: samples of every node's Raft state taken
throughout a schedule, and the outcomes of CreateTopics and partition reassignments.

Anomalies:
- two-active-controllers: two nodes reported themselves the active controller in one epoch;
- two-leaders-in-epoch: nodes named different quorum leaders for one epoch (Raft's election
  safety);
- epoch-went-back: a node reported an epoch lower than one it had reported before. Across a
  crash of the node it may lose its last transition, no more: a node shows a new epoch while
  the quorum-state write of it is still in flight (raft/driver.py), and acts in the epoch
  only once the write is done, so a crash during the write brings back the epoch before;
- topic-lost: an acknowledged CreateTopics whose topic is missing after healing;
- partitions-changed: such a topic with another partition count;
- reassignment-lost: a partition whose replicas after healing are neither its last
  acknowledged reassignment's target nor (when a later request's outcome is unknown) that
  request's target.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from e2e.chaos.checker import FAIL, INFO, OK, Anomaly


@dataclass(frozen=True)
class Sample:
    node: int
    wall: float
    source: str  # "metrics" or "describe-quorum"
    epoch: int
    leader: int  # -1: none known
    active: bool  # this node is the active controller (metrics only)


@dataclass(frozen=True)
class TopicOp:
    topic: str
    partitions: int
    status: str  # OK, FAIL or INFO
    error: str = ""


@dataclass(frozen=True)
class Reassignment:
    topic: str
    partition: int
    target: tuple[int, ...]
    status: str
    error: str = ""


@dataclass
class QuorumHistory:
    samples: list[Sample] = field(default_factory=list)
    topic_ops: list[TopicOp] = field(default_factory=list)
    reassignments: list[Reassignment] = field(default_factory=list)
    # After healing: topic -> {partition: replicas}
    final: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    crashes: list[tuple[int, float]] = field(default_factory=list)  # (node, wall) of each kill


_CRASH = re.compile(r"crash node (\d+)")


def crashes(events: Iterable[tuple[float, str, str]]) -> list[tuple[int, float]]:
    """(node, wall) of each crash among fault events given as (wall, action, fault)."""
    found = []
    for wall, action, fault in events:
        match = _CRASH.match(fault)
        if action == "start" and match:
            found.append((int(match.group(1)), wall))
    return found


def check(history: QuorumHistory) -> list[Anomaly]:
    return [*active_controllers(history), *leaders_per_epoch(history),
            *epochs_going_back(history), *lost_topics(history), *lost_reassignments(history)]


def active_controllers(history: QuorumHistory) -> list[Anomaly]:
    active: dict[int, set[int]] = defaultdict(set)
    for sample in history.samples:
        if sample.active:
            active[sample.epoch].add(sample.node)
    return [Anomaly("two-active-controllers", f"epoch {epoch}: nodes {sorted(nodes)} each "
                                              "reported itself the active controller")
            for epoch, nodes in sorted(active.items()) if len(nodes) > 1]


def leaders_per_epoch(history: QuorumHistory) -> list[Anomaly]:
    named: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for sample in history.samples:
        if sample.leader >= 0:
            named[sample.epoch][sample.leader].add(f"node {sample.node} ({sample.source})")
    return [Anomaly("two-leaders-in-epoch", f"epoch {epoch}: " + "; ".join(
                f"leader {leader} per {', '.join(sorted(who))}"
                for leader, who in sorted(leaders.items())))
            for epoch, leaders in sorted(named.items()) if len(leaders) > 1]


def epochs_going_back(history: QuorumHistory) -> list[Anomaly]:
    anomalies = []
    highest: dict[tuple[int, str], Sample] = {}
    # The epoch a node reported before its highest: durable, whatever a crash interrupted.
    durable: dict[tuple[int, str], int] = {}
    last_wall: dict[tuple[int, str], float] = {}
    for sample in sorted(history.samples, key=lambda s: s.wall):
        key = (sample.node, sample.source)
        before = highest.get(key)
        if before is not None and any(
                node == sample.node and last_wall[key] < wall <= sample.wall
                for node, wall in history.crashes):
            floor = durable.get(key, -1)
            if sample.epoch < floor:
                anomalies.append(Anomaly(
                    "epoch-went-back", f"node {sample.node} ({sample.source}) reported epoch "
                    f"{sample.epoch} at {sample.wall:.3f} after a crash, though it had reported"
                    f" {floor} before it reached {before.epoch} at {before.wall:.3f}"))
            before = None  # the restarted node starts from what it persisted
            durable.pop(key, None)
        last_wall[key] = sample.wall
        if before is not None and sample.epoch < before.epoch:
            anomalies.append(Anomaly("epoch-went-back", f"node {sample.node} ({sample.source})"
                                     f" reported epoch {sample.epoch} at {sample.wall:.3f} after"
                                     f" {before.epoch} at {before.wall:.3f}"))
        if before is None or sample.epoch > before.epoch:
            if before is not None:
                durable[key] = before.epoch
            highest[key] = sample
    return anomalies


def lost_topics(history: QuorumHistory) -> list[Anomaly]:
    anomalies = []
    for op in history.topic_ops:
        if op.status != OK:
            continue
        found = history.final.get(op.topic)
        if found is None:
            anomalies.append(Anomaly("topic-lost", f"{op.topic} ({op.partitions} partitions) "
                                                   "was acknowledged, missing after healing"))
        elif len(found) != op.partitions:
            anomalies.append(Anomaly("partitions-changed", f"{op.topic} was acknowledged with "
                                     f"{op.partitions} partitions, has {len(found)}"))
    return anomalies


def lost_reassignments(history: QuorumHistory) -> list[Anomaly]:
    by_partition: dict[tuple[str, int], list[Reassignment]] = defaultdict(list)
    for op in history.reassignments:
        by_partition[(op.topic, op.partition)].append(op)
    anomalies = []
    for (topic, partition), ops in sorted(by_partition.items()):
        acked = [op for op in ops if op.status == OK]
        if not acked:
            continue
        allowed = {acked[-1].target}
        allowed |= {op.target for op in ops[ops.index(acked[-1]) + 1:] if op.status == INFO}
        found = history.final.get(topic, {}).get(partition)
        if found not in allowed:
            anomalies.append(Anomaly(
                "reassignment-lost", f"{topic}-{partition}: replicas {found} after healing; "
                f"the last acknowledged reassignment moved it to {list(acked[-1].target)}"))
    return anomalies


def summary(history: QuorumHistory, anomalies: list[Anomaly]) -> str:
    def count(ops: list, status: str) -> int:
        return sum(1 for op in ops if op.status == status)

    epochs = {sample.epoch for sample in history.samples}
    kinds = defaultdict(int)
    for anomaly in anomalies:
        kinds[anomaly.kind] += 1
    return (f"{len(history.samples)} quorum samples over {len(epochs)} epochs; "
            f"CreateTopics {count(history.topic_ops, OK)} ok, {count(history.topic_ops, FAIL)} "
            f"failed, {count(history.topic_ops, INFO)} indeterminate; reassignments "
            f"{count(history.reassignments, OK)} ok, {count(history.reassignments, FAIL)} "
            f"failed, {count(history.reassignments, INFO)} indeterminate; anomalies: "
            + (", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) or "none"))
