"""The metadata log, image and controller, on real files."""

import asyncio
import os

import pytest

from moldau.broker.metadata.controller import ConfigChange, Controller, CreatedTopic, NewTopic
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.log import METADATA_DIR, MetadataLog
from moldau.broker.metadata.records import TOPIC_RESOURCE
from moldau.errors import ErrorCode, KafkaError


def open_controller(path, partitions=1):
    image = MetadataImage()
    controller = Controller(1, MetadataLog(str(path)), image, default_partitions=partitions,
                            default_replication_factor=1)
    controller.replay()
    return controller


def run(coro):
    return asyncio.run(coro)


def test_topics_survive_reopen(tmp_path):
    controller = open_controller(tmp_path, partitions=3)
    [created] = run(controller.create_topics([NewTopic("orders", configs={
        "retention.ms": "1000"})], validate_only=False))
    assert isinstance(created, CreatedTopic) and created.num_partitions == 3
    controller.log.close()

    reopened = open_controller(tmp_path)
    topic = reopened.image.topics["orders"]
    assert topic.topic_id == created.topic_id
    assert sorted(topic.partitions) == [0, 1, 2]
    assert reopened.image.topic_configs("orders") == {"retention.ms": "1000"}


def test_create_errors(tmp_path):
    controller = open_controller(tmp_path)
    results = run(controller.create_topics([
        NewTopic("ok"), NewTopic("bad/name"), NewTopic("x" * 250), NewTopic(".."),
        NewTopic("p0", num_partitions=0), NewTopic("rf3", replication_factor=3),
        NewTopic("cfg", configs={"retention.ms": "soon"}),
        NewTopic("unknown", configs={"no.such": "1"}),
    ], validate_only=False))
    codes = [r.code if isinstance(r, KafkaError) else ErrorCode.none for r in results]
    assert codes == [ErrorCode.none, ErrorCode.invalid_topic_exception,
                     ErrorCode.invalid_topic_exception, ErrorCode.invalid_topic_exception,
                     ErrorCode.invalid_partitions, ErrorCode.invalid_replication_factor,
                     ErrorCode.invalid_config, ErrorCode.invalid_config]
    [again, collide] = run(controller.create_topics([NewTopic("ok"), NewTopic("a.b")],
                                                    validate_only=False))
    assert isinstance(again, KafkaError) and again.code is ErrorCode.topic_already_exists
    [collision] = run(controller.create_topics([NewTopic("a_b")], validate_only=False))
    assert isinstance(collision, KafkaError)
    assert collision.code is ErrorCode.invalid_topic_exception


def test_validate_only_writes_nothing(tmp_path):
    controller = open_controller(tmp_path)
    [result] = run(controller.create_topics([NewTopic("t")], validate_only=True))
    assert isinstance(result, CreatedTopic)
    assert "t" not in controller.image.topics
    assert controller.log.next_offset == 0


def test_delete_partitions_and_configs(tmp_path):
    controller = open_controller(tmp_path)
    run(controller.create_topics([NewTopic("t", num_partitions=2)], validate_only=False))
    run(controller.create_partitions("t", 5, None, validate_only=False))
    assert sorted(controller.image.topics["t"].partitions) == [0, 1, 2, 3, 4]
    with pytest.raises(KafkaError) as info:
        run(controller.create_partitions("t", 3, None, validate_only=False))
    assert info.value.code is ErrorCode.invalid_partitions

    run(controller.alter_configs(TOPIC_RESOURCE, "t", [
        ConfigChange("cleanup.policy", "compact", 0)], incremental=True, validate_only=False))
    run(controller.alter_configs(TOPIC_RESOURCE, "t", [
        ConfigChange("cleanup.policy", "delete", 2)], incremental=True, validate_only=False))
    assert controller.image.topic_configs("t") == {"cleanup.policy": "compact,delete"}
    run(controller.alter_configs(TOPIC_RESOURCE, "t", [ConfigChange("retention.ms", "5")],
                                 incremental=False, validate_only=False))
    assert controller.image.topic_configs("t") == {"retention.ms": "5"}

    [deleted, missing] = run(controller.delete_topics(["t", "nope"]))
    assert not isinstance(deleted, KafkaError)
    assert isinstance(missing, KafkaError)
    assert missing.code is ErrorCode.unknown_topic_or_partition
    assert "t" not in controller.image.topics
    assert controller.image.topic_configs("t") == {}


def test_producer_id_blocks_never_repeat(tmp_path):
    controller = open_controller(tmp_path)
    first, size = run(controller.allocate_producer_ids(1))
    controller.log.close()
    reopened = open_controller(tmp_path)
    second, _ = run(reopened.allocate_producer_ids(1))
    assert second >= first + size


def test_torn_tail_is_truncated(tmp_path):
    controller = open_controller(tmp_path)
    run(controller.create_topics([NewTopic("a"), NewTopic("b")], validate_only=False))
    controller.log.close()
    path = os.path.join(tmp_path, METADATA_DIR, "00000000000000000000.log")
    size = os.path.getsize(path)
    with open(path, "ab") as handle:
        handle.write(b"\x00\x00\x01\x00garbage")  # a torn entry
    reopened = open_controller(tmp_path)
    assert set(reopened.image.topics) == {"a", "b"}
    assert os.path.getsize(path) == size
    run(reopened.create_topics([NewTopic("c")], validate_only=False))
    reopened.log.close()
    assert set(open_controller(tmp_path).image.topics) == {"a", "b", "c"}


def test_append_to_a_list_starts_from_the_default(tmp_path):
    controller = open_controller(tmp_path)
    run(controller.create_topics([NewTopic("t")], validate_only=False))
    run(controller.alter_configs(TOPIC_RESOURCE, "t", [
        ConfigChange("cleanup.policy", "compact", 2)], incremental=True, validate_only=False))
    assert controller.image.topic_configs("t") == {"cleanup.policy": "delete,compact"}
