"""The balance planner: where replicas should be so that every broker holds as many replicas,
and leads as many partitions, as any other within one, moving as little as it can.

Pure: an assignment (partition -> replica list, the first replica the preferred leader) and
the brokers to spread over in, the partitions whose replica list changes out. Replicas move
one at a time from the fullest broker to the emptiest that can take it (a broker holds a
partition once); a move never lowers the number of racks a partition spans, so a rack-aware
placement stays rack-aware. Replicas on brokers outside the set (gone, or leaving) are placed
first. Leaderships then balance by reordering replica lists (no data moves): the preferred
leader of a partition on the broker leading the most becomes another of its replicas on a
broker leading fewer, through a chain of partitions when needed. Each move narrows the
spread, so the planner always ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

Key = tuple[str, int]  # (topic, partition)
Assignment = Mapping[Key, Sequence[int]]
Racks = Mapping[int, str | None]


def replica_counts(assignment: Assignment, brokers: Iterable[int]) -> Counter[int]:
    counts = Counter(dict.fromkeys(brokers, 0))
    counts.update(r for replicas in assignment.values() for r in replicas if r in counts)
    return counts


def leader_counts(assignment: Assignment, brokers: Iterable[int]) -> Counter[int]:
    counts = Counter(dict.fromkeys(brokers, 0))
    counts.update(replicas[0] for replicas in assignment.values()
                  if replicas and replicas[0] in counts)
    return counts


def spread(counts: Counter[int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def is_balanced(assignment: Assignment, brokers: Iterable[int]) -> bool:
    """Replicas and leaderships within one per broker, and no replica elsewhere."""
    members = set(brokers)
    return (all(r in members for replicas in assignment.values() for r in replicas)
            and spread(replica_counts(assignment, members)) <= 1
            and spread(leader_counts(assignment, members)) <= 1)


def rack_spread(replicas: Iterable[int], racks: Racks) -> int:
    """How many racks the replicas span (brokers without a rack count as their own)."""
    return len({racks.get(r) if racks.get(r) is not None else f"#{r}" for r in replicas})


def rack_aware(racks: Racks) -> bool:
    return any(rack is not None for rack in racks.values())


def _keeps_racks(replicas: Sequence[int], old: int, new: int, racks: Racks) -> bool:
    after = [new if r == old else r for r in replicas]
    return rack_spread(after, racks) >= rack_spread(replicas, racks)


def place(replicas: Sequence[int], old: int, load: Counter[int], racks: Racks) -> int | None:
    """The broker to take `old`'s replica: the least loaded one not already holding the
    partition, on a rack the partition does not use yet if there is one."""
    choices = [b for b in load if b not in replicas]
    if not choices:
        return None
    used = {racks.get(r) for r in replicas if r != old}
    return min(choices, key=lambda b: (rack_aware(racks) and racks.get(b) in used,
                                       load[b], b))


def _replace(replicas: Sequence[int], old: int, new: int) -> tuple[int, ...]:
    return tuple(new if r == old else r for r in replicas)


class _Plan:
    """The assignment being changed, with the counts and indexes the moves need."""

    def __init__(self, assignment: Assignment, members: list[int], racks: Racks) -> None:
        self.racks = racks
        self.aware = rack_aware(racks)
        self.current: dict[Key, tuple[int, ...]] = {}
        self.load = replica_counts({}, members)
        self.holds: dict[int, set[Key]] = {b: set() for b in members}
        self.leads: dict[int, set[Key]] = {b: set() for b in members}
        for key, replicas in assignment.items():
            self.current[key] = ()
            self.set(key, tuple(replicas))

    def set(self, key: Key, replicas: tuple[int, ...]) -> None:
        for i, r in enumerate(self.current[key]):
            if r in self.holds:
                self.holds[r].discard(key)
                self.load[r] -= 1
                if i == 0:
                    self.leads[r].discard(key)
        self.current[key] = replicas
        for i, r in enumerate(replicas):
            if r in self.holds:
                self.holds[r].add(key)
                self.load[r] += 1
                if i == 0:
                    self.leads[r].add(key)

    def place_outsiders(self) -> None:
        """Replicas on brokers outside the set go to the least loaded ones first."""
        for key in sorted(self.current):
            for old in self.current[key]:
                if old not in self.load:
                    new = place(self.current[key], old, self.load, self.racks)
                    if new is not None:
                        self.set(key, _replace(self.current[key], old, new))

    def move_one(self) -> bool:
        """One replica from a fuller broker to an emptier one (by at least two); False
        when no such move exists."""
        load = self.load
        by_load = sorted(load, key=lambda b: (-load[b], b))
        for source in by_load:
            for target in reversed(by_load):
                if load[source] - load[target] <= 1:
                    break
                movable = self.holds[source] - self.holds[target]
                if self.aware:
                    movable = {key for key in movable if _keeps_racks(
                        self.current[key], source, target, self.racks)}
                if movable:
                    # Followers first, so that leaderships move as little as replicas allow.
                    key = min(movable - self.leads[source] or movable)
                    self.set(key, _replace(self.current[key], source, target))
                    return True
        return False

    def lead_one(self) -> bool:
        """One preferred leadership from a broker leading the most to one leading at
        least two fewer, along a chain when no partition links them directly: the leader
        of a partition hands it to another of its replicas, which hands one of its own on,
        and so on (the brokers in between lead as many as before). False when none exists."""
        leads = {broker: len(keys) for broker, keys in self.leads.items()}
        top = max(leads.values())
        for source in sorted(b for b in leads if leads[b] == top):
            came_from: dict[int, tuple[int, Key] | None] = {source: None}
            queue = [source]
            while queue:
                broker = queue.pop(0)
                if leads[broker] <= top - 2:
                    while (link := came_from[broker]) is not None:
                        previous, key = link
                        self.set(key, (broker, *(r for r in self.current[key] if r != broker)))
                        broker = previous
                    return True
                for key in sorted(self.leads[broker]):
                    for replica in self.current[key][1:]:
                        if replica in leads and replica not in came_from:
                            came_from[replica] = (broker, key)
                            queue.append(replica)
        return False


def balance(assignment: Assignment, brokers: Iterable[int], racks: Racks | None = None
            ) -> dict[Key, tuple[int, ...]]:
    """The new replica list of every partition that changes (empty: already balanced as
    far as moves can balance it)."""
    members = sorted(set(brokers))
    if not members:
        return {}
    plan = _Plan(assignment, members, racks or {})
    plan.place_outsiders()
    while plan.move_one():
        pass
    while plan.lead_one():
        pass
    return {key: replicas for key, replicas in plan.current.items()
            if tuple(assignment[key]) != replicas}
