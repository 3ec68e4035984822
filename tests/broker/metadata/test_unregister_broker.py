"""UnregisterBroker (KIP-631) as the controller commits it, on a single-voter quorum: the
broker leaves every ISR and leadership, its registration goes, and an unknown id is
BROKER_ID_NOT_REGISTERED; the same id registers again afterwards."""

import asyncio
from dataclasses import replace

import pytest
from quorum_helpers import make_controller, open_quorum, partition, register, register_live

from moldau.broker.metadata.controller import NewTopic
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import UnregisterBrokerRecord
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)


def run(tmp_path, scenario):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            await scenario(make_controller(quorum))
        finally:
            await quorum.close()

    asyncio.run(main())


def test_an_unregistered_broker_leaves_isrs_and_leaderships_and_the_image(tmp_path):
    async def scenario(controller):
        for broker in (1, 2, 3, 4):
            await register_live(controller, broker)
        [created] = await controller.create_topics(
            [NewTopic("t", assignments={0: [2, 1, 3], 1: [1, 3, 4]})], validate_only=False)
        assert not isinstance(created, KafkaError), created
        assert partition(controller, "t", 0).leader == 2
        epoch = controller.image.brokers[2].epoch

        await controller.unregister_broker(2)

        assert 2 not in controller.image.brokers
        first, second = partition(controller, "t", 0), partition(controller, "t", 1)
        # The assignment stays; the ISR and the leadership move to the others.
        assert (first.replicas, first.isr, first.leader) == ((2, 1, 3), (1, 3), 1)
        # A partition it never held is untouched.
        assert (second.replicas, second.isr, second.leader, second.partition_epoch) == \
            ((1, 3, 4), (1, 3, 4), 1, 0)
        assert controller.image.live_brokers() == [1, 3, 4]
        # The record carries the registration's epoch: replayed on a registration of that
        # epoch it removes it, on a newer one (the broker registered again) it does not.
        replayed = MetadataImage()
        for record in controller.image.to_records():
            replayed.apply(replayed.offset + 1, record)
        assert sorted(replayed.brokers) == [1, 3, 4]
        old = MetadataImage()
        old.brokers = {2: replace(controller.image.brokers[1], broker_id=2, epoch=epoch)}
        old.apply(100, UnregisterBrokerRecord(2, epoch + 1))
        assert 2 in old.brokers
        old.apply(101, UnregisterBrokerRecord(2, epoch))
        assert 2 not in old.brokers

    run(tmp_path, scenario)


def test_an_unknown_broker_id_is_refused_with_kafkas_error(tmp_path):
    async def scenario(controller):
        await register_live(controller, 1)
        with pytest.raises(KafkaError) as refused:
            await controller.unregister_broker(7)
        assert refused.value.code is ErrorCode.broker_id_not_registered
        assert refused.value.message == "Broker ID 7 is not currently registered"
        await controller.unregister_broker(1)
        with pytest.raises(KafkaError) as again:
            await controller.unregister_broker(1)
        assert again.value.code is ErrorCode.broker_id_not_registered

    run(tmp_path, scenario)


def test_a_fenced_broker_can_be_unregistered_and_its_id_registers_again(tmp_path):
    async def scenario(controller):
        await register_live(controller, 1)
        old_epoch, _ = await register(controller, 4)  # registered, still fenced
        assert controller.image.brokers[4].fenced
        await controller.unregister_broker(4)
        assert 4 not in controller.image.brokers
        # Its old epoch is stale now: a heartbeat of that life is refused.
        with pytest.raises(KafkaError) as stale:
            await controller.heartbeat(4, old_epoch, controller.image.offset)
        assert stale.value.code is ErrorCode.stale_broker_epoch
        await register_live(controller, 4)
        assert controller.image.live_brokers() == [1, 4]

    run(tmp_path, scenario)
