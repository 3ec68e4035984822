"""The group coordinator follows the leadership of `__consumer_offsets` partitions, on real
logs: becoming leader loads a partition's groups and offsets in a thread (Kafka's
GroupMetadataManager.loadGroupsForPartition), losing it unloads them (onGroupUnloaded)."""

from __future__ import annotations

import asyncio
import types

from offsets_node import OTHER, PARTITIONS, OffsetsNode, group_in, join, run, stable_member

from moldau.broker.coordinators.group.coordinator import OffsetCommit
from moldau.broker.coordinators.group.group import GroupState
from moldau.broker.handlers.groups import _group_coordinator
from moldau.errors import ErrorCode

NONE = ErrorCode.none
NOT_COORDINATOR = ErrorCode.not_coordinator
LOADING = ErrorCode.coordinator_load_in_progress


def commits(offset: int) -> list[OffsetCommit]:
    return [OffsetCommit("t", 0, offset, 3, "m"), OffsetCommit("t", 1, offset + 1, 3, "")]


async def fill(node: OffsetsNode) -> tuple[str, str, str]:
    """Two groups in partition 0 and 1, with a member and offsets; the member id of A."""
    a, b = group_in(0, "a"), group_in(1, "b")
    writer = node.coordinator()
    await writer.load_partitions(node.topic.led_partitions())
    member = await stable_member(writer, a)
    assert await writer.commit(a, member.generation, member.member_id, None, commits(10)) == \
        [NONE, NONE]
    assert await writer.commit(b, -1, "", None, commits(20)) == [NONE, NONE]
    writer.shutdown()
    return a, b, member.member_id


def test_load_and_unload_one_partition(node):
    async def scenario():
        a, b, member_id = await fill(node)
        coordinator = node.coordinator()
        assert coordinator.group_error(a) is NOT_COORDINATOR  # nothing led yet

        await coordinator.on_partition_leadership(0, True, 0)
        assert set(coordinator.groups) == {a}
        group = coordinator.groups[a]
        assert group.state is GroupState.STABLE and set(group.members) == {member_id}
        assert group.members[member_id].assignment == b"assigned"
        assert group.members[member_id].session_timer is not None  # in service
        assert {tp: o.offset for tp, o in coordinator.fetch_offsets(a, None).items()} == \
            {("t", 0): 10, ("t", 1): 11}
        assert coordinator.group_error(a) is NONE
        assert coordinator.group_error(b) is NOT_COORDINATOR  # partition 1 is not loaded
        assert coordinator.heartbeat(b, 1, "x", None) is NOT_COORDINATOR

        node.move_leader(0, OTHER, 1)
        coordinator.on_partition_leadership(0, False, 1)
        assert coordinator.groups == {}
        assert group.state is GroupState.DEAD
        assert group.members[member_id].session_timer is None
        assert coordinator.group_error(a) is NOT_COORDINATOR
        assert coordinator.heartbeat(a, group.generation, member_id, None) is NOT_COORDINATOR
        assert await coordinator.commit(a, -1, "", None, commits(0)) == [NOT_COORDINATOR] * 2
        coordinator.shutdown()

    run(scenario())


def test_start_up_load_matches_loading_the_whole_topic(node):
    """Single node: loading each led partition gives what loading every record did."""
    async def scenario():
        a, b, _ = await fill(node)
        per_partition = node.coordinator()
        await per_partition.load_partitions(node.topic.led_partitions())
        whole = node.coordinator()
        whole.load(list(node.topic.read_all()))
        assert set(per_partition.groups) == set(whole.groups) == {a, b}
        for group_id, group in whole.groups.items():
            loaded = per_partition.groups[group_id]
            assert (loaded.state, loaded.generation, loaded.leader_id, set(loaded.members),
                    loaded.offsets) == \
                (group.state, group.generation, group.leader_id, set(group.members),
                 group.offsets)
        assert all(per_partition.group_error(g) is NONE for g in (a, b))
        per_partition.shutdown()

    run(scenario())


def test_requests_during_a_slow_load_get_load_in_progress(node):
    async def scenario():
        a, _, member_id = await fill(node)
        coordinator = node.coordinator()
        gate = node.gate(0)
        loading = coordinator.on_partition_leadership(0, True, 0)
        await gate.reached()

        assert coordinator.group_error(a) is LOADING
        assert (await join(coordinator, a)).error == LOADING.value
        # Heartbeats are answered blindly meanwhile, as Kafka does.
        assert coordinator.heartbeat(a, 1, member_id, None) is NONE
        assert (await coordinator.sync(a, 1, member_id, None, None, None, {})).error == \
            LOADING.value
        assert coordinator.leave(a, [(member_id, None)]) == [LOADING]
        assert await coordinator.commit(a, -1, "", None, commits(1)) == [LOADING] * 2
        assert coordinator.delete_groups([a]) == [LOADING]
        assert coordinator.listing_error() is LOADING
        # FindCoordinator still names this node: clients come here and retry.
        broker = types.SimpleNamespace(
            image=node.image, node_id=1, offsets_topic=node.topic,
            endpoint_for=lambda _listener: types.SimpleNamespace(host="h", port=9))
        assert _group_coordinator(broker, a, "PLAINTEXT") == {
            "error_code": NONE, "node_id": 1, "host": "h", "port": 9}

        gate.opened.set()
        await loading
        assert coordinator.group_error(a) is NONE and coordinator.listing_error() is NONE
        assert coordinator.heartbeat(a, 1, member_id, None) is NONE
        assert set(coordinator.groups[a].members) == {member_id}  # the leave was refused
        coordinator.shutdown()

    run(scenario())


def test_unloading_answers_waiting_members_and_stops_timers(node):
    async def scenario():
        group_id = group_in(2, "w")
        coordinator = node.coordinator()
        await coordinator.load_partitions(node.topic.led_partitions())
        first = await stable_member(coordinator, group_id)
        # A second member's join waits for the first to rejoin (a rebalance is pending).
        pending_join = asyncio.ensure_future(join(coordinator, group_id, client_id="d"))
        await asyncio.sleep(0.05)
        group = coordinator.groups[group_id]
        assert group.state is GroupState.PREPARING_REBALANCE and not pending_join.done()
        assert group.join_timer is not None

        node.move_leader(2, OTHER, 1)
        coordinator.on_partition_leadership(2, False, 1)
        assert (await pending_join).error == NOT_COORDINATOR.value
        assert coordinator.heartbeat(group_id, first.generation, first.member_id, None) is \
            NOT_COORDINATOR
        assert group.state is GroupState.DEAD and group_id not in coordinator.groups
        assert group.join_timer is None
        assert all(m.session_timer is None for m in group.members.values())
        coordinator.shutdown()

    run(scenario())


def test_unloading_answers_a_pending_sync(node):
    async def scenario():
        group_id = group_in(1, "s")
        coordinator = node.coordinator()
        await coordinator.load_partitions(node.topic.led_partitions())
        leader_joined = await join(coordinator, group_id)
        follower = asyncio.ensure_future(join(coordinator, group_id, client_id="f"))
        await asyncio.sleep(0.05)
        rejoined = asyncio.ensure_future(join(coordinator, group_id, leader_joined.member_id))
        member, leader = await follower, await rejoined
        assert member.error == leader.error == NONE.value
        # The follower waits for the leader's assignment, which never comes.
        waiting = asyncio.ensure_future(coordinator.sync(
            group_id, member.generation, member.member_id, None, None, None, {}))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        coordinator.on_partition_leadership(1, False, 1)
        assert (await waiting).error == NOT_COORDINATOR.value
        coordinator.shutdown()

    run(scenario())


def test_a_load_that_ends_after_leadership_moved_is_discarded(node):
    async def scenario():
        a, _, member_id = await fill(node)
        coordinator = node.coordinator()
        stale_gate = node.gate(0)
        stale = coordinator.on_partition_leadership(0, True, 0)
        await stale_gate.reached()
        # Leadership goes away and comes back while the first load is still reading.
        coordinator.on_partition_leadership(0, False, 1)
        current = coordinator.on_partition_leadership(0, True, 2)
        assert current is not None and current is not stale
        await current
        group = coordinator.groups[a]
        assert set(group.members) == {member_id}
        # State moves on here; the old load must not put the log's older view back.
        assert await coordinator.commit(a, group.generation, member_id, None, commits(50)) \
            == [NONE, NONE]
        stale_gate.opened.set()
        await stale
        assert coordinator.groups[a] is group
        assert group.offsets[("t", 0)].offset == 50
        assert coordinator.group_error(a) is NONE
        # A late notice of an older epoch changes nothing either.
        coordinator.on_partition_leadership(0, False, 1)
        assert coordinator.groups.get(a) is group
        coordinator.shutdown()

    run(scenario())


def test_a_new_epoch_of_an_unbroken_leadership_keeps_the_groups(node):
    async def scenario():
        a, _, _ = await fill(node)
        coordinator = node.coordinator()
        await coordinator.load_partitions(node.topic.led_partitions())
        group = coordinator.groups[a]
        assert coordinator.on_partition_leadership(0, True, 3) is None
        assert coordinator.groups[a] is group and coordinator.group_error(a) is NONE
        coordinator.shutdown()

    run(scenario())


def test_a_failed_load_leaves_the_partition_uncoordinated(node):
    async def scenario():
        a, _, _ = await fill(node)
        coordinator = node.coordinator()
        node.move_leader(0, OTHER, 1)  # reading a partition this node does not lead fails
        await coordinator.on_partition_leadership(0, True, 0)
        assert coordinator.group_error(a) is NOT_COORDINATOR and coordinator.groups == {}
        coordinator.shutdown()

    run(scenario())


def test_writes_after_losing_leadership_tell_the_client_to_look_again(node):
    """The replica manager refuses the append (NOT_LEADER_OR_FOLLOWER) when the
    coordinator has not heard of the move yet: the commit gets NOT_COORDINATOR."""
    async def scenario():
        group_id = group_in(0, "late")
        coordinator = node.coordinator()
        await coordinator.load_partitions(node.topic.led_partitions())
        assert await coordinator.commit(group_id, -1, "", None, commits(1)) == [NONE, NONE]
        node.move_leader(0, OTHER, 1)
        assert await coordinator.commit(group_id, -1, "", None, commits(2)) == \
            [NOT_COORDINATOR, NOT_COORDINATOR]
        assert coordinator.groups[group_id].offsets[("t", 0)].offset == 1
        coordinator.shutdown()

    run(scenario())


def test_every_partition_is_loaded_at_start_up(node):
    async def scenario():
        coordinator = node.coordinator()
        assert node.topic.led_partitions() == [(p, 0) for p in range(PARTITIONS)]
        await coordinator.load_partitions(node.topic.led_partitions())
        assert all(coordinator.group_error(group_in(p)) is NONE for p in range(PARTITIONS))
        coordinator.shutdown()

    run(scenario())


def test_the_replica_managers_leadership_hook_moves_the_groups(node):
    """Wired as the broker wires it: the replica manager's leadership listener."""
    async def scenario():
        a, b, member_id = await fill(node)
        coordinator = node.coordinator()
        node.replicas.add_leadership_listener(coordinator.on_leadership_change)
        await coordinator.load_partitions(node.topic.led_partitions())
        assert set(coordinator.groups) == {a, b}

        node.move_leader(0, OTHER, 1)
        assert set(coordinator.groups) == {b}
        assert coordinator.heartbeat(a, 1, member_id, None) is NOT_COORDINATOR

        node.move_leader(0, 1, 2)  # back: loaded again, in a thread
        assert coordinator.group_error(a) is LOADING
        assert coordinator.leave(a, [(member_id, None)]) == [LOADING]
        await coordinator.wait_for_loads()
        assert set(coordinator.groups) == {a, b}
        assert coordinator.heartbeat(a, 1, member_id, None) is NONE
        coordinator.shutdown()

    run(scenario())
