"""Partition reassignments (KIP-455) and admin elections (KIP-460) as the controller commits
them, on a single-voter quorum with registered, unfenced brokers."""

import asyncio

import pytest
from quorum_helpers import make_controller, open_quorum, partition, register_live

from moldau.broker.metadata.controller import ConfigChange, NewTopic
from moldau.broker.metadata.reassignment import reassignment_replicas
from moldau.broker.metadata.records import TOPIC_RESOURCE
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)

PREFERRED, UNCLEAN = 0, 1


def run(tmp_path, scenario, brokers=(1, 2, 3, 4), assignment=(1, 2, 3), configs=None):
    """Run `scenario(controller, epochs, topic_id)` against topic "t" with one partition on
    `assignment`, the quorum closed afterwards."""
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in brokers}
            [created] = await controller.create_topics(
                [NewTopic("t", assignments={0: list(assignment)}, configs=configs or {})],
                validate_only=False)
            assert not isinstance(created, KafkaError)
            await scenario(controller, epochs, created.topic_id)
        finally:
            await quorum.close()

    asyncio.run(main())


def state(record):
    return (record.replicas, record.isr, record.leader, record.adding_replicas,
            record.removing_replicas)


async def reassign(controller, target, topic="t", index=0):
    results = await controller.alter_partition_reassignments([(topic, index, target)])
    return results[(topic, index)]


async def fence(controller, epochs, broker):
    await controller.heartbeat(broker, epochs[broker], controller.image.offset, want_fence=True)
    assert controller.image.brokers[broker].fenced


async def unfence(controller, epochs, broker):
    _, fenced, _ = await controller.heartbeat(broker, epochs[broker], controller.image.offset)
    assert not fenced


def test_replica_lists_are_ordered_as_kafka_orders_them():
    assert reassignment_replicas((1, 2, 3), (2, 3, 4)) == ((2, 3, 4, 1), (4,), (1,))
    assert reassignment_replicas((3, 1, 2), (5, 4)) == ((5, 4, 1, 2, 3), (4, 5), (1, 2, 3))
    assert reassignment_replicas((1, 2, 3), (3, 2, 1)) == ((3, 2, 1), (), ())


def test_a_move_completes_when_the_new_replica_joins_the_isr(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [2, 3, 4]) is None
        started = partition(controller, "t")
        # Grown to target + removed replicas; the ISR and the leader as they were.
        assert state(started) == ((2, 3, 4, 1), (1, 2, 3), 1, (4,), (1,))
        assert (started.leader_epoch, started.partition_epoch) == (0, 1)
        assert controller.list_partition_reassignments(None) == {("t", 0): started}
        assert controller.list_partition_reassignments([("t", 0), ("nope", 0), ("t", 7)]) \
            == {("t", 0): started}

        # The leader (being removed) adds replica 4: that change completes the move, and
        # leadership goes to the first replica of the target.
        done = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 1, [1, 2, 3, 4])
        assert state(done) == ((2, 3, 4), (2, 3, 4), 2, (), ())
        assert (done.leader_epoch, done.partition_epoch) == (1, 2)  # one change, one bump
        assert partition(controller, "t") == done
        assert controller.list_partition_reassignments(None) == {}

    run(tmp_path, scenario)


def test_several_new_replicas_must_all_be_in_sync(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [1, 4, 5]) is None
        assert state(partition(controller, "t")) == ((1, 4, 5, 2, 3), (1, 2, 3), 1, (4, 5),
                                                     (2, 3))
        half = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 1, [1, 2, 3, 4])
        assert state(half) == ((1, 4, 5, 2, 3), (1, 4, 2, 3), 1, (4, 5), (2, 3))
        done = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 2,
                                                [1, 2, 3, 4, 5])
        # The leader stays; replicas left the set, so the leader epoch still goes up.
        assert state(done) == ((1, 4, 5), (1, 4, 5), 1, (), ())
        assert (done.leader_epoch, done.partition_epoch) == (1, 3)

    run(tmp_path, scenario, brokers=(1, 2, 3, 4, 5))


def test_removing_or_reordering_in_sync_replicas_completes_at_once(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [3, 2, 1]) is None
        reordered = partition(controller, "t")
        assert state(reordered) == ((3, 2, 1), (1, 2, 3), 1, (), ())
        assert (reordered.leader_epoch, reordered.partition_epoch) == (0, 1)

        assert await reassign(controller, [3, 2]) is None
        shrunk = partition(controller, "t")
        # Broker 1 led and is gone: the first in-sync replica of the target takes over.
        assert state(shrunk) == ((3, 2), (2, 3), 3, (), ())
        assert (shrunk.leader_epoch, shrunk.partition_epoch) == (1, 2)

        # The same target again changes nothing.
        offset = controller.image.offset
        assert await reassign(controller, [3, 2]) is None
        assert controller.image.offset == offset

    run(tmp_path, scenario)


def test_a_lagging_target_replica_holds_the_completion(tmp_path):
    async def scenario(controller, epochs, topic_id):
        await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 0, [1, 2])
        assert await reassign(controller, [1, 3]) is None
        # Nothing is added, but replica 3 is not in sync: the partition waits for it.
        assert state(partition(controller, "t")) == ((1, 3, 2), (1, 2), 1, (), (2,))
        done = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 2, [1, 2, 3])
        assert state(done) == ((1, 3), (1, 3), 1, (), ())

    run(tmp_path, scenario)


def test_cancelling_reverts_to_the_replicas_without_those_being_added(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [3, 4, 5]) is None
        await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 1, [1, 2, 3, 4])
        assert state(partition(controller, "t")) == ((3, 4, 5, 1, 2), (3, 4, 1, 2), 1,
                                                     (4, 5), (1, 2))
        assert await reassign(controller, None) is None
        reverted = partition(controller, "t")
        assert state(reverted) == ((3, 1, 2), (3, 1, 2), 1, (), ())
        assert reverted.leader_epoch == 1  # replicas 4 and 5 left: their fetches are fenced
        assert controller.list_partition_reassignments(None) == {}

        error = await reassign(controller, None)
        assert error is not None and error.code is ErrorCode.no_reassignment_in_progress

    run(tmp_path, scenario, brokers=(1, 2, 3, 4, 5))


def test_a_new_target_replaces_the_ongoing_reassignment(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [1, 2, 4]) is None
        assert state(partition(controller, "t")) == ((1, 2, 4, 3), (1, 2, 3), 1, (4,), (3,))
        assert await reassign(controller, [1, 2, 5]) is None
        # Kafka's rule: the current replica set (with the replicas of the old reassignment)
        # is what the new target is compared with.
        assert state(partition(controller, "t")) == ((1, 2, 5, 3, 4), (1, 2, 3), 1, (5,),
                                                     (3, 4))

    run(tmp_path, scenario, brokers=(1, 2, 3, 4, 5))


def test_cancelling_when_only_added_replicas_are_in_sync(tmp_path):
    async def scenario(controller, epochs, topic_id):
        assert await reassign(controller, [3, 4]) is None
        await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 1, [1, 2, 3])
        await fence(controller, epochs, 1)
        await fence(controller, epochs, 2)
        assert state(partition(controller, "t")) == ((3, 4, 1, 2), (3,), 3, (3, 4), (1, 2))
        error = await reassign(controller, None)
        assert error is not None and error.code is ErrorCode.invalid_replica_assignment
        assert partition(controller, "t").adding_replicas == (3, 4)  # still reassigning

        await controller.alter_configs(
            TOPIC_RESOURCE, "t", [ConfigChange("unclean.leader.election.enable", "true")],
            incremental=True, validate_only=False)
        await unfence(controller, epochs, 2)
        assert await reassign(controller, None) is None
        # The first remaining replica (1) becomes the ISR; it is fenced, so the unclean
        # election the topic allows picks broker 2.
        assert state(partition(controller, "t")) == ((1, 2), (2,), 2, (), ())

    run(tmp_path, scenario, assignment=(1, 2))


def test_invalid_targets_and_unknown_partitions(tmp_path):
    async def scenario(controller, epochs, topic_id):
        before = partition(controller, "t")
        results = await controller.alter_partition_reassignments([
            ("t", 0, [2, 2, 3]), ("t", 0, []), ("t", 0, [1, 2, 9]), ("nope", 0, [1]),
            ("t", 5, [1])])
        assert all(error is not None for error in results.values())
        assert results[("t", 0)].code is ErrorCode.invalid_replica_assignment
        assert results[("nope", 0)].code is ErrorCode.unknown_topic_or_partition
        assert results[("t", 5)].code is ErrorCode.unknown_topic_or_partition
        for target in ([2, 2, 3], [], [1, 2, 9]):
            error = await reassign(controller, target)
            assert error is not None and error.code is ErrorCode.invalid_replica_assignment, \
                target
        assert partition(controller, "t") == before

        # A fenced broker is still a registered one: it may be a target.
        await fence(controller, epochs, 4)
        assert await reassign(controller, [1, 2, 4]) is None
        assert partition(controller, "t").adding_replicas == (4,)

    run(tmp_path, scenario)


def test_errors_of_one_partition_leave_the_others_alone(tmp_path):
    async def scenario(controller, epochs, topic_id):
        results = await controller.alter_partition_reassignments(
            [("t", 0, [1, 2, 4]), ("t", 1, [1, 1])])
        assert results[("t", 0)] is None
        assert results[("t", 1)].code is ErrorCode.unknown_topic_or_partition
        assert partition(controller, "t").adding_replicas == (4,)

    run(tmp_path, scenario)


def test_preferred_election(tmp_path):
    async def scenario(controller, epochs, topic_id):
        results = await controller.elect_leaders(PREFERRED, [("t", 0)])
        assert results[("t", 0)].code is ErrorCode.election_not_needed
        assert await controller.elect_leaders(PREFERRED, None) == {}  # not-needed left out

        await fence(controller, epochs, 1)
        moved = partition(controller, "t")
        assert (moved.leader, moved.isr, moved.leader_epoch) == (2, (2, 3), 1)
        results = await controller.elect_leaders(PREFERRED, [("t", 0)])
        assert results[("t", 0)].code is ErrorCode.preferred_leader_not_available

        await unfence(controller, epochs, 1)
        # Live again but not in the ISR yet.
        results = await controller.elect_leaders(PREFERRED, [("t", 0), ("t", 3), ("x", 0)])
        assert results[("t", 0)].code is ErrorCode.preferred_leader_not_available
        assert results[("t", 3)].code is ErrorCode.unknown_topic_or_partition
        assert results[("x", 0)].code is ErrorCode.unknown_topic_or_partition

        await controller.alter_partition(2, epochs[2], topic_id, 0, 1, moved.partition_epoch,
                                         [1, 2, 3])
        assert await controller.elect_leaders(PREFERRED, None) == {("t", 0): None}
        back = partition(controller, "t")
        assert (back.leader, back.isr, back.leader_epoch) == (1, (1, 2, 3), 2)

    run(tmp_path, scenario)


def test_unclean_election(tmp_path):
    async def scenario(controller, epochs, topic_id):
        results = await controller.elect_leaders(UNCLEAN, [("t", 0)])
        assert results[("t", 0)].code is ErrorCode.election_not_needed

        await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 0, [1])
        await fence(controller, epochs, 1)
        offline = partition(controller, "t")
        assert (offline.leader, offline.isr) == (-1, (1,))  # the topic forbids unclean

        results = await controller.elect_leaders(PREFERRED, [("t", 0)])
        assert results[("t", 0)].code is ErrorCode.preferred_leader_not_available
        assert await controller.elect_leaders(UNCLEAN, [("t", 0)]) == {("t", 0): None}
        elected = partition(controller, "t")
        assert (elected.leader, elected.isr) == (2, (2,))
        assert elected.leader_epoch == offline.leader_epoch + 1

        with pytest.raises(KafkaError) as info:
            await controller.elect_leaders(7, [("t", 0)])
        assert info.value.code is ErrorCode.invalid_request

    run(tmp_path, scenario, brokers=(1, 2), assignment=(1, 2))


def test_unclean_election_with_no_live_replica(tmp_path):
    async def scenario(controller, epochs, topic_id):
        await fence(controller, epochs, 1)
        await fence(controller, epochs, 2)
        assert partition(controller, "t").leader == -1
        results = await controller.elect_leaders(UNCLEAN, [("t", 0)])
        assert results[("t", 0)].code is ErrorCode.eligible_leaders_not_available

    run(tmp_path, scenario, brokers=(1, 2), assignment=(1, 2))
