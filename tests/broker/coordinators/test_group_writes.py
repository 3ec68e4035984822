"""Writes of the group coordinator to `__consumer_offsets`: appended with acks=-1 through
the replica manager, and their failures told to clients the way Kafka's group coordinator
tells them (GroupMetadataManager's storeGroup and storeOffsets callbacks)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from offsets_node import SETTINGS, OffsetsNode, join, run

from moldau.broker.coordinators.group.coordinator import GroupCoordinator, OffsetCommit
from moldau.broker.coordinators.group.group import GroupState
from moldau.broker.coordinators.group.replay import LogRecord
from moldau.broker.coordinators.group.store import COMMIT_TIMEOUT_MS, OffsetsTopic
from moldau.broker.coordinators.group.write_errors import store_error
from moldau.broker.replication.manager import ProduceResult
from moldau.errors import ErrorCode, KafkaError

E = ErrorCode


@pytest.mark.parametrize("code, for_offsets, for_group", [
    (E.none, E.none, E.none),
    (E.unknown_topic_or_partition, E.coordinator_not_available, E.coordinator_not_available),
    (E.not_enough_replicas, E.coordinator_not_available, E.coordinator_not_available),
    (E.not_enough_replicas_after_append, E.coordinator_not_available,
     E.coordinator_not_available),
    (E.request_timed_out, E.coordinator_not_available, E.coordinator_not_available),
    (E.not_leader_or_follower, E.not_coordinator, E.not_coordinator),
    (E.kafka_storage_error, E.not_coordinator, E.not_coordinator),
    (E.message_too_large, E.invalid_commit_offset_size, E.unknown_server_error),
    (E.record_list_too_large, E.invalid_commit_offset_size, E.unknown_server_error),
    (E.invalid_fetch_size, E.invalid_commit_offset_size, E.unknown_server_error),
    (E.corrupt_message, E.corrupt_message, E.corrupt_message),  # others pass through
])
def test_store_error(code, for_offsets, for_group):
    assert store_error(code, offsets=True) is for_offsets
    assert store_error(code, offsets=False) is for_group


class FailingLog:
    """A log that refuses appends with `code`, at once or after waiting (replication)."""

    def __init__(self, code: ErrorCode | None = None, wait: bool = False) -> None:
        self.code = code
        self.wait = wait
        self.records: list[tuple[str, bytes, bytes | None]] = []
        self.release = asyncio.Event()

    def write(self, group_id: str, records: list[tuple[bytes, bytes | None]]):
        if self.code is not None and not self.wait:
            raise KafkaError(self.code)
        self.records.extend((group_id, key, value) for key, value in records)
        return self._acknowledge() if self.wait else None

    async def _acknowledge(self) -> None:
        await self.release.wait()
        if self.code is not None:
            raise KafkaError(self.code)


def coordinator_over(log: FailingLog) -> GroupCoordinator:
    return GroupCoordinator(SETTINGS, log.write, lambda _t, _p: True)


@pytest.mark.parametrize("code, expected", [
    (E.not_enough_replicas, E.coordinator_not_available),
    (E.request_timed_out, E.coordinator_not_available),
    (E.not_leader_or_follower, E.not_coordinator),
    (E.record_list_too_large, E.invalid_commit_offset_size),
])
def test_a_failed_commit_is_answered_per_partition_and_not_applied(code, expected):
    async def scenario():
        log = FailingLog(code)
        coordinator = GroupCoordinator(SETTINGS, log.write, lambda _t, _p: True)
        errors = await coordinator.commit("g", -1, "", None, [
            OffsetCommit("t", 0, 5, -1, ""),
            OffsetCommit("t", 1, 5, -1, "x" * (SETTINGS.offset_metadata_max_bytes + 1))])
        assert errors == [expected, E.offset_metadata_too_large]
        assert coordinator.fetch_offsets("g", None) == {}

    run(scenario())


def test_a_commit_is_visible_only_once_acknowledged():
    async def scenario():
        log = FailingLog(wait=True)
        coordinator = coordinator_over(log)
        commit = asyncio.ensure_future(coordinator.commit(
            "g", -1, "", None, [OffsetCommit("t", 0, 7, -1, "")]))
        await asyncio.sleep(0.02)
        assert not commit.done() and len(log.records) == 1  # appended, not yet replicated
        assert coordinator.fetch_offsets("g", [("t", [0])]) == {("t", 0): None}
        log.release.set()
        assert await commit == [E.none]
        assert coordinator.fetch_offsets("g", [("t", [0])])[("t", 0)].offset == 7

    run(scenario())


def test_a_commit_that_times_out_waiting_for_replicas_is_retriable():
    async def scenario():
        log = FailingLog(E.request_timed_out, wait=True)
        coordinator = coordinator_over(log)
        commit = asyncio.ensure_future(coordinator.commit(
            "g", -1, "", None, [OffsetCommit("t", 0, 7, -1, "")]))
        await asyncio.sleep(0.02)
        log.release.set()
        assert await commit == [E.coordinator_not_available]
        assert coordinator.fetch_offsets("g", None) == {}

    run(scenario())


def test_an_assignment_that_cannot_be_stored_is_not_given_out():
    """storeGroup failing in SyncGroup: every waiting member gets the mapped error, the
    group rebalances."""
    async def scenario():
        log = FailingLog(wait=True)
        coordinator = coordinator_over(log)
        first = await join(coordinator, "g")
        assert first.error == 0
        second = asyncio.ensure_future(join(coordinator, "g", client_id="d"))
        await asyncio.sleep(0.02)
        again = asyncio.ensure_future(join(coordinator, "g", first.member_id))
        follower, leader = await second, await again
        follower_sync = asyncio.ensure_future(coordinator.sync(
            "g", follower.generation, follower.member_id, None, None, None, {}))
        log.code = E.not_enough_replicas  # the group record will not reach the ISR
        leader_sync = asyncio.ensure_future(coordinator.sync(
            "g", leader.generation, leader.member_id, None, None, None,
            {leader.member_id: b"a", follower.member_id: b"b"}))
        await asyncio.sleep(0.02)
        assert not leader_sync.done() and not follower_sync.done()
        log.release.set()
        assert (await leader_sync).error == (await follower_sync).error == \
            E.coordinator_not_available.value
        group = coordinator.groups["g"]
        assert group.state is GroupState.PREPARING_REBALANCE
        assert all(m.assignment == b"" for m in group.members.values())
        coordinator.shutdown()

    run(scenario())


def test_an_assignment_is_given_out_once_stored():
    async def scenario():
        log = FailingLog(wait=True)
        coordinator = coordinator_over(log)
        joined = await join(coordinator, "g")
        sync = asyncio.ensure_future(coordinator.sync(
            "g", joined.generation, joined.member_id, None, None, None,
            {joined.member_id: b"mine"}))
        await asyncio.sleep(0.02)
        assert not sync.done()
        assert coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE
        # The same SyncGroup again (say after a client-side timeout) gets the one answer.
        retry = asyncio.ensure_future(coordinator.sync(
            "g", joined.generation, joined.member_id, None, None, None,
            {joined.member_id: b"mine"}))
        await asyncio.sleep(0.02)
        log.release.set()
        assert (await sync).assignment == (await retry).assignment == b"mine"
        assert coordinator.groups["g"].state is GroupState.STABLE
        coordinator.shutdown()

    run(scenario())


def test_a_static_member_whose_new_id_cannot_be_stored_keeps_its_old_one():
    """KIP-345 rejoin without a rebalance: when the new member id cannot be stored, the
    join fails and the old id stays valid (Kafka reverts the replacement)."""
    async def scenario():
        log = FailingLog()
        coordinator = coordinator_over(log)
        protocols = [("range", b"")]

        async def static_join():
            return await coordinator.join("g", "", "instance", "c", "/h", 10000, 10000,
                                          "consumer", protocols, False)

        first = await static_join()
        synced = await coordinator.sync("g", first.generation, first.member_id, "instance",
                                        None, None, {first.member_id: b"a"})
        assert synced.error == E.none.value
        log.code = E.not_leader_or_follower
        refused = await static_join()
        assert (refused.error, refused.member_id) == (E.not_coordinator.value, "")
        group = coordinator.groups["g"]
        assert set(group.members) == {first.member_id}
        assert group.static_members == {"instance": first.member_id}
        assert group.leader_id == first.member_id
        assert coordinator.heartbeat("g", first.generation, first.member_id, "instance") is \
            E.none
        coordinator.shutdown()

    run(scenario())


def test_writes_start_in_the_order_the_state_changed():
    """Tombstones nobody waits for and a commit that is waited for reach the log in the
    order their changes were made."""
    async def scenario():
        order: list[str] = []

        async def append(group_id: str, records: Sequence[tuple[bytes, bytes | None]]):
            order.append("tombstone" if records[-1][1] is None else "commit")

        coordinator = GroupCoordinator(SETTINGS, append, lambda _t, _p: True)
        assert await coordinator.commit("g", -1, "", None,
                                        [OffsetCommit("t", 0, 1, -1, "")]) == [E.none]
        assert coordinator.delete_groups(["g"]) == [E.none]
        assert await coordinator.commit("g", -1, "", None,
                                        [OffsetCommit("t", 0, 2, -1, "")]) == [E.none]
        assert order == ["commit", "tombstone", "commit"]

    run(scenario())


class ReplicatingReplicas:
    """A replica manager whose append waits for the ISR (the replication work's shape)."""

    def __init__(self, error: ErrorCode = E.none) -> None:
        self.error = error
        self.calls: list[dict] = []

    async def append(self, entries, *, acks: int, produce_version: int,
                     timeout_ms: int | None = None, internal_topics_allowed: bool = False):
        self.calls.append({"entries": entries, "acks": acks, "timeout_ms": timeout_ms,
                           "internal_topics_allowed": internal_topics_allowed})
        return [ProduceResult(error=self.error, message="not now")]


def test_offsets_topic_appends_with_acks_all_when_the_replica_manager_can():
    async def scenario():
        replicas = ReplicatingReplicas()
        topic = OffsetsTopic(None, replicas, partitions=3,  # type: ignore[arg-type]
                             replication_factor=3, segment_bytes=1 << 20)
        await topic.write(2, [(b"k", b"v")])
        [call] = replicas.calls
        assert call["acks"] == -1 and call["timeout_ms"] == COMMIT_TIMEOUT_MS
        assert call["internal_topics_allowed"] is True
        [(name, partition, batch)] = call["entries"]
        assert (name, partition) == ("__consumer_offsets", 2) and isinstance(batch, bytes)

        replicas.error = E.not_enough_replicas_after_append
        with pytest.raises(KafkaError) as failed:
            await topic.write(0, [(b"k", None)])
        assert failed.value.code is E.not_enough_replicas_after_append

    run(scenario())


def test_offsets_topic_writes_through_the_replica_manager(tmp_path):
    node = OffsetsNode(tmp_path)
    try:
        assert run(node.topic.write(1, [(b"k1", b"v1"), (b"k2", None)])) == 0
        assert run(node.topic.write(1, [(b"k3", b"v3")])) == 2
        assert list(node.topic.read(1)) == [LogRecord(b"k1", b"v1", 0), LogRecord(b"k2", None, 1),
                                            LogRecord(b"k3", b"v3", 2)]
        log = node.replicas.leader("__consumer_offsets", 1).log
        assert log.high_watermark == log.log_end_offset == 3
    finally:
        node.close()
