"""Broker sessions kept by the controller on a single-voter quorum: registration, heartbeats,
fencing, session expiry and controlled shutdown, with the leader elections they cause.

Brokers 1, 2 and 3 are only registration records here; node 1 is the quorum's voter."""

import asyncio
import uuid

import pytest
from prometheus_client import CollectorRegistry
from quorum_helpers import (
    make_controller,
    open_quorum,
    partition,
    register,
    register_live,
)

from moldau.broker.metadata.controller import NewTopic
from moldau.broker.metadata.partition_change import NO_LEADER
from moldau.broker.metrics.quorum_collector import QuorumCollector
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)


async def create(controller, name, assignments):
    [created] = await controller.create_topics([NewTopic(name, assignments=assignments)],
                                               validate_only=False)
    assert not isinstance(created, KafkaError), created
    return created


def test_registration_is_fenced_until_a_caught_up_heartbeat(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epoch, _ = await register(controller, 1)
            broker = quorum.image.brokers[1]
            assert broker.fenced and broker.epoch == epoch
            assert broker.endpoint("PLAINTEXT") == ("127.0.0.1", 9091)
            assert quorum.image.live_brokers() == []

            # Not yet caught up with its own registration: stays fenced.
            assert await controller.heartbeat(1, epoch, epoch - 1) == (False, True, False)
            assert quorum.image.brokers[1].fenced
            # Caught up: unfenced, and the change is committed to the image.
            assert await controller.heartbeat(1, epoch, quorum.image.offset) == \
                (True, False, False)
            assert not quorum.image.brokers[1].fenced
            assert quorum.image.live_brokers() == [1]
            # A later heartbeat changes nothing.
            offset = quorum.image.offset
            assert await controller.heartbeat(1, epoch, offset) == (True, False, False)
            assert quorum.image.offset == offset
        finally:
            await quorum.close()

    asyncio.run(main())


def test_reregistration_and_stale_epochs(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epoch, incarnation = await register(controller, 1)
            offset = quorum.image.offset
            # The same incarnation again (a retried request): the same epoch, nothing written.
            assert (await register(controller, 1, incarnation))[0] == epoch
            assert quorum.image.offset == offset

            # A new incarnation while the old one never heartbeated: accepted, new epoch.
            second, _ = await register(controller, 1)
            assert second > epoch
            assert quorum.image.brokers[1].epoch == second
            with pytest.raises(KafkaError) as stale:
                await controller.heartbeat(1, epoch, quorum.image.offset)
            assert stale.value.code is ErrorCode.stale_broker_epoch
            with pytest.raises(KafkaError) as unknown:
                await controller.heartbeat(7, second, quorum.image.offset)
            assert unknown.value.code is ErrorCode.stale_broker_epoch

            # Once the registered one heartbeated (and is unfenced), its session is live:
            # another incarnation must wait for it to expire.
            await controller.heartbeat(1, second, quorum.image.offset)
            assert not quorum.image.brokers[1].fenced
            with pytest.raises(KafkaError) as duplicate:
                await register(controller, 1)
            assert duplicate.value.code is ErrorCode.duplicate_broker_registration
            assert quorum.image.brokers[1].epoch == second
            # The live incarnation itself may still register again.
            assert (await register(controller, 1, quorum.image.brokers[1].incarnation_id)
                    )[0] == second
        finally:
            await quorum.close()

    asyncio.run(main())


def test_a_new_controller_accepts_a_new_incarnation_not_heard_from(tmp_path):
    """After a controller change the sessions start over: a registration the new controller
    never heard a heartbeat for does not block a restarted broker."""

    async def main():
        quorum = await open_quorum(tmp_path)
        controller = make_controller(quorum)
        old_epoch = await register_live(controller, 2)
        await quorum.close()

        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            assert not quorum.image.brokers[2].fenced
            new_epoch, _ = await register(controller, 2)
            assert new_epoch > old_epoch
            assert quorum.image.brokers[2].fenced
            with pytest.raises(KafkaError) as stale:
                await controller.heartbeat(2, old_epoch, quorum.image.offset)
            assert stale.value.code is ErrorCode.stale_broker_epoch
        finally:
            await quorum.close()

    asyncio.run(main())


def test_a_silent_broker_is_fenced_and_loses_its_leaderships(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum, session_timeout_ms=200)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2, 3)}
            created = await create(controller, "t", {0: [2, 3, 1], 1: [1, 3, 2]})
            before = partition(controller, "t")
            assert (before.leader, before.isr) == (2, (2, 3, 1))

            await controller.expire_sessions()  # everyone is within the session
            assert quorum.image.live_brokers() == [1, 2, 3]

            await asyncio.sleep(0.3)  # longer than the session timeout
            for broker in (1, 3):  # they keep heartbeating; broker 2 went silent
                await controller.heartbeat(broker, epochs[broker], quorum.image.offset)
            await controller.expire_sessions()

            assert quorum.image.brokers[2].fenced
            assert quorum.image.live_brokers() == [1, 3]
            after = partition(controller, "t")
            assert after.leader == 3  # the next replica in assignment order, in the ISR
            assert after.isr == (3, 1)
            assert after.leader_epoch == before.leader_epoch + 1
            assert after.partition_epoch == before.partition_epoch + 1
            follower = partition(controller, "t", 1)
            assert (follower.leader, follower.isr, follower.leader_epoch) == (1, (1, 3), 0)
            assert quorum.image.topics_by_id[created.topic_id].partitions[0] == after

            # A fenced broker's heartbeat (caught up) unfences it; it rejoins no ISR by itself.
            _, fenced, _ = await controller.heartbeat(2, epochs[2], quorum.image.offset)
            assert not fenced
            assert partition(controller, "t") == after
        finally:
            await quorum.close()

    asyncio.run(main())


def test_unfencing_gives_leaderless_partitions_a_leader_from_their_isr(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2, 3)}
            await create(controller, "t", {0: [2, 3], 1: [3, 2]})
            await create(controller, "other", {0: [1]})

            for broker in (3, 2):  # 3 first: it leaves the ISR, 2 stays as its last member
                await controller.heartbeat(broker, epochs[broker], quorum.image.offset,
                                           want_fence=True)
                assert quorum.image.brokers[broker].fenced
            for index in (0, 1):
                offline = partition(controller, "t", index)
                assert (offline.leader, offline.isr) == (NO_LEADER, (2,))

            # 3 is back but is not in the ISR: a clean election cannot use it.
            _, fenced, _ = await controller.heartbeat(3, epochs[3], quorum.image.offset)
            assert not fenced
            assert partition(controller, "t").leader == NO_LEADER
            # 2 is back: both partitions get it as their leader.
            offline_epochs = [partition(controller, "t", i).leader_epoch for i in (0, 1)]
            _, fenced, _ = await controller.heartbeat(2, epochs[2], quorum.image.offset)
            assert not fenced
            for index in (0, 1):
                back = partition(controller, "t", index)
                assert (back.leader, back.isr) == (2, (2,))
                assert back.leader_epoch == offline_epochs[index] + 1
            assert partition(controller, "other").leader == 1
        finally:
            await quorum.close()

    asyncio.run(main())


def test_unclean_election_on_unfencing_when_the_topic_allows_it(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
            [created] = await controller.create_topics([NewTopic(
                "u", assignments={0: [1, 2]},
                configs={"unclean.leader.election.enable": "true"})], validate_only=False)
            assert not isinstance(created, KafkaError)
            await controller.heartbeat(2, epochs[2], quorum.image.offset, want_fence=True)
            await controller.heartbeat(1, epochs[1], quorum.image.offset, want_fence=True)
            assert (partition(controller, "u").leader, partition(controller, "u").isr) == \
                (NO_LEADER, (1,))
            assert controller.unclean_elections == 0  # the first leader was in the ISR
            await controller.heartbeat(2, epochs[2], quorum.image.offset)
            assert (partition(controller, "u").leader, partition(controller, "u").isr) == \
                (2, (2,))
            assert controller.unclean_elections == 1
            registry = CollectorRegistry()
            registry.register(QuorumCollector(quorum, controller))
            assert registry.get_sample_value(
                "kafka_controller_controllerstats_uncleanleaderelections_total") == 1
        finally:
            await quorum.close()

    asyncio.run(main())


def test_controlled_shutdown_moves_leaderships_before_letting_the_broker_go(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2, 3)}
            await create(controller, "t", {0: [2, 1, 3], 1: [1, 2, 3]})
            await create(controller, "other", {0: [3, 1]})
            untouched = partition(controller, "other")

            seen = quorum.image.offset  # what broker 2 has applied when it asks
            caught_up, fenced, should = await controller.heartbeat(
                2, epochs[2], seen, want_shut_down=True)
            assert (caught_up, fenced, should) == (True, False, False)
            assert quorum.image.brokers[2].in_controlled_shutdown
            assert 2 not in quorum.image.live_brokers()
            assert quorum.image.offset > seen
            led = partition(controller, "t", 0)
            assert (led.leader, led.isr) == (1, (1, 3))
            followed = partition(controller, "t", 1)
            assert (followed.leader, followed.isr) == (1, (1, 3))
            assert partition(controller, "other") == untouched

            # Asking again before it has applied the change: still not allowed to stop, and
            # nothing more is written.
            change = quorum.image.offset
            assert (await controller.heartbeat(2, epochs[2], seen, want_shut_down=True)
                    )[2] is False
            assert (await controller.heartbeat(2, epochs[2], change - 1, want_shut_down=True)
                    )[2] is False
            assert quorum.image.offset == change
            # Once it has the change, it may stop.
            assert (await controller.heartbeat(2, epochs[2], change, want_shut_down=True)
                    )[2] is True

            # New replicas and leaders avoid it; rebalancing does not give it leadership back.
            await controller.rebalance_leaders()
            assert partition(controller, "t", 0).leader == 1
        finally:
            await quorum.close()

    asyncio.run(main())


def test_preferred_leaders_take_their_leadership_back(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
            created = await create(controller, "t", {0: [1, 2]})
            await controller.heartbeat(1, epochs[1], quorum.image.offset, want_fence=True)
            assert partition(controller, "t").leader == 2
            await controller.heartbeat(1, epochs[1], quorum.image.offset)  # unfenced
            moved = partition(controller, "t")
            # Back in the ISR through the leader's AlterPartition, then rebalanced to 1.
            await controller.alter_partition(2, epochs[2], created.topic_id, 0,
                                             moved.leader_epoch, moved.partition_epoch, [1, 2])
            await controller.rebalance_leaders()
            back = partition(controller, "t")
            assert (back.leader, back.isr) == (1, (1, 2))
            assert back.leader_epoch == moved.leader_epoch + 1
        finally:
            await quorum.close()

    asyncio.run(main())


def test_registration_of_a_new_incarnation_moves_the_old_ones_leaderships(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum, session_timeout_ms=200)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
            await create(controller, "t", {0: [2, 1]})
            await asyncio.sleep(0.3)  # broker 2's session lapses; it restarts
            await controller.heartbeat(1, epochs[1], quorum.image.offset)
            epoch, _ = await register(controller, 2, uuid.uuid4())
            assert epoch > epochs[2]
            assert quorum.image.brokers[2].fenced
            moved = partition(controller, "t")
            assert (moved.leader, moved.isr) == (1, (1,))
        finally:
            await quorum.close()

    asyncio.run(main())


def test_controlled_shutdown_completes_after_a_controller_change(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        controller = make_controller(quorum)
        epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
        await create(controller, "t", {0: [2, 1]})
        await controller.heartbeat(2, epochs[2], quorum.image.offset, want_shut_down=True)
        assert partition(controller, "t").leader == 1
        await quorum.close()

        # The controller restarts (a new quorum epoch) while broker 2 is shutting down.
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            assert quorum.image.brokers[2].in_controlled_shutdown
            assert partition(controller, "t").leader == 1  # nothing left to move
            _, _, should_shut_down = await controller.heartbeat(
                2, epochs[2], quorum.image.offset, want_shut_down=True)
            assert should_shut_down
        finally:
            await quorum.close()

    asyncio.run(main())


def test_a_stale_heartbeat_racing_a_registration_gives_no_leadership(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
            await create(controller, "t", {0: [2, 1]})
            for broker in (1, 2):
                await controller.heartbeat(broker, epochs[broker], quorum.image.offset,
                                           want_fence=True)
            assert (partition(controller, "t").leader, partition(controller, "t").isr) == \
                (NO_LEADER, (2,))

            # Broker 2 restarts: its new incarnation registers while a heartbeat of the old
            # one (fenced, caught up) is in flight. The registration takes the lock first.
            registration = asyncio.ensure_future(register(controller, 2))
            heartbeat = asyncio.ensure_future(
                controller.heartbeat(2, epochs[2], quorum.image.offset))
            (new_epoch, _), outcome = await asyncio.gather(registration, heartbeat,
                                                           return_exceptions=True)
            assert new_epoch > epochs[2]
            assert quorum.image.brokers[2].fenced  # the new incarnation has not caught up
            # The old incarnation's heartbeat is answered as Kafka does: its epoch is stale.
            assert isinstance(outcome, KafkaError)
            assert outcome.code is ErrorCode.stale_broker_epoch
            # No partition may be led by a fenced broker.
            assert partition(controller, "t").leader == NO_LEADER
        finally:
            await quorum.close()

    asyncio.run(main())


def test_rebalancing_waits_for_the_imbalance_percentage(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2)}
            created = await create(controller, "moved", {0: [1, 2]})
            await controller.heartbeat(1, epochs[1], quorum.image.offset, want_fence=True)
            await controller.heartbeat(1, epochs[1], quorum.image.offset)  # unfenced
            moved = partition(controller, "moved")
            await controller.alter_partition(2, epochs[2], created.topic_id, 0,
                                             moved.leader_epoch, moved.partition_epoch, [1, 2])
            # Broker 1 is preferred for 10 partitions and 1 of them is led elsewhere: 10 %.
            await create(controller, "stays", {p: [1, 2] for p in range(9)})
            await controller.rebalance_leaders(10)
            assert partition(controller, "moved").leader == 2  # not above 10 %
            await controller.rebalance_leaders(5)
            assert partition(controller, "moved").leader == 1
        finally:
            await quorum.close()

    asyncio.run(main())
