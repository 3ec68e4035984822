"""Offsets committed in transactions (TxnOffsetCommit), on real `__consumer_offsets` logs:
pending until the transaction's marker is in the group's partition, committed by COMMIT,
dropped by ABORT, ordered against regular commits by their place in the log, and rebuilt
the same way when the partition is loaded again (after a failover or a restart)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from offsets_node import OffsetsNode, group_in, join, run, stable_member

from moldau.broker.coordinators.group.coordinator import GroupCoordinator, OffsetCommit
from moldau.broker.coordinators.group.offsets import (
    CommittedOffset,
    OpenTransactions,
    PendingOffsets,
)
from moldau.broker.coordinators.group.records import OFFSETS_TOPIC
from moldau.broker.coordinators.group.replay import Entry, TxnEnd
from moldau.broker.coordinators.group.writes import TxnProducer
from moldau.errors import ErrorCode

E = ErrorCode
GROUP = group_in(1, "txn")
PARTITION = 1
P1, P2, P3 = TxnProducer(1000, 0), TxnProducer(2000, 0), TxnProducer(3000, 0)


def at(*offsets: int) -> list[OffsetCommit]:
    """Offsets for partitions 0, 1, ... of topic t."""
    return [OffsetCommit("t", index, offset, -1, f"m{offset}")
            for index, offset in enumerate(offsets)]


def committed(coordinator: GroupCoordinator, group: str = GROUP) -> dict[int, int]:
    return {partition: stored.offset
            for (_, partition), stored in coordinator.fetch_offsets(group, None).items()}


def end(node: OffsetsNode, coordinator: GroupCoordinator, producer: TxnProducer,
        commit: bool, partition: int = PARTITION) -> None:
    """What WriteTxnMarkers does on the group's partition: the marker, then the hook."""
    result = node.replicas.append_txn_marker(OFFSETS_TOPIC, partition, producer.producer_id,
                                             producer.epoch, 0, commit)
    assert result.error is E.none
    coordinator.complete_transaction(producer.producer_id, [partition], commit)


async def loaded(node: OffsetsNode) -> GroupCoordinator:
    coordinator = node.coordinator()
    await coordinator.load_partitions(node.topic.led_partitions())
    return coordinator


def test_pending_until_the_commit_marker(node):
    async def scenario():
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(5)) == [E.none]
        assert await coordinator.commit(GROUP, -1, "", None, at(10, 11), producer=P1) == \
            [E.none, E.none]
        assert committed(coordinator) == {0: 5}  # the last committed, not the pending one
        assert coordinator.has_pending_offsets(GROUP, "t", 0)
        assert coordinator.has_pending_offsets(GROUP, "t", 1)
        assert not coordinator.has_pending_offsets(GROUP, "t", 2)

        coordinator.complete_transaction(P1.producer_id, [PARTITION + 1], True)
        assert committed(coordinator) == {0: 5}, "a marker elsewhere ends nothing here"
        end(node, coordinator, P1, commit=True)
        assert committed(coordinator) == {0: 10, 1: 11}
        assert coordinator.fetch_offsets(GROUP, [("t", [1])])[("t", 1)].metadata == "m11"
        assert not coordinator.has_pending_offsets(GROUP, "t", 0)
        coordinator.shutdown()

    run(scenario())


def test_an_abort_marker_drops_them(node):
    async def scenario():
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(5)) == [E.none]
        assert await coordinator.commit(GROUP, -1, "", None, at(10, 11), producer=P1) == \
            [E.none, E.none]
        end(node, coordinator, P1, commit=False)
        assert committed(coordinator) == {0: 5}
        assert not coordinator.has_pending_offsets(GROUP, "t", 1)
        coordinator.shutdown()

    run(scenario())


def test_the_later_commit_in_the_log_wins(node):
    """Kafka's rule when regular and transactional commits of a partition mix: a regular
    commit written after the transactional one stays when the transaction commits; one
    written before is replaced."""
    async def scenario():
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(3, 3)) == [E.none] * 2
        assert await coordinator.commit(GROUP, -1, "", None, at(10, 10), producer=P1) == \
            [E.none] * 2
        assert await coordinator.commit(GROUP, -1, "", None, at(7)) == [E.none]
        assert committed(coordinator) == {0: 7, 1: 3}
        end(node, coordinator, P1, commit=True)
        assert committed(coordinator) == {0: 7, 1: 10}
        coordinator.shutdown()

    run(scenario())


def test_load_rebuilds_what_the_markers_decided(node):
    """One partition's log holds a committed, an aborted and an open transaction, and a
    regular commit between a transactional one and its marker; loading it again (as a new
    leader does) gives the same committed and pending offsets."""
    async def scenario():
        writer = await loaded(node)
        assert await writer.commit(GROUP, -1, "", None, at(1, 1, 1, 1)) == [E.none] * 4
        assert await writer.commit(GROUP, -1, "", None, at(20, 20), producer=P1) == [E.none] * 2
        assert await writer.commit(GROUP, -1, "", None, at(30, 30, 30), producer=P2) == \
            [E.none] * 3
        assert await writer.commit(GROUP, -1, "", None, at(25)) == [E.none]
        end(node, writer, P1, commit=True)
        end(node, writer, P2, commit=False)
        assert await writer.commit(GROUP, -1, "", None,
                                   [OffsetCommit("t", 3, 40, -1, "")], producer=P3) == [E.none]
        expected = {0: 25, 1: 20, 2: 1, 3: 1}
        assert committed(writer) == expected
        writer.shutdown()

        reader = await loaded(node)
        assert committed(reader) == expected
        assert reader.has_pending_offsets(GROUP, "t", 3)
        assert not any(reader.has_pending_offsets(GROUP, "t", p) for p in (0, 1, 2))
        # The open transaction still ends with its marker, on the new coordinator.
        end(node, reader, P3, commit=True)
        assert committed(reader) == {**expected, 3: 40}
        reader.shutdown()

    run(scenario())


def test_pending_offsets_survive_a_restart_on_the_segment_files(tmp_path):
    """The node stops between the TxnOffsetCommit and the marker; a new process opens the
    same log directory, loads the partition, and the marker then commits the offsets."""
    async def before_the_marker(node: OffsetsNode) -> None:
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(4)) == [E.none]
        assert await coordinator.commit(GROUP, -1, "", None, at(9), producer=P1) == [E.none]
        coordinator.shutdown()

    async def after_restart(node: OffsetsNode) -> None:
        coordinator = await loaded(node)
        assert committed(coordinator) == {0: 4}
        assert coordinator.has_pending_offsets(GROUP, "t", 0)
        end(node, coordinator, P1, commit=True)
        assert committed(coordinator) == {0: 9}
        coordinator.shutdown()

    first = OffsetsNode(tmp_path)
    try:
        run(before_the_marker(first))
    finally:
        first.close()
    assert any((tmp_path / f"{OFFSETS_TOPIC}-{PARTITION}").glob("*.log"))
    second = OffsetsNode(tmp_path, topic_id=first.topic_id)
    try:
        run(after_restart(second))
    finally:
        second.close()


def test_a_marker_written_while_the_partition_loads(node):
    """The load read the log before the marker arrived: the marker still ends the
    transaction once the groups are installed."""
    async def scenario():
        writer = await loaded(node)
        assert await writer.commit(GROUP, -1, "", None, at(9), producer=P1) == [E.none]
        writer.shutdown()

        read_done, release = threading.Event(), threading.Event()

        def read(partition: int) -> Iterator[Entry]:
            entries = list(node.topic.read(partition))  # the log as the load finds it
            read_done.set()
            release.wait(10)
            return iter(entries)

        coordinator = node.coordinator(read)
        loading = coordinator.on_partition_leadership(PARTITION, True, 0)
        await asyncio.to_thread(read_done.wait, 10)
        end(node, coordinator, P1, commit=True)
        release.set()
        await loading
        assert committed(coordinator) == {0: 9}
        assert not coordinator.has_pending_offsets(GROUP, "t", 0)
        coordinator.shutdown()

    run(scenario())


def test_member_checks_of_a_transactional_commit(node):
    """Kafka's validateOffsetCommit for TxnOffsetCommit v3+ (KIP-447); before v3 the request
    names no member and is accepted whatever the group's state."""
    async def scenario():
        coordinator = await loaded(node)
        member = await stable_member(coordinator, GROUP)
        gen, member_id = member.generation, member.member_id
        commit = coordinator.commit
        assert await commit(GROUP, gen, member_id, None, at(1), producer=P1) == [E.none]
        assert await commit(GROUP, gen, "stranger", None, at(1), producer=P1) == \
            [E.unknown_member_id]
        assert await commit(GROUP, gen + 1, member_id, None, at(1), producer=P1) == \
            [E.illegal_generation]
        assert await commit(GROUP, -1, "", None, at(2), producer=P1) == [E.none]  # v0-v2
        assert await commit(group_in(2, "none"), 1, "m", None, at(1), producer=P1) == \
            [E.illegal_generation]
        # A rebalance is handing out assignments: regular commits wait, transactional not.
        other = asyncio.ensure_future(join(coordinator, GROUP, client_id="d"))
        await asyncio.sleep(0.05)
        first, second = await join(coordinator, GROUP, member_id), await other
        assert coordinator.groups[GROUP].state.value == "CompletingRebalance"
        assert await commit(GROUP, first.generation, member_id, None, at(3)) == \
            [E.rebalance_in_progress]
        assert await commit(GROUP, second.generation, second.member_id, None, at(3),
                            producer=P1) == [E.none]
        coordinator.shutdown()

    run(scenario())


def test_a_static_member_fenced_by_its_replacement(node):
    async def scenario():
        coordinator = await loaded(node)
        joined = await coordinator.join(GROUP, "", "instance-1", "c", "/127.0.0.1", 10000,
                                        10000, "consumer", [("range", b"")],
                                        require_known_member_id=False)
        assert joined.error == 0
        assert await coordinator.commit(GROUP, joined.generation, "old-incarnation",
                                        "instance-1", at(1), producer=P1) == \
            [E.fenced_instance_id]
        coordinator.shutdown()

    run(scenario())


def test_an_older_producer_epoch_is_refused(node):
    async def scenario():
        coordinator = await loaded(node)
        bumped = TxnProducer(P1.producer_id, 1)
        assert await coordinator.commit(GROUP, -1, "", None, at(1), producer=bumped) == \
            [E.none]
        assert await coordinator.commit(GROUP, -1, "", None, at(2), producer=P1) == \
            [E.invalid_producer_epoch]
        assert coordinator.fetch_offsets(GROUP, None) == {}
        coordinator.shutdown()

    run(scenario())


def test_deleting_an_offset_deletes_its_pending_one_too(node):
    async def scenario():
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(7), producer=P1) == [E.none]
        assert coordinator.delete_offsets(GROUP, [("t", 0)]) == (E.none, [E.none])
        await asyncio.sleep(0.05)  # the tombstone is written with no one waiting
        end(node, coordinator, P1, commit=True)
        assert committed(coordinator) == {}
        coordinator.shutdown()
        assert committed(await loaded(node)) == {}

    run(scenario())


def test_pending_offsets_bookkeeping():
    committed_offsets: dict[tuple[str, int], CommittedOffset] = {
        ("t", 0): CommittedOffset(1, -1, "", 0, record_offset=50)}
    pending = PendingOffsets()
    assert not pending
    pending.add(7, ("t", 0), CommittedOffset(2, -1, "", 0, record_offset=40))
    pending.add(7, ("t", 1), CommittedOffset(3, -1, "", 0, record_offset=41))
    pending.add(8, ("t", 2), CommittedOffset(4, -1, "", 0, record_offset=42))
    assert pending.partitions() == {("t", 0), ("t", 1), ("t", 2)}
    assert sorted(pending.producers()) == [7, 8]
    pending.end(7, True, committed_offsets)
    # ("t", 0) was committed later in the log (50 > 40): it stays.
    assert {key: o.offset for key, o in committed_offsets.items()} == \
        {("t", 0): 1, ("t", 1): 3}
    pending.discard(("t", 2))
    pending.end(8, True, committed_offsets)
    assert ("t", 2) not in committed_offsets and not pending


def test_open_transactions_index():
    open_txns = OpenTransactions()
    open_txns.add(7, "a")
    open_txns.add(7, "b")
    open_txns.add(8, "a")
    assert sorted(open_txns.groups(7)) == ["a", "b"]
    open_txns.discard(7, "a")
    open_txns.discard(7, "b")
    open_txns.discard(9, "a")  # nothing there: no error
    assert open_txns.groups(7) == [] and open_txns.groups(8) == ["a"]


def test_txn_end_entries_come_from_control_batches(node):
    async def scenario():
        coordinator = await loaded(node)
        assert await coordinator.commit(GROUP, -1, "", None, at(7), producer=P1) == [E.none]
        end(node, coordinator, P1, commit=False)
        entries = list(node.topic.read(PARTITION))
        assert [type(entry).__name__ for entry in entries] == ["LogRecord", "TxnEnd"]
        assert entries[0].producer_id == P1.producer_id and entries[0].offset == 0
        assert entries[1] == TxnEnd(P1.producer_id, False)
        coordinator.shutdown()

    run(scenario())


def test_offsets_a_transaction_holds_do_not_expire(node):
    """Kafka keeps an expired offset while a transaction holds one for its partition, and
    the group while any of its transactions is open."""
    async def scenario():
        coordinator = await loaded(node)
        other = group_in(1, "txn-expiring")
        assert await coordinator.commit(GROUP, -1, "", None, at(1, 1)) == [E.none] * 2
        assert await coordinator.commit(GROUP, -1, "", None, at(5), producer=P1) == [E.none]
        assert await coordinator.commit(other, -1, "", None, at(6), producer=P2) == [E.none]
        far_future = 2**62
        assert coordinator.expire_offsets(far_future) == 1  # t-1 only
        assert committed(coordinator) == {0: 1}
        assert other in coordinator.groups
        end(node, coordinator, P1, commit=True)
        end(node, coordinator, P2, commit=False)
        assert coordinator.expire_offsets(far_future) == 1
        assert GROUP not in coordinator.groups and other not in coordinator.groups
        coordinator.shutdown()

    run(scenario())
