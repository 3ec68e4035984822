"""Partition assignors for the classic consumer group protocol.

The group leader runs one of these over every member's subscription and sends each member
its share in SyncGroup. The built-in assignors follow the semantics of Kafka's own, so a
group that mixes Moldau consumers with other Kafka clients ends up with the same kind of
assignment whichever member happens to lead:

- `range` (RangeAssignor): per topic, contiguous ranges of partitions over the members
  subscribed to it; the first members (in member order) get one partition more.
- `roundrobin` (RoundRobinAssignor): every partition of every subscribed topic, sorted by
  topic and partition, dealt in turn to the members, skipping members not subscribed.
- `sticky` (StickyAssignor): balanced, and keeps as much of the previous assignment as it
  can; eager only. A member reports what it owned in its subscription user data.
- `cooperative-sticky` (CooperativeStickyAssignor): the same algorithm for the cooperative
  protocol. Ownership comes from the subscription's owned partitions; a partition that has
  to move to another member is only revoked in this round and handed out in the next.

Member order for `range` and `roundrobin` is Kafka's: static members (with a
group.instance.id) first, by instance id, then the others by member id, comparing strings
as Java does (by UTF-16 code unit).
"""

from __future__ import annotations

import heapq
import struct
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from moldau.client.consumer_protocol import Assignment, Subscription
from moldau.client.types import TopicPartition
from moldau.config import ConfigError

__all__ = [
    "ASSIGNORS",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
    "resolve_assignors",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# The generation a member reports when it has none (never joined, or an old client).
NO_GENERATION = -1


class RebalanceProtocol(Enum):
    """How partitions change hands in a rebalance. EAGER: every member gives up all its
    partitions before rejoining. COOPERATIVE (incremental): members keep what they own and
    only give up what the new assignment takes away. The values are Kafka's ids."""

    EAGER = 0
    COOPERATIVE = 1


@dataclass(frozen=True)
class MemberSubscription:
    """One group member as the leader sees it in the JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription


class PartitionAssignor(ABC):
    """Computes the group's assignment on the leader, and keeps whatever per-member state
    the assignor needs between rebalances (sticky assignors remember what they got)."""

    # The protocol name sent in JoinGroup; the coordinator picks one all members support.
    name: str
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        """Extra bytes this member sends in its subscription (None: nothing)."""
        return None

    @abstractmethod
    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> dict[str, Assignment]:
        """Assign the partitions of the subscribed topics that exist (a count per topic in
        `partitions_per_topic`) to the members. Every member gets an entry, maybe empty."""

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called on every member with its own assignment once a rebalance completes."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ---------------------------------------------------------------------------------------
# Ordering helpers


def _java_order(value: str) -> bytes:
    """A sort key that orders strings as Java's String.compareTo does: by UTF-16 code unit
    (which differs from code point order only beyond the Basic Multilingual Plane)."""
    return value.encode("utf-16-be", "surrogatepass")


def _member_order(member: MemberSubscription) -> tuple[int, bytes, bytes]:
    """Kafka's member order for the range and round-robin assignors: members with a group
    instance id first, ordered by it, then the rest ordered by member id."""
    if member.group_instance_id is not None:
        return (0, _java_order(member.group_instance_id), _java_order(member.member_id))
    return (1, _java_order(member.member_id), b"")


def _partition_order(tp: TopicPartition) -> tuple[bytes, int]:
    return (_java_order(tp.topic), tp.partition)


def _unique_members(members: Sequence[MemberSubscription]) -> list[MemberSubscription]:
    """The members with duplicate member ids collapsed (the last entry wins)."""
    by_id = {member.member_id: member for member in members}
    return list(by_id.values())


def _existing(topic: str, partitions_per_topic: Mapping[str, int]) -> int:
    """The partition count of a topic, or 0 when it is unknown."""
    count = partitions_per_topic.get(topic)
    return count if count is not None and count > 0 else 0


def _result(assigned: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
    return {member: Assignment(sorted(parts, key=_partition_order))
            for member, parts in assigned.items()}


# ---------------------------------------------------------------------------------------
# Range and round robin


class RangeAssignor(PartitionAssignor):
    """Per topic, the subscribed members in member order each take a contiguous range of
    partitions; with n partitions and m members the first n % m get one extra.

    Two members C0 and C1 subscribed to t0 and t1 with three partitions each:
    C0 gets t0p0, t0p1, t1p0, t1p1 and C1 gets t0p2, t1p2."""

    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> dict[str, Assignment]:
        unique = _unique_members(members)
        assigned: dict[str, list[TopicPartition]] = {m.member_id: [] for m in unique}
        subscribers: dict[str, list[MemberSubscription]] = {}
        for member in unique:
            for topic in dict.fromkeys(member.subscription.topics):
                subscribers.setdefault(topic, []).append(member)
        for topic, consumers in subscribers.items():
            count = _existing(topic, partitions_per_topic)
            if not count:
                continue
            consumers.sort(key=_member_order)
            share, extra = divmod(count, len(consumers))
            start = 0
            for index, member in enumerate(consumers):
                length = share + (1 if index < extra else 0)
                assigned[member.member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return _result(assigned)


class RoundRobinAssignor(PartitionAssignor):
    """All partitions of all subscribed topics, sorted by topic then partition, dealt to
    the members in member order, passing over members not subscribed to the topic.

    Two members C0 and C1 subscribed to t0 and t1 with three partitions each:
    C0 gets t0p0, t0p2, t1p1 and C1 gets t0p1, t1p0, t1p2."""

    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> dict[str, Assignment]:
        ordered = sorted(_unique_members(members), key=_member_order)
        assigned: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        topic_sets = [set(m.subscription.topics) for m in ordered]
        topics = sorted(set().union(*topic_sets), key=_java_order)
        position = 0
        for topic in topics:
            for partition in range(_existing(topic, partitions_per_topic)):
                # Some member is subscribed to the topic, so this stops.
                while topic not in topic_sets[position]:
                    position = (position + 1) % len(ordered)
                assigned[ordered[position].member_id].append(TopicPartition(topic, partition))
                position = (position + 1) % len(ordered)
        return _result(assigned)


# ---------------------------------------------------------------------------------------
# Sticky user data


class _Truncated(ValueError):
    pass


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise _Truncated("user data is truncated or malformed")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def remaining(self) -> int:
        return len(self.data) - self.pos


def encode_sticky_user_data(partitions: Sequence[TopicPartition], generation: int) -> bytes:
    """The StickyAssignor's subscription user data: the member's current partitions as
    [topic string, partitions [int32]] followed by its generation (int32), in Kafka's
    fixed-width encoding (int16 string lengths, int32 array lengths)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_I32.pack(len(by_topic))]
    for topic, indexes in by_topic.items():
        raw = topic.encode()
        out.append(_I16.pack(len(raw)))
        out.append(raw)
        out.append(_I32.pack(len(indexes)))
        out.extend(_I32.pack(index) for index in indexes)
    out.append(_I32.pack(generation))
    return b"".join(out)


def _read_sticky(data: bytes) -> tuple[list[TopicPartition], int | None, int]:
    """Parse StickyAssignor user data; also returns how many bytes were left over."""
    cursor = _Cursor(data)
    partitions: list[TopicPartition] = []
    topics = cursor.i32()
    if topics < 0:
        raise _Truncated("negative array length")
    for _ in range(topics):
        length = cursor.i16()
        if length < 0:
            raise _Truncated("null topic name")
        topic = cursor.take(length).decode()
        count = cursor.i32()
        if count < 0:
            raise _Truncated("negative array length")
        partitions.extend(TopicPartition(topic, cursor.i32()) for _ in range(count))
    # The first version of the layout had no generation.
    generation = cursor.i32() if cursor.remaining() >= 4 else None
    return partitions, generation, cursor.remaining()


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """The partitions and generation in StickyAssignor user data. The generation is None
    when the data predates it; data that cannot be parsed gives ([], NO_GENERATION), so
    the member's previous assignment is simply ignored."""
    if not data:
        return [], None
    try:
        partitions, generation, _ = _read_sticky(data)
    except (_Truncated, UnicodeDecodeError):
        return [], NO_GENERATION
    return partitions, generation


def _decode_generation(data: bytes | None) -> int:
    """The generation in CooperativeStickyAssignor user data (a bare int32). Some clients
    send the StickyAssignor layout under the cooperative name, so a payload that parses
    exactly as that layout is read as such."""
    if data is None or len(data) < 4:
        return NO_GENERATION
    if len(data) > 4:
        try:
            _, generation, left = _read_sticky(data)
        except (_Truncated, UnicodeDecodeError):
            generation, left = None, -1
        if generation is not None and left == 0:
            return generation
    return _I32.unpack_from(data)[0]


# ---------------------------------------------------------------------------------------
# The sticky algorithm


@dataclass
class _Previous:
    """Who owned what before this rebalance, after settling conflicting claims."""

    # member -> its valid previous partitions (subscribed and existing), in its own order
    owned: dict[str, list[TopicPartition]]
    # partition -> the member whose claim won; None when equal claims cancelled out
    winner: dict[TopicPartition, str | None]


class _AbstractStickyAssignor(PartitionAssignor):
    """The algorithm shared by the sticky and cooperative-sticky assignors.

    1. Previous ownership: each member's claimed partitions with its generation. A claim
       from a higher generation beats one from a lower; claims on the same partition from
       the same generation cancel out (nobody keeps it).
    2. When every member can take the same topics, members keep their partitions up to
       their quota (floor or ceiling of partitions / members; only as many members as the
       remainder get the ceiling) and the rest is dealt round robin to those under quota.
    3. Otherwise members keep what they owned and are still subscribed to, the remaining
       partitions go one by one to the least loaded member that can take them (topics with
       the fewest candidates first), and then partitions are moved, along chains of members
       where needed, from the most loaded members to members with at least two fewer until
       no such move exists. Partitions handed out in this round move before kept ones.
    """

    @abstractmethod
    def _member_data(self, subscription: Subscription) -> tuple[list[TopicPartition], int]:
        """The partitions a member owned and the generation it owned them in."""

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> dict[str, Assignment]:
        unique = _unique_members(members)
        if not unique:
            return {}
        order = sorted((m.member_id for m in unique), key=_java_order)
        eligible = {m.member_id: frozenset(t for t in m.subscription.topics
                                           if _existing(t, partitions_per_topic))
                    for m in unique}
        previous = self._previous(unique, eligible, partitions_per_topic)
        topic_sets = set(eligible.values())
        if len(topic_sets) == 1:
            topics = sorted(next(iter(topic_sets)), key=_java_order)
            assigned = _assign_even(order, topics, partitions_per_topic, previous.owned)
        else:
            assigned = _assign_uneven(order, eligible, partitions_per_topic, previous.owned)
        self._adjust(assigned, unique, previous)
        return _result(assigned)

    def _previous(self, members: list[MemberSubscription], eligible: dict[str, frozenset[str]],
                  partitions_per_topic: Mapping[str, int]) -> _Previous:
        # Topics someone may be assigned: claims on anything else are dropped up front.
        assignable = set().union(*eligible.values())
        claims: dict[str, list[TopicPartition]] = {}
        best: dict[TopicPartition, tuple[int, list[str]]] = {}
        for member in members:
            partitions, generation = self._member_data(member.subscription)
            mine = [tp for tp in dict.fromkeys(partitions)
                    if tp.topic in assignable
                    and 0 <= tp.partition < partitions_per_topic[tp.topic]]
            claims[member.member_id] = mine
            for tp in mine:
                current = best.get(tp)
                if current is None or generation > current[0]:
                    best[tp] = (generation, [member.member_id])
                elif generation == current[0]:
                    current[1].append(member.member_id)
        winner = {tp: (who[0] if len(who) == 1 else None) for tp, (_, who) in best.items()}
        owned = {member: [tp for tp in mine
                          if winner[tp] == member and tp.topic in eligible[member]]
                 for member, mine in claims.items()}
        return _Previous(owned, winner)

    def _adjust(self, assigned: dict[str, list[TopicPartition]],
                members: list[MemberSubscription], previous: _Previous) -> None:
        """A hook to change the computed assignment in place (cooperative uses it)."""
        return None


def _assign_even(order: list[str], topics: list[str], partitions_per_topic: Mapping[str, int],
                 owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Every member can take every topic: an exact balance keeping the most ownership."""
    total = sum(partitions_per_topic[t] for t in topics)
    quota, extra = divmod(total, len(order))
    assigned: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    under: list[str] = []       # below quota after keeping what they own
    at_quota: list[str] = []    # at quota, may still take one of the `extra` partitions
    for member in order:
        mine = owned[member]
        if len(mine) > quota and extra > 0:
            keep = mine[:quota + 1]
            extra -= 1
        else:
            keep = mine[:quota]
            (under if len(keep) < quota else at_quota).append(member)
        assigned[member] = list(keep)
        taken.update(keep)
    free = (TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t]))
    pending = (tp for tp in free if tp not in taken)
    # Fill the members below quota in turn, one partition each per round.
    while under:
        still_under = []
        for member in under:
            assigned[member].append(next(pending))
            (still_under if len(assigned[member]) < quota else at_quota).append(member)
        under = still_under
    # What remains is exactly one partition for each of `extra` members at quota.
    for member in at_quota[:extra]:
        assigned[member].append(next(pending))
    return assigned


def _assign_uneven(order: list[str], eligible: Mapping[str, frozenset[str]],
                   partitions_per_topic: Mapping[str, int],
                   owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Members subscribe to different topics: keep ownership, fill greedily, rebalance."""
    rank = {member: index for index, member in enumerate(order)}
    candidates: dict[str, list[str]] = {}
    for member in order:
        for topic in eligible[member]:
            candidates.setdefault(topic, []).append(member)
    # Per member and topic, the partition numbers it keeps from before and those it is
    # given in this round; moves take from the second first.
    kept: dict[str, dict[str, list[int]]] = {member: {} for member in order}
    fresh: dict[str, dict[str, list[int]]] = {member: {} for member in order}
    load = dict.fromkeys(order, 0)
    taken: set[TopicPartition] = set()
    for member in order:
        for tp in owned[member]:
            kept[member].setdefault(tp.topic, []).append(tp.partition)
            taken.add(tp)
        load[member] = len(owned[member])

    # The partitions nobody keeps go to the least loaded candidate, topics with the fewest
    # candidates first.
    for topic in sorted(candidates, key=lambda t: (len(candidates[t]), _java_order(t))):
        free = [p for p in range(partitions_per_topic[topic])
                if TopicPartition(topic, p) not in taken]
        if not free:
            continue
        heap = [(load[m], rank[m], m) for m in candidates[topic]]
        heapq.heapify(heap)
        for partition in free:
            count, position, member = heapq.heappop(heap)
            fresh[member].setdefault(topic, []).append(partition)
            load[member] = count + 1
            heapq.heappush(heap, (count + 1, position, member))

    _rebalance(order, candidates, kept, fresh, load)

    assigned: dict[str, list[TopicPartition]] = {}
    for member in order:
        parts = [TopicPartition(t, p) for t, ps in kept[member].items() for p in ps]
        parts.extend(TopicPartition(t, p) for t, ps in fresh[member].items() for p in ps)
        assigned[member] = parts
    return assigned


def _held_topics(member: str, kept: Mapping[str, dict[str, list[int]]],
                 fresh: Mapping[str, dict[str, list[int]]]) -> Iterator[str]:
    """The topics a member holds partitions of, those given in this round first."""
    for topic, partitions in fresh[member].items():
        if partitions:
            yield topic
    for topic, partitions in kept[member].items():
        if partitions and not fresh[member].get(topic):
            yield topic


def _rebalance(order: list[str], candidates: Mapping[str, list[str]],
               kept: dict[str, dict[str, list[int]]], fresh: dict[str, dict[str, list[int]]],
               load: dict[str, int]) -> None:
    """Move partitions until no member could pass one on, directly or along a chain of
    members, to a member with at least two partitions fewer.

    Works top down: from all the most loaded members at once, a breadth-first search over
    "holds a partition of a topic the next member may take" looks for a member at least two
    below. If found, one partition moves along each link of the path (the loads of the
    members in between do not change). If not, everything the search reached is at most
    one below the top and can never change again (nothing can reach it from above, and it
    reaches nothing low enough), so it is set aside and the next level is tried."""
    active = {member for members in candidates.values() for member in members}
    top = 0
    sources: list[str] = []     # the active members at the top load
    while active:
        if not sources:
            top = max(load[member] for member in active)
            sources = [member for member in order if member in active and load[member] == top]
        reached: set[str] = set(sources)
        expanded: set[str] = set()
        link: dict[str, tuple[str, str]] = {}
        queue = deque(sources)
        target: str | None = None
        while queue and target is None:
            giver = queue.popleft()
            for topic in _held_topics(giver, kept, fresh):
                if topic in expanded:
                    continue
                expanded.add(topic)
                for taker in candidates[topic]:
                    if taker in reached or taker not in active:
                        continue
                    reached.add(taker)
                    link[taker] = (giver, topic)
                    if load[taker] <= top - 2:
                        target = taker
                        break
                    queue.append(taker)
                if target is not None:
                    break
        if target is None:
            active -= reached
            sources = []
            continue
        taker = target
        while taker in link:
            giver, topic = link[taker]
            source = fresh[giver].get(topic) or kept[giver][topic]
            fresh[taker].setdefault(topic, []).append(source.pop())
            taker = giver
        load[target] += 1
        load[taker] -= 1
        sources.remove(taker)


class StickyAssignor(_AbstractStickyAssignor):
    """Kafka's StickyAssignor (eager): balanced, keeping as much of the previous assignment
    as possible. Each member sends its current partitions and generation as user data."""

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        self._partitions: list[TopicPartition] | None = None
        self._generation = NO_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        if self._partitions is None:
            return None
        return encode_sticky_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._partitions = list(assignment.partitions)
        self._generation = generation

    def _member_data(self, subscription: Subscription) -> tuple[list[TopicPartition], int]:
        # Eager members revoke everything before joining, so they normally report their
        # partitions only in the user data; use the owned partitions when they are given.
        partitions, generation = decode_sticky_user_data(subscription.user_data)
        if subscription.owned_partitions:
            partitions = list(subscription.owned_partitions)
            if subscription.generation_id >= 0:
                generation = subscription.generation_id
        return partitions, NO_GENERATION if generation is None else generation


class CooperativeStickyAssignor(_AbstractStickyAssignor):
    """Kafka's CooperativeStickyAssignor: the sticky algorithm over the partitions members
    report as owned. A partition that would move from its current owner to another member
    is left out of the new owner's assignment this round: the old owner revokes it, then
    rejoins, and the follow-up rebalance hands it out. The user data is the generation."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        self._generation = NO_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return _I32.pack(self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._generation = generation

    def _member_data(self, subscription: Subscription) -> tuple[list[TopicPartition], int]:
        generation = subscription.generation_id
        if generation < 0:
            generation = _decode_generation(subscription.user_data)
        return list(subscription.owned_partitions), generation

    def _adjust(self, assigned: dict[str, list[TopicPartition]],
                members: list[MemberSubscription], previous: _Previous) -> None:
        owners: dict[TopicPartition, set[str]] = {}
        for member in members:
            for tp in member.subscription.owned_partitions:
                owners.setdefault(tp, set()).add(member.member_id)
        for member, partitions in assigned.items():
            # Withhold a partition while some other member still owns it, unless this
            # member is its rightful previous owner (the other claim is stale).
            assigned[member] = [
                tp for tp in partitions
                if not (owners.get(tp, set()) - {member}) or previous.winner.get(tp) == member]


ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}

_JAVA_CLASS_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": RangeAssignor.name,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": RoundRobinAssignor.name,
    "org.apache.kafka.clients.consumer.StickyAssignor": StickyAssignor.name,
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor":
        CooperativeStickyAssignor.name,
}

_SETTING = "partition.assignment.strategy"


def _by_name(name: str) -> PartitionAssignor:
    cls = ASSIGNORS.get(_JAVA_CLASS_NAMES.get(name, name))
    if cls is None:
        known = ", ".join(ASSIGNORS)
        raise ConfigError(f"Invalid value {name!r} for configuration {_SETTING}: unknown "
                          f"assignor (known: {known}, or their Kafka class names)")
    return cls()


def resolve_assignors(
        spec: str | Sequence[str | PartitionAssignor | type[PartitionAssignor]],
) -> list[PartitionAssignor]:
    """The assignors named by a partition.assignment.strategy value, in preference order:
    a comma-separated string or a list of names (short names or Kafka's Java class names),
    assignor instances or assignor classes."""
    if isinstance(spec, str):
        items: list[object] = list(spec.split(","))
    elif isinstance(spec, Sequence):
        items = list(spec)
    else:
        raise ConfigError(f"Invalid value {spec!r} for configuration {_SETTING}: expected a "
                          f"comma-separated string or a list of assignors")
    assignors: list[PartitionAssignor] = []
    for item in items:
        if isinstance(item, str):
            found = [_by_name(name.strip()) for name in item.split(",") if name.strip()]
        elif isinstance(item, PartitionAssignor):
            found = [item]
        elif isinstance(item, type) and issubclass(item, PartitionAssignor):
            try:
                found = [item()]
            except TypeError as exc:
                raise ConfigError(f"Invalid value {item.__name__} for configuration "
                                  f"{_SETTING}: cannot create it ({exc})") from exc
        else:
            raise ConfigError(f"Invalid value {item!r} for configuration {_SETTING}: not an "
                              f"assignor name, PartitionAssignor or PartitionAssignor class")
        assignors.extend(found)
    names: set[str] = set()
    for assignor in assignors:
        name = getattr(assignor, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"Invalid value {assignor!r} for configuration {_SETTING}: the "
                              f"assignor has no name")
        if name in names:
            raise ConfigError(f"Invalid value for configuration {_SETTING}: assignor "
                              f"{name!r} is listed more than once")
        names.add(name)
    if not assignors:
        raise ConfigError(f"Invalid value for configuration {_SETTING}: at least one "
                          f"assignor is required")
    return assignors
