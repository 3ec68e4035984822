"""Whether restarting a node now is safe ("is it safe now"), decided from a KafkaView alone:
pure functions, each returning what blocks (empty: nothing does), in words for the status.

- A broker may restart only if no partition it hosts would go under its topic's
  min.insync.replicas (Strimzi's canRoll rule): a partition already under it waits for the
  broker if it holds a replica there; one exactly at it waits if the broker is in its ISR.
  A partition with no more replicas than min.insync.replicas cannot stay writable through
  any restart of its replicas and does not hold the roll.
- A controller may restart only if the voters left caught up with the quorum leader still
  form a majority.
- Before any restart, the previous one must have settled: every voter caught up with the
  leader's log end (within `max_lag`), no partition left without a live leader, and every
  live broker back in the ISR of each partition it holds (partitions being moved aside).
"""

from __future__ import annotations

from collections.abc import Iterable

from moldau.client.admin import QuorumInfo
from moldau.operator.kafkaview import KafkaView

# How many metadata records a voter may trail the quorum leader and still count as caught up.
MAX_QUORUM_LAG = 50
SHOWN = 3  # how many partitions a message names before "and N more"


def _some(items: list[str]) -> str:
    if len(items) <= SHOWN:
        return ", ".join(items)
    return f"{', '.join(items[:SHOWN])} and {len(items) - SHOWN} more"


def broker_blockers(node: int, view: KafkaView) -> list[str]:
    """Partitions that would go (or are) under min.insync.replicas if `node` restarted."""
    under: list[str] = []
    at_limit: list[str] = []
    for partition in view.hosted_by(node):
        min_isr = view.min_isr.get(partition.topic, 1)
        if len(partition.replicas) <= min_isr:
            continue
        if len(partition.isr) < min_isr:
            under.append(partition.name)
        elif len(partition.isr) == min_isr and node in partition.isr:
            at_limit.append(partition.name)
    blockers = []
    if under:
        blockers.append(f"{_some(under)} already under min.insync.replicas")
    if at_limit:
        blockers.append(f"{_some(at_limit)} would go under min.insync.replicas")
    return blockers


def voter_lags(quorum: QuorumInfo) -> dict[int, int | None]:
    """Each voter's distance in records from the furthest log end (the leader's); None for
    a voter whose position the leader does not know."""
    top = max((voter.log_end_offset for voter in quorum.voters), default=-1)
    return {voter.replica_id: top - voter.log_end_offset if voter.log_end_offset >= 0
            else None for voter in quorum.voters}


def lagging_voters(quorum: QuorumInfo, max_lag: int = MAX_QUORUM_LAG) -> list[int]:
    return sorted(voter for voter, lag in voter_lags(quorum).items()
                  if lag is None or lag > max_lag)


def controller_blockers(node: int, quorum: QuorumInfo | None,
                        max_lag: int = MAX_QUORUM_LAG) -> list[str]:
    """Why restarting controller `node` would leave the quorum without a caught-up
    majority. A single voter always may restart: there is no other way to roll it."""
    if quorum is None:
        return ["the metadata quorum did not answer"]
    voters = [voter.replica_id for voter in quorum.voters]
    if len(voters) <= 1:
        return []
    lagging = set(lagging_voters(quorum, max_lag))
    remaining = [voter for voter in voters if voter != node and voter not in lagging]
    majority = len(voters) // 2 + 1
    if len(remaining) < majority:
        return [f"only {len(remaining)} of the other voters are caught up with the metadata "
                f"quorum; {majority} of {len(voters)} must stay"]
    return []


def unsettled(view: KafkaView, max_lag: int = MAX_QUORUM_LAG) -> list[str]:
    """What a previous restart has not recovered from yet (empty: the cluster has settled)."""
    gaps = []
    if view.quorum is not None:
        lagging = lagging_voters(view.quorum, max_lag)
        if lagging:
            gaps.append(f"controllers {', '.join(map(str, lagging))} to catch up with the "
                        "metadata quorum")
    leaderless = [p.name for p in view.partitions
                  if p.leader not in view.brokers and any(r in view.brokers for r in p.isr)]
    if leaderless:
        gaps.append(f"{_some(leaderless)} to get a live leader")
    outside = _outside_isr(view, view.brokers)
    if outside:
        gaps.append(f"{_some(outside)} to have {'their' if len(outside) > 1 else 'its'} "
                    "live replicas back in sync")
    return gaps


def _outside_isr(view: KafkaView, brokers: Iterable[int]) -> list[str]:
    live = set(brokers)
    return [p.name for p in view.partitions
            if p.key not in view.moving and any(r in live and r not in p.isr
                                                for r in p.replicas)]
