"""Draining brokers before they are removed: whether it can be done, and where their replicas
go. Pure, from the assignment and the brokers that stay.

A drain cannot complete when a topic has more replicas per partition than brokers would
remain: it is refused before anything moves. Otherwise each replica on a leaving broker is
replaced by the remaining broker holding the fewest replicas that does not hold the
partition yet (on a rack the partition does not use, when racks are set). The replicas that
stay keep their order and the new ones go last, so the preferred leader is a replica that
already has the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from moldau.operator.balance import Assignment, Key, Racks, place, replica_counts


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(ids)))


def drain_refusal(assignment: Assignment, leaving: Iterable[int], remaining: Iterable[int]
                  ) -> str | None:
    """Why the leaving brokers cannot be drained into the remaining ones, or None."""
    leaving, remaining = sorted(set(leaving)), sorted(set(remaining))
    factors: dict[str, int] = {}
    for (topic, _), replicas in assignment.items():
        factors[topic] = max(factors.get(topic, 0), len(replicas))
    too_wide = sorted((topic, factor) for topic, factor in factors.items()
                      if factor > len(remaining))
    if not too_wide:
        return None
    named = ", ".join(f"'{topic}' has replication factor {factor}"
                      for topic, factor in too_wide[:3])
    if len(too_wide) > 3:
        named += f" (and {len(too_wide) - 3} more topics)"
    return (f"cannot remove brokers {_ids(leaving)}: topic {named}, and only "
            f"{len(remaining)} broker{'s' if len(remaining) != 1 else ''} would remain "
            f"({_ids(remaining)}); lower the replication factor or keep more brokers")


def drain(assignment: Assignment, leaving: Iterable[int], remaining: Iterable[int],
          racks: Racks | None = None) -> dict[Key, tuple[int, ...]]:
    """The new replica list of each partition with a replica on a leaving broker. Call
    drain_refusal first: a partition that cannot be drained is left out."""
    racks = racks or {}
    gone = set(leaving)
    load = replica_counts(assignment, sorted(set(remaining)))
    targets: dict[Key, tuple[int, ...]] = {}
    for key in sorted(assignment):
        replicas = tuple(assignment[key])
        if not gone & set(replicas):
            continue
        kept = [r for r in replicas if r not in gone]
        added: list[int] = []
        for old in (r for r in replicas if r in gone):
            new = place([*kept, *added], old, load, racks)
            if new is None:
                break
            added.append(new)
            load[new] += 1
        else:
            targets[key] = (*kept, *added)
    return targets


def holding(assignment: Mapping[Key, Iterable[int]], brokers: Iterable[int]) -> dict[int, int]:
    """How many replicas each of `brokers` still holds (those holding none left out)."""
    wanted = set(brokers)
    counts: dict[int, int] = {}
    for replicas in assignment.values():
        for r in replicas:
            if r in wanted:
                counts[r] = counts.get(r, 0) + 1
    return counts
