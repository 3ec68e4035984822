"""The Kafka side of scaling a broker pool, one step per reconcile, each safe to repeat:

- drain: before a pool shrinks, the replicas of the brokers that go move to the ones that
  stay (AlterPartitionReassignments, the plan from drain.py); the pool may shrink once they
  hold nothing, by the metadata and by their own log directories. A drain that cannot
  complete is refused before anything moves.
- clean up: once their pods are gone, the removed brokers are unregistered (UnregisterBroker)
  and, with deleteClaim, their claims deleted.
- rebalance: after a pool grew (rebalanceOnScale), partitions move until replicas and
  leaderships are balanced (balance.py), then preferred leaders are elected.

With spec.replicationThrottle, the moves of both are throttled (throttle.py): set before
they start, cleared once nothing moves.

What a step did or waits for comes back as a status entry and Events; nothing is kept in
memory, so an operator restarted in the middle carries on from the cluster and the status.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from moldau.client.admin import AsyncAdmin, ElectionType
from moldau.client.errors import BrokerIdNotRegisteredError, KafkaError
from moldau.client.types import TopicPartition
from moldau.operator.balance import balance, leader_counts, replica_counts
from moldau.operator.drain import drain, drain_refusal, holding
from moldau.operator.kafkaview import KafkaView
from moldau.operator.pools import Refusal, ScaleDown
from moldau.operator.throttle import clear_throttle, throttle_moves

DRAIN_NOT_POSSIBLE = "DrainNotPossible"
PENDING, MOVING, COMPLETE = "Pending", "Moving", "Complete"

Event = tuple[str, str, bool]  # reason, message, warning?


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(ids)))


@dataclass
class Drains:
    shrink: dict[str, int] = field(default_factory=dict)  # pool -> replicas it may go to now
    refusals: list[Refusal] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


async def _move(admin: AsyncAdmin, assignment: Mapping[tuple[str, int], Sequence[int]],
                targets: Mapping[tuple[str, int], Sequence[int]], throttle: int | None,
                timeout: float) -> list[str]:
    """Start the moves, throttled if asked; the errors of those that did not start."""
    await throttle_moves(admin, assignment, targets, throttle, timeout)
    answers = await admin.alter_partition_reassignments_each(
        {TopicPartition(topic, p): list(replicas) for (topic, p), replicas in targets.items()},
        timeout=timeout)
    return [str(error) for error in answers.values() if error is not None]


async def _elect_preferred(admin: AsyncAdmin, view: KafkaView, keys: Iterable[tuple[str, int]],
                           timeout: float) -> None:
    """Preferred leaders where the first replica does not lead; best effort (a replica not
    in sync yet is elected by Kafka's own leader rebalance later)."""
    wanted = [TopicPartition(topic, p) for topic, p in keys]
    if wanted:
        with contextlib.suppress(KafkaError, OSError):
            await admin.elect_leaders(ElectionType.PREFERRED, wanted, timeout=timeout)


def _not_leading(assignment: Mapping[tuple[str, int], Sequence[int]], view: KafkaView
                 ) -> list[tuple[str, int]]:
    leaders = {p.key: p.leader for p in view.partitions}
    return [key for key, replicas in assignment.items()
            if replicas and leaders.get(key) != replicas[0]]


async def _logs_left(admin: AsyncAdmin, brokers: Iterable[int], timeout: float
                     ) -> dict[int, int]:
    """Replica logs each broker still has on disk (a broker that does not answer is not
    counted: its pod may already be gone)."""
    left = {}
    for broker in brokers:
        try:
            dirs = (await admin.describe_log_dirs([broker], timeout=timeout)).get(broker, {})
        except (KafkaError, OSError):
            continue
        count = sum(len(d.replicas) for d in dirs.values())
        if count:
            left[broker] = count
    return left


async def _moves_done(admin: AsyncAdmin, view: KafkaView, timeout: float) -> None:
    """Nothing moves: the throttle of the moves (if any is left) goes."""
    await clear_throttle(admin, view.brokers, {topic for topic, _ in view.assignment()},
                         timeout)


async def drain_step(admin: AsyncAdmin, view: KafkaView | None,
                     scale_downs: Sequence[ScaleDown], expected: Iterable[int],
                     timeout: float, throttle: int | None = None) -> Drains:
    """One step of each pool's drain. `expected`: the broker ids of the cluster as it runs
    (the leaving ones included); `throttle`: bytes per second for the moves."""
    out = Drains()
    if not scale_downs:
        return out
    leaving = {node for down in scale_downs for node in down.leaving}
    remaining = sorted(set(expected) - leaving)
    for down in scale_downs:
        entry: dict[str, Any] = {"pool": down.pool, "from": down.live, "to": down.replicas,
                                 "nodeIds": list(down.leaving)}
        out.status.append(entry)
        if view is None:
            entry.update(phase="Draining", message="waiting for the cluster to answer")
            continue
        assignment = view.assignment()
        held = holding(assignment, down.leaving)
        if held:
            moving = len(view.moving)
            if not moving:
                # Judged with nothing moving: a partition being moved lists its old and new
                # replicas together.
                refused = drain_refusal(assignment, down.leaving, remaining)
                if refused:
                    out.refusals.append(Refusal(DRAIN_NOT_POSSIBLE, refused))
                    entry.update(phase="Refused", message=refused)
                    continue
                targets = drain(assignment, down.leaving, remaining, view.racks)
                errors = await _move(admin, assignment, targets, throttle, timeout)
                moving = len(targets) - len(errors)
                out.events.append(("DrainStarted", (
                    f"moving {len(targets)} partitions off brokers {_ids(down.leaving)} of "
                    f"node pool '{down.pool}' to {_ids(remaining)}"
                    + (f"; refused: {'; '.join(errors[:3])}" if errors else "")), bool(errors)))
            entry.update(phase="Draining", message=(
                f"brokers {_ids(down.leaving)} hold {sum(held.values())} replicas; "
                f"{moving} partition move(s) under way"))
            continue
        if not view.moving:
            await _moves_done(admin, view, timeout)
        logs = await _logs_left(admin, down.leaving, timeout)
        if logs:
            entry.update(phase="Draining", message=(
                f"waiting for brokers {_ids(logs)} to delete {sum(logs.values())} replica "
                "logs"))
            continue
        await _elect_preferred(admin, view, _not_leading(assignment, view), timeout)
        out.shrink[down.pool] = down.replicas
        entry.update(phase="Removing", message=(
            f"brokers {_ids(down.leaving)} hold nothing: the StatefulSet shrinks to "
            f"{down.replicas}"))
        out.events.append(("Drained", f"brokers {_ids(down.leaving)} of node pool "
                                      f"'{down.pool}' hold no replicas", False))
    return out


async def unregister(admin: AsyncAdmin, node_ids: Iterable[int], timeout: float) -> None:
    """Unregister each broker; one the controller does not know is done already."""
    for node in node_ids:
        with contextlib.suppress(BrokerIdNotRegisteredError):
            await admin.unregister_broker(node, timeout=timeout)


def _range(counts: Mapping[int, int]) -> str:
    low, high = min(counts.values()), max(counts.values())
    return f"{low}" if low == high else f"{low}-{high}"


def balance_summary(assignment: Mapping[tuple[str, int], Sequence[int]],
                    brokers: Sequence[int]) -> str:
    return (f"replicas per broker {_range(replica_counts(assignment, brokers))}, "
            f"preferred leaderships {_range(leader_counts(assignment, brokers))}")


def scale_up_request(added: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """The status entry that asks for a rebalance once the new brokers registered."""
    ids = sorted(node for nodes in added.values() for node in nodes)
    return {"state": PENDING, "reason": "ScaleUp", "brokers": ids,
            "message": f"brokers {_ids(ids)} added: waiting for them to register"}


async def rebalance_step(admin: AsyncAdmin, view: KafkaView | None,
                         state: Mapping[str, Any], brokers: Sequence[int],
                         timeout: float, throttle: int | None = None
                         ) -> tuple[dict[str, Any], list[Event]]:
    """One step of a pending rebalance over `brokers`, its moves throttled to `throttle`
    bytes per second if given; (the new status entry, Events)."""
    entry = dict(state)
    if entry.get("state") not in (PENDING, MOVING):
        return entry, []
    if view is None:
        entry["message"] = "waiting for the cluster to answer"
        return entry, []
    missing = sorted(set(brokers) - view.brokers)
    if missing:
        entry["message"] = f"waiting for brokers {_ids(missing)} to register"
        return entry, []
    if view.moving:
        entry.update(state=MOVING, message=f"{len(view.moving)} partition move(s) under way")
        return entry, []
    assignment = view.assignment()
    targets = balance(assignment, brokers, view.racks)
    if targets:
        errors = await _move(admin, assignment, targets, throttle, timeout)
        entry.update(state=MOVING, message=(
            f"moving {len(targets) - len(errors)} partitions: "
            f"{balance_summary(assignment, brokers)} before"))
        return entry, [("RebalanceStarted", (
            f"moving {len(targets)} partitions to balance replicas and leaderships over "
            f"brokers {_ids(brokers)}" + (f"; refused: {'; '.join(errors[:3])}" if errors
                                         else "")), bool(errors))]
    await _moves_done(admin, view, timeout)
    await _elect_preferred(admin, view, _not_leading(assignment, view), timeout)
    summary = balance_summary(assignment, brokers)
    entry.update(state=COMPLETE, message=f"balanced: {summary}")
    return entry, [("Rebalanced", f"brokers {_ids(brokers)} balanced: {summary}", False)]
