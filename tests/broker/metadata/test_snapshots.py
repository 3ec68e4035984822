"""Snapshots of the metadata image and the conversion of a pre-quorum metadata log."""

import asyncio
import os
import uuid

import pytest
from quorum_helpers import make_controller, open_quorum, register, register_live

from moldau.broker.metadata.controller import ConfigChange, NewTopic
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.log import LOG_FILE, METADATA_DIR, MetadataLog
from moldau.broker.metadata.quorum import MetadataStateMachine
from moldau.broker.metadata.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from moldau.broker.raft.quorum_store import QUORUM_STATE_FILE
from moldau.broker.security.acl import (
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

pytestmark = pytest.mark.timeout(60)

ORDERS = uuid.UUID(int=1)
GONE = uuid.UUID(int=2)
INCARNATION = uuid.UUID(int=3)


def write_legacy_log(base):
    """A metadata log as brokers wrote it before the quorum: one record per entry."""
    legacy = MetadataLog(str(base))
    try:
        legacy.append([
            RegisterBrokerRecord(1, INCARNATION, (("PLAINTEXT", "127.0.0.1", 9092),), "r1",
                                 False),  # broker_epoch -1: the record's offset
            TopicRecord("orders", ORDERS),
            PartitionRecord(ORDERS, 0, (1,), (1,), 1),
            PartitionRecord(ORDERS, 1, (1,), (1,), 1, leader_epoch=3, partition_epoch=5),
            ConfigRecord(TOPIC_RESOURCE, "orders", "retention.ms", "1000"),
            TopicRecord("gone", GONE),
            PartitionRecord(GONE, 0, (1,), (1,), 1),
            RemoveTopicRecord(GONE),
        ])
        return legacy.append([ProducerIdsRecord(1, 2000)])
    finally:
        legacy.close()


def test_a_legacy_metadata_log_becomes_a_snapshot(tmp_path):
    last = write_legacy_log(tmp_path)
    directory = os.path.join(tmp_path, METADATA_DIR)

    async def main():
        quorum = await open_quorum(tmp_path)
        image = quorum.image
        assert set(image.topics) == {"orders"}
        orders = image.topics["orders"]
        assert orders.topic_id == ORDERS
        assert orders.partitions[1] == PartitionRecord(ORDERS, 1, (1,), (1,), 1, 3, 5)
        assert image.topic_configs("orders") == {"retention.ms": "1000"}
        assert image.next_producer_id == 2000
        broker = image.brokers[1]
        assert (broker.epoch, broker.incarnation_id, broker.rack, broker.fenced) == \
            (0, INCARNATION, "r1", False)
        # The old file is gone; the Raft log starts after the snapshot of its records.
        names = os.listdir(directory)
        assert LOG_FILE not in names and not any(n.endswith(".pre-quorum") for n in names)
        assert quorum.driver.log.log_start_offset == last + 1
        assert quorum.image.offset >= last

        # The quorum goes on from there, and keeps it all across a restart.
        controller = make_controller(quorum)
        allocated, _ = await controller.allocate_producer_ids(1)
        assert allocated == 2000
        epoch, _ = await register(controller, 1)  # a new incarnation of broker 1
        assert epoch > last
        await controller.heartbeat(1, epoch, quorum.image.offset)
        [created] = await controller.create_topics([NewTopic("later")], validate_only=False)
        await quorum.close()

        reopened = await open_quorum(tmp_path)
        try:
            assert set(reopened.image.topics) == {"orders", "later"}
            assert reopened.image.topics["later"].topic_id == created.topic_id
            assert reopened.image.topic_configs("orders") == {"retention.ms": "1000"}
            assert reopened.image.next_producer_id == 3000
            assert reopened.image.brokers[1].epoch == epoch
        finally:
            await reopened.close()

    asyncio.run(main())


def test_a_quorum_directory_is_never_taken_for_a_legacy_log(tmp_path):
    """The Raft segment has the legacy file's name: with a quorum-state next to it, it is
    the Raft log and stays so."""

    async def main():
        quorum = await open_quorum(tmp_path)
        controller = make_controller(quorum)
        await register_live(controller, 1)
        await controller.create_topics([NewTopic("t")], validate_only=False)
        await quorum.close()
        directory = os.path.join(tmp_path, METADATA_DIR)
        assert os.path.exists(os.path.join(directory, QUORUM_STATE_FILE))
        assert os.path.getsize(os.path.join(directory, LOG_FILE)) > 0

        reopened = await open_quorum(tmp_path)
        try:
            assert set(reopened.image.topics) == {"t"}
            assert reopened.driver.log.log_start_offset == 0
        finally:
            await reopened.close()

    asyncio.run(main())


def test_a_migration_interrupted_after_the_rename_is_finished_on_restart(tmp_path):
    write_legacy_log(tmp_path)
    directory = os.path.join(tmp_path, METADATA_DIR)
    # A crash right after migrate_legacy_log moved the old file aside, before the snapshot
    # was written.
    os.replace(os.path.join(directory, LOG_FILE),
               os.path.join(directory, LOG_FILE + ".pre-quorum"))

    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            assert set(quorum.image.topics) == {"orders"}
        finally:
            await quorum.close()

    asyncio.run(main())


def assert_same_image(restored, image):
    assert restored.topics == image.topics
    assert restored.topics_by_id == image.topics_by_id
    assert restored.brokers == image.brokers
    # A resource whose last override was removed may be kept as an empty dict: the same
    # configs.
    assert {k: v for k, v in restored.configs.items() if v} == \
        {k: v for k, v in image.configs.items() if v}
    assert restored.next_producer_id == image.next_producer_id
    assert restored.acls.by_id == image.acls.by_id
    assert restored.offset == image.offset


def test_snapshot_round_trip(tmp_path):
    async def main():
        quorum = await open_quorum(tmp_path)
        try:
            controller = make_controller(quorum)
            epochs = {broker: await register_live(controller, broker) for broker in (1, 2, 3)}
            await register(controller, 4)  # fenced
            await controller.create_topics([
                NewTopic("a", assignments={0: [1, 2], 1: [2, 3]},
                         configs={"cleanup.policy": "compact"}),
                NewTopic("b", assignments={0: [3]}),
                NewTopic("c", assignments={0: [1]}, configs={"retention.ms": "7"}),
            ], validate_only=False)
            await controller.alter_configs(TOPIC_RESOURCE, "b", [
                ConfigChange("retention.ms", "5")], incremental=True, validate_only=False)
            await controller.alter_configs(TOPIC_RESOURCE, "b", [
                ConfigChange("retention.ms", None, 1)], incremental=True, validate_only=False)
            await controller.delete_topics(["c"])
            await controller.allocate_producer_ids(1)
            await controller.create_acls([
                Acl(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                    Operation.READ, Permission.ALLOW),
                Acl(ResourceType.GROUP, "g", PatternType.PREFIXED, "User:*", "10.0.0.1",
                    Operation.ALL, Permission.DENY),
                Acl(ResourceType.TOPIC, "b", PatternType.LITERAL, "User:bob", "*",
                    Operation.WRITE, Permission.ALLOW)])
            await controller.delete_acls([AclFilter(
                ResourceType.TOPIC, "b", PatternType.ANY, None, None, Operation.ANY,
                Permission.ANY)])
            assert len(quorum.image.acls) == 2
            await controller.heartbeat(2, epochs[2], quorum.image.offset, want_shut_down=True)
            await controller.heartbeat(3, epochs[3], quorum.image.offset, want_fence=True)
            image = quorum.image
            assert image.brokers[2].in_controlled_shutdown and image.brokers[3].fenced
            assert image.brokers[4].fenced
            offline = image.topics["a"].partitions[1]
            assert (offline.leader, offline.isr) == (-1, (3,))

            data = quorum.state_machine.snapshot()
            published = []
            restored = MetadataStateMachine(MetadataImage())
            restored.publishers.append(published.append)
            restored.load(data)
            assert_same_image(restored.image, image)
            assert published and published[0]

            # Loading into an image that already holds other things replaces them.
            stale = MetadataImage()
            stale.apply(0, TopicRecord("stale", uuid.uuid4()))
            stale.apply(1, ProducerIdsRecord(1, 10 ** 9))
            machine = MetadataStateMachine(stale)
            machine.load(data)
            assert_same_image(machine.image, image)
            assert machine.image is stale  # handlers keep the same object
            # And the snapshot of the restored image is the same snapshot.
            assert MetadataStateMachine(restored.image).snapshot() == data
        finally:
            await quorum.close()

    asyncio.run(main())
