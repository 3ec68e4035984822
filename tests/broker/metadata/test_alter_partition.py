"""AlterPartition as the controller checks it: the leader's ISR changes, against the current
leader epoch, partition epoch and broker states, on a single-voter quorum."""

import asyncio

import pytest
from quorum_helpers import make_controller, open_quorum, partition, register_live

from moldau.broker.metadata.controller import NewTopic
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)


async def setup(tmp_path):
    quorum = await open_quorum(tmp_path)
    controller = make_controller(quorum)
    epochs = {broker: await register_live(controller, broker) for broker in (1, 2, 3)}
    [created] = await controller.create_topics([NewTopic("t", assignments={0: [1, 2, 3]})],
                                               validate_only=False)
    assert not isinstance(created, KafkaError)
    return quorum, controller, epochs, created.topic_id


async def refused(call):
    with pytest.raises(KafkaError) as info:
        await call
    return info.value.code


def test_the_leader_shrinks_and_expands_the_isr(tmp_path):
    async def main():
        quorum, controller, epochs, topic_id = await setup(tmp_path)
        try:
            start = partition(controller, "t")
            assert (start.leader, start.isr, start.leader_epoch, start.partition_epoch) == \
                (1, (1, 2, 3), 0, 0)
            shrunk = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 0, [3, 1])
            assert (shrunk.leader, shrunk.isr, shrunk.leader_epoch, shrunk.partition_epoch) == \
                (1, (1, 3), 0, 1)  # ISR kept in assignment order
            assert partition(controller, "t") == shrunk
            grown = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 1, [1, 2, 3])
            assert (grown.isr, grown.partition_epoch) == ((1, 2, 3), 2)
            # The same ISR again: nothing is written, the current state comes back.
            offset = quorum.image.offset
            same = await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 2, [1, 2, 3])
            assert same == grown
            assert quorum.image.offset == offset
        finally:
            await quorum.close()

    asyncio.run(main())


def test_requests_against_an_older_state_are_refused(tmp_path):
    async def main():
        quorum, controller, epochs, topic_id = await setup(tmp_path)
        try:
            await controller.alter_partition(1, epochs[1], topic_id, 0, 0, 0, [1, 2])
            # Partition epoch 0 is gone.
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, 0, [1])) is ErrorCode.invalid_update_version

            # Leadership moves to 2 and back to 1: leader epoch 2.
            await controller.heartbeat(1, epochs[1], quorum.image.offset, want_fence=True)
            moved = partition(controller, "t")
            assert (moved.leader, moved.leader_epoch) == (2, 1)
            await controller.heartbeat(1, epochs[1], quorum.image.offset)
            await controller.alter_partition(2, epochs[2], topic_id, 0, moved.leader_epoch,
                                             moved.partition_epoch, [1, 2])
            await controller.rebalance_leaders()
            current = partition(controller, "t")
            assert (current.leader, current.leader_epoch) == (1, 2)

            # The leader's request from its earlier leadership (epoch 0): fenced.
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, current.partition_epoch, [1])
            ) is ErrorCode.fenced_leader_epoch
            # A leader epoch this controller has not given out yet.
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 3, current.partition_epoch, [1])
            ) is ErrorCode.not_leader_or_follower
            # The former leader, with the epoch it led in.
            assert await refused(controller.alter_partition(
                2, epochs[2], topic_id, 0, 1, current.partition_epoch, [2])
            ) is ErrorCode.not_leader_or_follower
            assert partition(controller, "t") == current
        finally:
            await quorum.close()

    asyncio.run(main())


def test_a_non_leader_or_a_stale_broker_is_refused(tmp_path):
    async def main():
        quorum, controller, epochs, topic_id = await setup(tmp_path)
        try:
            assert await refused(controller.alter_partition(
                2, epochs[2], topic_id, 0, 0, 0, [2])) is ErrorCode.not_leader_or_follower
            assert await refused(controller.alter_partition(
                1, epochs[2], topic_id, 0, 0, 0, [1])) is ErrorCode.stale_broker_epoch
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 1, 0, 0, [1])) is ErrorCode.unknown_topic_or_partition
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, 0, [2, 3])) is ErrorCode.invalid_request
            assert partition(controller, "t").partition_epoch == 0
        finally:
            await quorum.close()

    asyncio.run(main())


def test_only_usable_assigned_replicas_may_join(tmp_path):
    async def main():
        quorum, controller, epochs, topic_id = await setup(tmp_path)
        try:
            await controller.heartbeat(3, epochs[3], quorum.image.offset, want_fence=True)
            fenced = partition(controller, "t")
            assert fenced.isr == (1, 2)
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, fenced.partition_epoch, [1, 2, 3])
            ) is ErrorCode.ineligible_replica
            # Not a replica of the partition at all.
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, fenced.partition_epoch, [1, 2, 4])
            ) is ErrorCode.ineligible_replica
            # Broker 2 shuts down: it leaves the ISR.
            await controller.heartbeat(2, epochs[2], quorum.image.offset,
                                       want_shut_down=True)
            assert partition(controller, "t").isr == (1,)

            # Unfenced again, broker 3 may join.
            await controller.heartbeat(3, epochs[3], quorum.image.offset)
            current = partition(controller, "t")
            joined = await controller.alter_partition(1, epochs[1], topic_id, 0, 0,
                                                      current.partition_epoch, [1, 3])
            assert joined.isr == (1, 3)
            assert joined.partition_epoch == current.partition_epoch + 1
            # Broker 2 is shutting down: not eligible to join.
            assert await refused(controller.alter_partition(
                1, epochs[1], topic_id, 0, 0, joined.partition_epoch, [1, 2, 3])
            ) is ErrorCode.ineligible_replica
        finally:
            await quorum.close()

    asyncio.run(main())
