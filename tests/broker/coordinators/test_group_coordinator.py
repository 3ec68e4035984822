"""The classic group coordinator on its own: no sockets, a list standing in for
__consumer_offsets, small timeouts. Each test states the behaviour of Kafka's classic group
coordinator (GroupCoordinator.scala, and GroupMetadataManager.java / ClassicGroup.java /
OffsetMetadataManager.java since Kafka 3.7) that it checks.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable

import pytest

from moldau.broker.coordinators.group.coordinator import (
    GroupCoordinator,
    GroupSettings,
    OffsetCommit,
)
from moldau.broker.coordinators.group.group import GroupState
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.group.replay import LogRecord
from moldau.errors import ErrorCode

NONE = ErrorCode.none.value
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition.value
OFFSET_METADATA_TOO_LARGE = ErrorCode.offset_metadata_too_large.value
ILLEGAL_GENERATION = ErrorCode.illegal_generation.value
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.inconsistent_group_protocol.value
INVALID_GROUP_ID = ErrorCode.invalid_group_id.value
UNKNOWN_MEMBER_ID = ErrorCode.unknown_member_id.value
INVALID_SESSION_TIMEOUT = ErrorCode.invalid_session_timeout.value
REBALANCE_IN_PROGRESS = ErrorCode.rebalance_in_progress.value
NON_EMPTY_GROUP = ErrorCode.non_empty_group.value
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found.value
MEMBER_ID_REQUIRED = ErrorCode.member_id_required.value
GROUP_MAX_SIZE_REACHED = ErrorCode.group_max_size_reached.value
FENCED_INSTANCE_ID = ErrorCode.fenced_instance_id.value
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.group_subscribed_to_topic.value

EMPTY, PREPARING = GroupState.EMPTY, GroupState.PREPARING_REBALANCE
COMPLETING, STABLE = GroupState.COMPLETING_REBALANCE, GroupState.STABLE

SESSION_MS = 5000
HOUR_MS = 3600 * 1000


def code(value: object) -> int:
    return value.value if isinstance(value, ErrorCode) else int(value)  # type: ignore[arg-type]


def codes(values: list) -> list[int]:
    return [code(v) for v in values]


def run(coro, timeout: float = 10):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def at_once(coro):
    """The result of a coroutine that never waits: here the log is a list, so a commit is
    stored before commit() returns."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the coroutine waited")


def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0: what a consumer sends as protocol metadata."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def protocols(*names: str, topic: str = "t", user_data: bytes = b"") -> list[tuple[str, bytes]]:
    return [(name, subscription(topic, user_data=user_data)) for name in names]


class Harness:
    """A coordinator whose __consumer_offsets is a list of (group, key, value)."""

    def __init__(self, partition_exists: Callable[[str, int], bool] = lambda t, p: True,
                 **settings: int) -> None:
        defaults = {"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 10}
        defaults.update(settings)
        self.settings = GroupSettings(**defaults)
        self.log: list[tuple[str, bytes, bytes | None]] = []
        self.coordinator = GroupCoordinator(self.settings, self.write, partition_exists)

    def write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        self.log.extend((group_id, key, value) for key, value in records)

    def group(self, group_id: str):
        return self.coordinator.groups[group_id]

    async def join(self, group: str, member_id: str = "", instance: str | None = None,
                   session_ms: int = SESSION_MS, rebalance_ms: int = SESSION_MS,
                   protos: list[tuple[str, bytes]] | None = None,
                   protocol_type: str = "consumer", v4: bool = False, client_id: str = "c"):
        return await self.coordinator.join(
            group, member_id, instance, client_id, "/127.0.0.1", session_ms, rebalance_ms,
            protocol_type, protos if protos is not None else protocols("range"), v4)

    def join_task(self, group: str, **kwargs: object) -> asyncio.Task:
        return asyncio.ensure_future(self.join(group, **kwargs))

    async def sync(self, group: str, result, assignments: dict[str, bytes] | None = None,
                   instance: str | None = None):
        return await self.coordinator.sync(group, result.generation, result.member_id, instance,
                                           "consumer", result.protocol_name, assignments or {})

    def heartbeat(self, group: str, result, generation: int | None = None,
                  instance: str | None = None) -> int:
        return code(self.coordinator.heartbeat(
            group, result.generation if generation is None else generation, result.member_id,
            instance))

    def commit(self, group: str, offsets: dict[tuple[str, int], int], generation: int = -1,
               member_id: str = "", instance: str | None = None, metadata: str = "") -> list[int]:
        return codes(at_once(self.coordinator.commit(group, generation, member_id, instance, [
            OffsetCommit(t, p, o, 7, metadata) for (t, p), o in offsets.items()])))

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        found = self.coordinator.fetch_offsets(group, None)
        return {tp: stored.offset for tp, stored in found.items() if stored is not None}

    async def stable(self, group: str, *members: str, instance: str | None = None,
                     **kwargs: object) -> list:
        """Join the given client ids one by one into a Stable group; returns the results of
        the last generation (leader first in join order)."""
        results: list = []
        for client in members:
            if results:
                waiting = [self.join_task(group, client_id=client, instance=instance
                                          if client == members[0] else None, **kwargs)]
                await settle()
                waiting += [self.join_task(group, member_id=r.member_id, client_id=c,
                                           instance=instance if c == members[0] else None,
                                           **kwargs)
                            for r, c in zip(results, members, strict=False)]
                joined = await asyncio.gather(*waiting)
                results = joined[1:] + joined[:1]
            else:
                results = [await self.join(group, client_id=client, instance=instance,
                                           **kwargs)]
            assert all(r.error == NONE for r in results), results
            leader = next(r for r in results if r.member_id == r.leader)
            plan = {r.member_id: b"assignment-of-" + r.member_id.encode() for r in results}
            syncs = [self.sync(group, r, plan if r is leader else None,
                               instance=instance if r is results[0] else None)
                     for r in results]
            synced = await asyncio.gather(*syncs)
            assert all(s.error == NONE for s in synced), synced
        assert self.group(group).state is STABLE
        return results


async def settle(seconds: float = 0.01) -> None:
    """Let every task that can run do so."""
    await asyncio.sleep(seconds)


# --------------------------------------------------------------------------- states


def test_state_machine_empty_preparing_completing_stable():
    """Kafka: a new group is Empty; the first JoinGroup moves it to PreparingRebalance, the
    join phase ends in CompletingRebalance with generation 1, and the leader's SyncGroup
    makes it Stable."""
    h = Harness(initial_rebalance_delay_ms=100)

    async def scenario():
        task = h.join_task("g")
        await settle()
        group = h.group("g")
        assert (group.state, group.generation) == (PREPARING, 0)
        joined = await task
        assert (group.state, group.generation, joined.error) == (COMPLETING, 1, NONE)
        synced = await h.sync("g", joined, {joined.member_id: b"mine"})
        assert (synced.error, synced.assignment, group.state) == (NONE, b"mine", STABLE)
        assert h.heartbeat("g", joined) == NONE
        # The last member leaving ends in Empty with a new generation.
        assert codes(h.coordinator.leave("g", [(joined.member_id, None)])) == [NONE]
        assert (group.state, group.generation) == (EMPTY, 2)

    run(scenario())


def test_member_id_required_round_trip():
    """KIP-394 (JoinGroup v4+): a member without an id gets MEMBER_ID_REQUIRED and a new id,
    the group does not change; it joins when it comes back with that id. Ids that are not
    pending or members are UNKNOWN_MEMBER_ID, and unclaimed ids expire with the session."""
    h = Harness()

    async def scenario():
        first = await h.join("g", v4=True)
        assert first.error == MEMBER_ID_REQUIRED and first.member_id
        assert (h.group("g").state, h.group("g").members) == (EMPTY, {})
        joined = await h.join("g", member_id=first.member_id, v4=True)
        assert (joined.error, joined.member_id, joined.generation) == (NONE, first.member_id, 1)
        assert (await h.join("g", member_id="made-up", v4=True)).error == UNKNOWN_MEMBER_ID
        assert (await h.join("other", member_id="made-up", v4=True)).error == UNKNOWN_MEMBER_ID
        # A static member needs no second round trip.
        static = await h.join("s", instance="i-1", v4=True)
        assert static.error == NONE and static.member_id
        # Unclaimed: gone after its session timeout.
        pending = await h.join("p", v4=True, session_ms=50)
        assert pending.error == MEMBER_ID_REQUIRED
        await settle(0.15)
        late = await h.join("p", member_id=pending.member_id, v4=True, session_ms=50)
        assert late.error == UNKNOWN_MEMBER_ID

    run(scenario())


def test_only_the_leader_gets_the_members_and_followers_wait_for_its_assignment():
    h = Harness(initial_rebalance_delay_ms=50)

    async def scenario():
        a = h.join_task("g", client_id="a", protos=protocols("range", topic="t1"))
        await settle()
        b = h.join_task("g", client_id="b", protos=protocols("range", topic="t2"))
        ja, jb = await asyncio.gather(a, b)
        assert ja.generation == jb.generation == 1
        assert ja.leader == jb.leader == ja.member_id  # the first to join leads
        assert {(m, meta) for m, _, meta in ja.members} == {
            (ja.member_id, subscription("t1")), (jb.member_id, subscription("t2"))}
        assert jb.members == []
        follower = asyncio.ensure_future(h.sync("g", jb))
        await settle()
        assert not follower.done(), "a follower's SyncGroup must wait for the leader's"
        leader = await h.sync("g", ja, {ja.member_id: b"A"})  # b left out: empty assignment
        assert (leader.error, leader.assignment) == (NONE, b"A")
        assert ((await follower).error, (await follower).assignment) == (NONE, b"")
        # A follower's repeated SyncGroup in Stable returns the stored assignment.
        assert (await h.sync("g", jb)).assignment == b""

    run(scenario())


def test_protocol_selection_by_votes_and_inconsistent_protocols():
    """Kafka selects among the protocols every member supports; each member votes for the
    first of those in its own order, and the most votes win. A member sharing no protocol
    with the group, or of another protocol type, gets INCONSISTENT_GROUP_PROTOCOL; so does a
    first member with no protocol type or no protocols."""
    h = Harness(initial_rebalance_delay_ms=50)

    async def scenario():
        tasks = [h.join_task("g", protos=protocols("range", "roundrobin")),
                 h.join_task("g", protos=protocols("roundrobin", "range")),
                 h.join_task("g", protos=protocols("roundrobin", "range", "sticky"))]
        results = await asyncio.gather(*tasks)
        assert {r.protocol_name for r in results} == {"roundrobin"}
        leader = next(r for r in results if r.member_id == r.leader)
        await asyncio.gather(*(h.sync("g", r, {} if r is not leader else {
            x.member_id: b"" for x in results}) for r in results))
        assert h.group("g").state is STABLE

        assert (await h.join("g", protos=protocols("sticky"))).error == \
            INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join("g", protos=protocols("range"), protocol_type="connect")).error \
            == INCONSISTENT_GROUP_PROTOCOL
        assert h.group("g").state is STABLE and len(h.group("g").members) == 3
        assert (await h.join("new-1", protocol_type="")).error == INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join("new-2", protos=[])).error == INCONSISTENT_GROUP_PROTOCOL

        # Only range is common, though nobody lists it first.
        tasks = [h.join_task("h", protos=protocols("sticky", "range")),
                 h.join_task("h", protos=protocols("roundrobin", "range"))]
        assert {r.protocol_name for r in await asyncio.gather(*tasks)} == {"range"}

    run(scenario())


def test_invalid_group_id_and_session_timeout_limits():
    h = Harness(min_session_timeout_ms=100, max_session_timeout_ms=1000)

    async def scenario():
        assert (await h.join("")).error == INVALID_GROUP_ID
        assert (await h.join("g", session_ms=99)).error == INVALID_SESSION_TIMEOUT
        assert (await h.join("g", session_ms=1001)).error == INVALID_SESSION_TIMEOUT
        assert "g" not in h.coordinator.groups or not h.group("g").members
        assert (await h.join("g", session_ms=100)).error == NONE
        assert (await h.join("g2", session_ms=1000)).error == NONE

    run(scenario())


def test_illegal_generation_and_unknown_member():
    h = Harness()

    async def scenario():
        [a] = await h.stable("g", "a")
        assert h.heartbeat("g", a, generation=a.generation - 1) == ILLEGAL_GENERATION
        assert h.heartbeat("g", a, generation=a.generation + 1) == ILLEGAL_GENERATION
        assert (await h.coordinator.sync("g", a.generation + 1, a.member_id, None, None, None,
                                         {})).error == ILLEGAL_GENERATION
        assert h.commit("g", {("t", 0): 1}, generation=a.generation + 1,
                        member_id=a.member_id) == [ILLEGAL_GENERATION]
        assert code(h.coordinator.heartbeat("g", a.generation, "stranger", None)) == \
            UNKNOWN_MEMBER_ID
        assert code(h.coordinator.heartbeat("nope", 1, "x", None)) == UNKNOWN_MEMBER_ID
        # Offsets committed with a generation to a group that does not exist.
        assert h.commit("missing", {("t", 0): 1}, generation=3, member_id="x") == \
            [ILLEGAL_GENERATION]

    run(scenario())


def test_heartbeat_and_commit_during_a_rebalance():
    """Kafka: in PreparingRebalance a member's heartbeat answers REBALANCE_IN_PROGRESS
    (its commit with the current generation is still accepted); in CompletingRebalance
    heartbeats are fine but commits get REBALANCE_IN_PROGRESS."""
    h = Harness()

    async def scenario():
        [a] = await h.stable("g", "a")
        joining = h.join_task("g", client_id="b")
        await settle()
        assert h.group("g").state is PREPARING
        assert h.heartbeat("g", a) == REBALANCE_IN_PROGRESS
        assert h.commit("g", {("t", 0): 5}, a.generation, a.member_id) == [NONE]
        rejoined = await h.join("g", member_id=a.member_id)
        b = await joining
        assert h.group("g").state is COMPLETING
        assert rejoined.generation == b.generation == a.generation + 1
        assert h.heartbeat("g", rejoined) == NONE
        assert h.commit("g", {("t", 0): 6}, rejoined.generation, rejoined.member_id) == \
            [REBALANCE_IN_PROGRESS]
        assert h.offsets("g") == {("t", 0): 5}

    run(scenario())


# --------------------------------------------------------------------------- timeouts


def test_session_expiry_removes_member_and_rebalances():
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", session_ms=200)
        deadline = time.monotonic() + 2
        while len(h.group("g").members) == 2:  # a heartbeats, b stays silent
            assert time.monotonic() < deadline, "b's session never expired"
            assert h.heartbeat("g", a) == NONE
            await settle(0.05)
        assert set(h.group("g").members) == {a.member_id}
        assert h.group("g").state is PREPARING
        assert h.heartbeat("g", a) == REBALANCE_IN_PROGRESS
        rejoined = await h.join("g", member_id=a.member_id, session_ms=200)
        assert (rejoined.generation, [m for m, _, _ in rejoined.members]) == \
            (a.generation + 1, [a.member_id])

    run(scenario())


def test_waiting_in_join_is_not_a_silent_session():
    """Kafka treats a member awaiting its JoinGroup (or SyncGroup) response as alive: only
    the rebalance timeout bounds the wait."""
    h = Harness()

    async def scenario():
        [a] = await h.stable("g", "a", session_ms=1000, rebalance_ms=2000)
        waiting = h.join_task("g", client_id="b", session_ms=100, rebalance_ms=2000)
        for _ in range(6):  # a keeps its session alive for 0.3 s before rejoining
            h.heartbeat("g", a)
            await settle(0.05)
        ja = await h.join("g", member_id=a.member_id, session_ms=1000, rebalance_ms=2000)
        jb = await waiting
        assert (ja.error, jb.error) == (NONE, NONE)
        assert len(ja.members) == 2

    run(scenario())


def test_member_that_does_not_rejoin_is_removed_after_rebalance_timeout():
    """Kafka: the join phase waits up to the group's rebalance timeout (the largest of its
    members'); dynamic members that have not rejoined by then are removed."""
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", rebalance_ms=300)
        started = time.monotonic()
        rejoined = h.join_task("g", member_id=a.member_id, rebalance_ms=300)
        while not rejoined.done():
            h.heartbeat("g", b)  # alive, but never rejoins
            await settle(0.05)
        ja = await rejoined
        assert 0.25 <= time.monotonic() - started < 2
        assert [m for m, _, _ in ja.members] == [a.member_id]
        assert set(h.group("g").members) == {a.member_id}
        assert h.heartbeat("g", b) == UNKNOWN_MEMBER_ID

    run(scenario())


def test_initial_rebalance_delay():
    """group.initial.rebalance.delay.ms: the first rebalance of an empty group waits the
    delay, and again (up to the rebalance timeout) while new members keep arriving."""
    h = Harness(initial_rebalance_delay_ms=200)

    async def scenario():
        started = time.monotonic()
        alone = await h.join("solo")
        assert alone.error == NONE and time.monotonic() - started >= 0.19

        started = time.monotonic()
        a = h.join_task("g")
        await settle(0.1)
        b = h.join_task("g")
        ja, jb = await asyncio.gather(a, b)
        elapsed = time.monotonic() - started
        assert ja.generation == jb.generation == 1 and len(ja.members) == 2
        assert 0.38 <= elapsed < 1.0, elapsed  # 200 ms, then 200 more for the newcomer
        # Later rebalances are not delayed.
        await asyncio.gather(*(h.sync("g", r) for r in (ja, jb)))
        started = time.monotonic()
        tasks = [h.join_task("g", member_id=ja.member_id), h.join_task("g", member_id=jb.member_id)]
        again = await asyncio.gather(*tasks)
        assert [r.generation for r in again] == [2, 2]
        assert time.monotonic() - started < 0.15

    run(scenario())


# --------------------------------------------------------------------------- static members


def test_static_member_rejoin_replaces_old_id_without_rebalance():
    """KIP-345: a static member that joins again without a member id (a restart) gets a new
    id in the same generation, its old assignment, and no rebalance; the old id is fenced.
    It led the group, so it still does, and (JoinGroup v9, KIP-814) it is told so together
    with skip_assignment, so it does not run the assignor."""
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", instance="static-a")
        assert a.leader == a.member_id
        generation = a.generation
        restarted = await h.join("g", instance="static-a", client_id="a")
        group = h.group("g")
        assert restarted.error == NONE
        assert restarted.member_id not in ("", a.member_id)
        assert restarted.generation == generation and group.state is STABLE
        assert set(group.members) == {restarted.member_id, b.member_id}
        assert h.heartbeat("g", b) == NONE
        synced = await h.sync("g", restarted, instance="static-a")
        assert (synced.error, synced.assignment) == \
            (NONE, b"assignment-of-" + a.member_id.encode())
        assert h.heartbeat("g", a, instance="static-a") == FENCED_INSTANCE_ID
        assert h.commit("g", {("t", 0): 1}, generation, a.member_id, "static-a") == \
            [FENCED_INSTANCE_ID]
        assert (await h.sync("g", a, instance="static-a")).error == FENCED_INSTANCE_ID
        # Leadership stays with the static member's new incarnation.
        assert group.leader_id == restarted.member_id
        assert (restarted.leader, restarted.skip_assignment) == (restarted.member_id, True)
        assert {m for m, _, _ in restarted.members} == {restarted.member_id, b.member_id}

    run(scenario())


def test_static_rejoin_with_new_metadata_under_same_protocol_does_not_rebalance():
    """Kafka rebalances for a static member's rejoin in a Stable group only if the protocol
    the group would select changes; new metadata under the same protocol (say a sticky
    assignor's user data, empty after a restart) is stored without a rebalance."""
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", instance="static-a", rebalance_ms=300,
                              protos=protocols("range", user_data=b"owned: 0,1"))
        generation = h.group("g").generation
        restarted = await h.join("g", instance="static-a", client_id="a", rebalance_ms=300,
                                 protos=protocols("range", user_data=b""))
        assert restarted.error == NONE
        assert (h.group("g").state, h.group("g").generation) == (STABLE, generation), (
            "a static member rejoining with the same selected protocol must not rebalance")
        assert h.heartbeat("g", b) == NONE

    run(scenario())


def test_static_rejoin_that_changes_the_protocol_rebalances():
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", instance="static-a",
                              protos=protocols("range", "roundrobin"))
        generation = h.group("g").generation
        rejoin = h.join_task("g", instance="static-a", client_id="a",
                             protos=protocols("roundrobin"))
        await settle()
        assert h.group("g").state is PREPARING
        assert h.heartbeat("g", b) == REBALANCE_IN_PROGRESS
        jb = await h.join("g", member_id=b.member_id, protos=protocols("range", "roundrobin"))
        ja = await rejoin
        assert ja.generation == jb.generation == generation + 1
        assert ja.protocol_name == "roundrobin"

    run(scenario())


def test_static_member_replaced_while_waiting_in_join_is_fenced():
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", instance="static-a", rebalance_ms=2000)
        old_join = h.join_task("g", member_id=a.member_id, instance="static-a", client_id="a")
        await settle()
        assert h.group("g").state is PREPARING
        new_join = h.join_task("g", instance="static-a", client_id="a")
        assert (await old_join).error == FENCED_INSTANCE_ID
        jb = h.join_task("g", member_id=b.member_id)
        new, rb = await asyncio.gather(new_join, jb)
        assert new.error == rb.error == NONE
        assert {m for m in h.group("g").members} == {new.member_id, b.member_id}

    run(scenario())


def test_static_member_leave_by_instance_id():
    h = Harness()

    async def scenario():
        a, b = await h.stable("g", "a", "b", instance="static-a")
        # Another member id with this instance id: fenced, nothing changes.
        assert codes(h.coordinator.leave("g", [("someone-else", "static-a")])) == \
            [FENCED_INSTANCE_ID]
        assert h.group("g").state is STABLE
        assert codes(h.coordinator.leave("g", [("", "unknown-instance")])) == \
            [UNKNOWN_MEMBER_ID]
        # An admin removes the static member by instance id alone (KIP-345).
        assert codes(h.coordinator.leave("g", [("", "static-a")])) == [NONE]
        assert set(h.group("g").members) == {b.member_id}
        assert h.group("g").state is PREPARING

    run(scenario())


# --------------------------------------------------------------------------- group size


def test_group_max_size():
    """group.max.size: a new member beyond the limit gets GROUP_MAX_SIZE_REACHED and the group
    carries on without a rebalance."""
    h = Harness(max_size=2)

    async def scenario():
        a, b = await h.stable("g", "a", "b")
        assert (await h.join("g", client_id="c")).error == GROUP_MAX_SIZE_REACHED
        assert (await h.join("g", client_id="c", v4=True)).error == GROUP_MAX_SIZE_REACHED
        assert h.group("g").state is STABLE and len(h.group("g").members) == 2
        assert h.heartbeat("g", a) == NONE

    run(scenario())


def test_group_loaded_over_capacity_shrinks_to_max_size():
    """Kafka (onLoaded / KIP-389): a group loaded with more members than group.max.size
    (after the limit was lowered) is rebalanced at once, and the members that rejoin beyond
    the limit get GROUP_MAX_SIZE_REACHED."""
    big = Harness()

    async def fill():
        return await big.stable("g", "a", "b", "c", session_ms=5000, rebalance_ms=500)

    members = run(fill())
    small = Harness(max_size=2)
    small.coordinator.load([LogRecord(key, value) for _, key, value in big.log])

    async def reload():
        small.coordinator.start_timers()
        assert small.group("g").state is PREPARING, "an over-capacity group must rebalance"
        results = await asyncio.gather(*(small.join("g", member_id=m.member_id, rebalance_ms=500)
                                         for m in members))
        assert sorted(r.error for r in results) == [NONE, NONE, GROUP_MAX_SIZE_REACHED]
        assert len(small.group("g").members) == 2

    run(reload())


# --------------------------------------------------------------------------- offsets


def test_offset_commit_and_fetch():
    exists = {("t", 0), ("t", 1)}
    h = Harness(partition_exists=lambda t, p: (t, p) in exists, offset_metadata_max_bytes=10)

    async def scenario():
        # A group used only to store offsets: generation -1, no member id.
        assert h.commit("simple", {("t", 0): 5, ("t", 1): 9, ("t", 2): 1, ("x", 0): 1}) == \
            [NONE, NONE, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]
        assert h.group("simple").state is EMPTY
        assert h.group("simple").protocol_type is None
        assert h.commit("simple", {("t", 0): 6}, metadata="x" * 11) == \
            [OFFSET_METADATA_TOO_LARGE]
        assert h.commit("simple", {("t", 0): 7}, metadata="x" * 10) == [NONE]
        found = h.coordinator.fetch_offsets("simple", [("t", [0, 1, 2])])
        assert (found[("t", 0)].offset, found[("t", 0)].metadata, found[("t", 0)].leader_epoch) \
            == (7, "x" * 10, 7)
        assert found[("t", 1)].offset == 9 and found[("t", 2)] is None
        assert h.offsets("simple") == {("t", 0): 7, ("t", 1): 9}
        assert h.coordinator.fetch_offsets("nobody", [("t", [0])]) == {("t", 0): None}
        assert h.coordinator.fetch_offsets("nobody", None) == {}

        # Members of a consumer group commit with their generation; others may not.
        [a] = await h.stable("g", "a")
        assert h.commit("g", {("t", 0): 3}, a.generation, a.member_id) == [NONE]
        assert h.commit("g", {("t", 0): 4}) == [UNKNOWN_MEMBER_ID]
        assert h.offsets("g") == {("t", 0): 3}
        assert codes(at_once(h.coordinator.commit(
            "", -1, "", None, [OffsetCommit("t", 0, 1, -1, "")]))) == [INVALID_GROUP_ID]

    run(scenario())


# --------------------------------------------------------------------------- persistence


def decode_offset_record(key: bytes, value: bytes | None) -> tuple:
    """Kafka's OffsetCommitKey v1 and OffsetCommitValue v3, read field by field."""
    (version,) = struct.unpack_from(">h", key)
    assert version == 1
    pos = 2
    parts = []
    for _ in range(2):
        (n,) = struct.unpack_from(">h", key, pos)
        parts.append(key[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    (partition,) = struct.unpack_from(">i", key, pos)
    assert pos + 4 == len(key)
    if value is None:
        return (*parts, partition, None)
    version, offset, epoch, n = struct.unpack_from(">hqih", value)
    assert version == 3
    metadata = value[16:16 + n].decode()
    (ts,) = struct.unpack_from(">q", value, 16 + n)
    assert 24 + n == len(value)
    return (*parts, partition, (offset, epoch, metadata, ts))


def test_records_use_kafkas_layout():
    h = Harness()
    assert h.commit("grp", {("topic", 3): 42}, metadata="m") == [NONE]
    [(group, key, value)] = h.log
    group_id, topic, partition, (offset, epoch, metadata, ts) = decode_offset_record(key, value)
    assert (group, group_id, topic, partition, offset, epoch, metadata) == \
        ("grp", "grp", "topic", 3, 42, 7, "m")
    assert abs(ts - time.time() * 1000) < 5000

    async def scenario():
        await h.stable("cg", "a")

    run(scenario())
    group_records = [(k, v) for g, k, v in h.log if g == "cg"]
    key, value = group_records[-1]
    assert key == struct.pack(">hh", 2, 2) + b"cg"  # GroupMetadataKey v2
    (version,) = struct.unpack_from(">h", value)
    assert version in (2, 3)
    assert value[2:4 + len("consumer")] == struct.pack(">h", 8) + b"consumer"


def test_load_restores_groups_and_offsets():
    h = Harness()

    async def build():
        a, b = await h.stable("live", "a", "b", session_ms=300)
        assert h.commit("live", {("t", 0): 10, ("t", 1): 20}, a.generation, a.member_id) == \
            [NONE, NONE]
        [c] = await h.stable("gone", "c")
        h.coordinator.leave("gone", [(c.member_id, None)])
        assert h.commit("gone", {("t", 0): 1}) == [NONE]
        assert codes(h.coordinator.delete_groups(["gone"])) == [NONE]
        assert h.commit("simple", {("t", 5): 55}) == [NONE]
        assert h.commit("simple", {("t", 5): 56}) == [NONE]
        return a, b

    a, b = run(build())
    original = h.group("live")
    records = [LogRecord(key, value) for _, key, value in h.log]

    def check(loaded: Harness) -> None:
        assert set(loaded.coordinator.groups) == {"live", "simple"}
        group = loaded.group("live")
        assert group.state is STABLE
        assert (group.generation, group.protocol_type, group.protocol_name, group.leader_id) == \
            (original.generation, "consumer", "range", a.member_id)
        assert set(group.members) == {a.member_id, b.member_id}
        for member_id, member in group.members.items():
            before = original.members[member_id]
            assert (member.client_id, member.client_host, member.session_timeout_ms,
                    member.rebalance_timeout_ms, member.assignment,
                    member.metadata("range")) == \
                (before.client_id, before.client_host, before.session_timeout_ms,
                 before.rebalance_timeout_ms, before.assignment, before.metadata("range"))
        assert loaded.offsets("live") == {("t", 0): 10, ("t", 1): 20}
        assert loaded.offsets("simple") == {("t", 5): 56}
        assert loaded.offsets("gone") == {}

    loaded = Harness()
    loaded.coordinator.load(records)
    check(loaded)
    # What log compaction leaves (the last record of each key, in log order) loads the same.
    last: dict[bytes, int] = {key: i for i, (key, *_) in enumerate(records)}
    compacted = Harness()
    compacted.coordinator.load([records[i] for i in sorted(last.values())])
    check(compacted)

    async def expire():
        # Loaded members must heartbeat within their session or be removed.
        loaded.coordinator.start_timers()
        group = loaded.group("live")
        deadline = time.monotonic() + 3
        while group.state is not EMPTY:
            assert time.monotonic() < deadline, group.state
            await settle(0.05)
        assert group.generation == original.generation + 1
        assert loaded.offsets("live") == {("t", 0): 10, ("t", 1): 20}

    run(expire())


# --------------------------------------------------------------------------- expiry


def test_offsets_of_empty_groups_expire_after_retention():
    """KIP-211: offsets of an Empty consumer group expire together, offsets.retention.minutes
    after the group became Empty; a group that only stores offsets ages each offset from its
    commit. A group left with no offsets and no members is removed."""
    h = Harness(offsets_retention_ms=HOUR_MS)

    async def scenario():
        [a] = await h.stable("cg", "a")
        assert h.commit("cg", {("t", 0): 1}, a.generation, a.member_id) == [NONE]
        h.coordinator.leave("cg", [(a.member_id, None)])

    run(scenario())
    assert h.commit("simple", {("t", 0): 1, ("t", 1): 1}) == [NONE, NONE]
    now = int(time.time() * 1000)
    h.group("simple").offsets[("t", 1)].commit_timestamp = now - 2 * HOUR_MS
    assert h.coordinator.expire_offsets(now) == 1
    assert h.offsets("simple") == {("t", 0): 1}
    assert h.offsets("cg") == {("t", 0): 1}
    h.log.clear()
    assert h.coordinator.expire_offsets(now + HOUR_MS + 1000) == 2
    assert "cg" not in h.coordinator.groups and "simple" not in h.coordinator.groups
    tombstones = {(g, decode_offset_record(k, v)[:3]) for g, k, v in h.log
                  if v is None and struct.unpack_from(">h", k)[0] == 1}
    assert tombstones == {("cg", ("cg", "t", 0)), ("simple", ("simple", "t", 0))}
    assert {g for g, k, v in h.log if v is None and struct.unpack_from(">h", k)[0] == 2} == \
        {"cg", "simple"}


def test_offsets_of_unsubscribed_topics_expire_in_stable_group():
    """Kafka (ClassicGroup.offsetExpirationCondition): in a Stable consumer group, offsets of
    topics no member subscribes to expire by commit time; subscribed ones are kept."""
    h = Harness(offsets_retention_ms=HOUR_MS)

    async def scenario():
        [a] = await h.stable("cg", "a", protos=protocols("range", topic="current"))
        assert h.commit("cg", {("current", 0): 1, ("old", 0): 1}, a.generation, a.member_id) == \
            [NONE, NONE]

    run(scenario())
    h.coordinator.expire_offsets(int(time.time() * 1000) + 2 * HOUR_MS)
    assert h.offsets("cg") == {("current", 0): 1}


# --------------------------------------------------------------------------- deletion


def test_delete_groups_rules():
    h = Harness()

    async def scenario():
        [a] = await h.stable("busy", "a")
        assert h.commit("busy", {("t", 0): 1}, a.generation, a.member_id) == [NONE]
        assert h.commit("idle", {("t", 0): 1}) == [NONE]
        h.log.clear()
        assert codes(h.coordinator.delete_groups(["busy", "idle", "never", ""])) == \
            [NON_EMPTY_GROUP, NONE, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID]
        assert "idle" not in h.coordinator.groups
        written = [(g, struct.unpack_from(">h", k)[0], v) for g, k, v in h.log]
        assert written == [("idle", 1, None), ("idle", 2, None)]
        # A rebalancing group is not empty either.
        joining = h.join_task("busy", client_id="b")
        await settle()
        assert h.group("busy").state is PREPARING
        assert codes(h.coordinator.delete_groups(["busy"])) == [NON_EMPTY_GROUP]
        await h.join("busy", member_id=a.member_id)
        await joining
        assert h.group("busy").state is COMPLETING
        assert codes(h.coordinator.delete_groups(["busy"])) == [NON_EMPTY_GROUP]
        assert codes(h.coordinator.delete_groups(["idle"])) == [GROUP_ID_NOT_FOUND]

    run(scenario())


def test_offset_delete_rules():
    h = Harness()

    async def scenario():
        [a] = await h.stable("cg", "a", protos=protocols("range", topic="in-use"))
        assert h.commit("cg", {("in-use", 0): 1, ("other", 0): 2}, a.generation,
                        a.member_id) == [NONE, NONE]
        error, results = h.coordinator.delete_offsets("cg", [("in-use", 0), ("other", 0)])
        assert (code(error), codes(results)) == (NONE, [GROUP_SUBSCRIBED_TO_TOPIC, NONE])
        assert h.offsets("cg") == {("in-use", 0): 1}
        error, _ = h.coordinator.delete_offsets("nobody", [("t", 0)])
        assert code(error) == GROUP_ID_NOT_FOUND
        h.coordinator.leave("cg", [(a.member_id, None)])
        error, results = h.coordinator.delete_offsets("cg", [("in-use", 0)])
        assert (code(error), codes(results)) == (NONE, [NONE])
        assert h.offsets("cg") == {}

    run(scenario())


# --------------------------------------------------------------------------- describe


def test_describe_shows_protocol_and_member_data_only_when_stable():
    """Kafka's DescribeGroups gives the protocol and each member's metadata and assignment
    only for a Stable group; otherwise the protocol is "" and members carry neither."""
    h = Harness()

    async def scenario():
        [a] = await h.stable("g", "a")
        described = h.group("g").describe()
        assert (described["group_state"], described["protocol_type"],
                described["protocol_data"]) == ("Stable", "consumer", "range")
        [member] = described["members"]
        assert (member["member_id"], member["client_id"], member["client_host"]) == \
            (a.member_id, "a", "/127.0.0.1")
        assert member["member_metadata"] == subscription("t")
        assert member["member_assignment"] == b"assignment-of-" + a.member_id.encode()
        joining = h.join_task("g", client_id="b")
        await settle()
        await h.join("g", member_id=a.member_id)
        await joining
        described = h.group("g").describe()
        assert described["group_state"] == "CompletingRebalance"
        assert [(m["member_metadata"], m["member_assignment"]) for m in described["members"]] \
            == [(b"", b""), (b"", b"")]
        assert described["protocol_data"] == ""

    run(scenario())


# --------------------------------------------------------------------------- partitioning


def java_hash(text: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    raw = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        value = (31 * value + int.from_bytes(raw[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def kafka_partition_for(group_id: str, partitions: int) -> int:
    """Kafka: Utils.abs(groupId.hashCode()) % partitions, where Utils.abs(n) is Math.abs(n)
    except that Integer.MIN_VALUE maps to 0."""
    value = java_hash(group_id)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


@pytest.mark.parametrize("group_id", ["hello", "my-group", "console-consumer-1",
                                      "polygenelubricants", "Ünïcødé-grøup", "g-\U0001F600"])
def test_partition_for_matches_kafka(group_id):
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(1 << 31)
    assert partition_for(group_id, 50) == kafka_partition_for(group_id, 50)


def test_partition_for_negative_hash_codes_matches_kafka():
    negative = [g for g in (f"group-{i}" for i in range(200)) if java_hash(g) < 0]
    assert negative
    wrong = {g: (partition_for(g, 50), kafka_partition_for(g, 50)) for g in negative
             if partition_for(g, 50) != kafka_partition_for(g, 50)}
    assert not wrong, f"(moldau, Kafka) partitions differ: {dict(list(wrong.items())[:5])}"
