"""The controller on a single-voter metadata quorum, on real files: topics, configs and
producer ids are committed through Raft, survive reopening, and a torn Raft log tail loses
only what was torn."""

import asyncio
import os
import struct
import uuid

import crc32c
import pytest
from quorum_helpers import make_controller, open_quorum, register_live

from moldau.broker.metadata.controller import ConfigChange, CreatedTopic, NewTopic
from moldau.broker.metadata.log import METADATA_DIR
from moldau.broker.metadata.records import TOPIC_RESOURCE, TopicRecord, decode_records
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)

RAFT_SEGMENT = "00000000000000000000.log"
_FRAME = struct.Struct(">IIqiB")  # length, crc32c, offset, epoch, flags (DiskRaftLog's frame)


async def open_controller(path, partitions=1):
    """A single-voter quorum in `path` (no controller listener) and a Controller on it."""
    return make_controller(await open_quorum(path), partitions=partitions)


def segment_path(path):
    return os.path.join(path, METADATA_DIR, RAFT_SEGMENT)


def read_frames(path):
    """The bytes of a Raft segment and its frames, each checked: (position, offset, epoch,
    flags, payload). Fails on any byte that is not part of a valid frame."""
    with open(path, "rb") as handle:
        data = handle.read()
    frames = []
    pos = 0
    while pos < len(data):
        assert len(data) - pos >= _FRAME.size, f"a torn frame at byte {pos}"
        length, checksum, offset, epoch, flags = _FRAME.unpack_from(data, pos)
        end = pos + 4 + length
        assert end <= len(data), f"a frame cut short at byte {pos}"
        assert crc32c.crc32c(data[pos + 8:end]) == checksum, f"a bad CRC at byte {pos}"
        if frames:
            assert offset == frames[-1][1] + 1
        frames.append((pos, offset, epoch, flags, data[pos + _FRAME.size:end]))
        pos = end
    return data, frames


def topics_created_by(frame):
    _pos, _offset, _epoch, flags, payload = frame
    if flags:
        return set()  # a control entry (leader change)
    return {record.name for record in decode_records(payload) if isinstance(record, TopicRecord)}


def test_topics_survive_reopen(tmp_path):
    async def main():
        controller = await open_controller(tmp_path, partitions=3)
        await register_live(controller, 1)
        [created] = await controller.create_topics([NewTopic("orders", configs={
            "retention.ms": "1000"})], validate_only=False)
        assert isinstance(created, CreatedTopic) and created.num_partitions == 3
        await controller.quorum.close()

        reopened = await open_controller(tmp_path)
        try:
            topic = reopened.image.topics["orders"]
            assert topic.topic_id == created.topic_id
            assert sorted(topic.partitions) == [0, 1, 2]
            assert all(p.replicas == (1,) and p.leader == 1 for p in topic.partitions.values())
            assert reopened.image.topic_configs("orders") == {"retention.ms": "1000"}
            assert reopened.image.live_brokers() == [1]
        finally:
            await reopened.quorum.close()

    asyncio.run(main())


def test_create_errors(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        try:
            # No registered broker: nowhere to place a replica.
            [nowhere] = await controller.create_topics([NewTopic("early")],
                                                       validate_only=False)
            assert isinstance(nowhere, KafkaError)
            assert nowhere.code is ErrorCode.invalid_replication_factor
            # Registered but still fenced (it has not caught up): still nowhere.
            epoch = await controller.register_broker(1, uuid.uuid4(),
                                                     [("PLAINTEXT", "127.0.0.1", 9092)], None)
            [fenced] = await controller.create_topics([NewTopic("early")], validate_only=False)
            assert isinstance(fenced, KafkaError)
            assert fenced.code is ErrorCode.invalid_replication_factor
            _, is_fenced, _ = await controller.heartbeat(1, epoch, controller.image.offset)
            assert not is_fenced

            results = await controller.create_topics([
                NewTopic("ok"), NewTopic("bad/name"), NewTopic("x" * 250), NewTopic(".."),
                NewTopic("p0", num_partitions=0), NewTopic("rf3", replication_factor=3),
                NewTopic("cfg", configs={"retention.ms": "soon"}),
                NewTopic("unknown", configs={"no.such": "1"}),
                NewTopic("__cluster_metadata"),
            ], validate_only=False)
            codes = [r.code if isinstance(r, KafkaError) else ErrorCode.none for r in results]
            assert codes == [ErrorCode.none, ErrorCode.invalid_topic_exception,
                             ErrorCode.invalid_topic_exception,
                             ErrorCode.invalid_topic_exception,
                             ErrorCode.invalid_partitions, ErrorCode.invalid_replication_factor,
                             ErrorCode.invalid_config, ErrorCode.invalid_config,
                             ErrorCode.invalid_topic_exception]
            assert set(controller.image.topics) == {"ok"}
            [again, collide] = await controller.create_topics([NewTopic("ok"), NewTopic("a.b")],
                                                              validate_only=False)
            assert isinstance(again, KafkaError)
            assert again.code is ErrorCode.topic_already_exists
            assert isinstance(collide, CreatedTopic)
            [collision] = await controller.create_topics([NewTopic("a_b")],
                                                         validate_only=False)
            assert isinstance(collision, KafkaError)
            assert collision.code is ErrorCode.invalid_topic_exception
            [first, duplicate] = await controller.create_topics(
                [NewTopic("twice"), NewTopic("twice")], validate_only=False)
            assert isinstance(first, CreatedTopic)
            assert isinstance(duplicate, KafkaError)
            assert duplicate.code is ErrorCode.invalid_request
        finally:
            await controller.quorum.close()

    asyncio.run(main())


def test_validate_only_writes_nothing(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        try:
            await register_live(controller, 1)
            raft_log = controller.quorum.driver.log
            end, offset = raft_log.end_offset, controller.image.offset
            [result] = await controller.create_topics([NewTopic("t")], validate_only=True)
            assert isinstance(result, CreatedTopic)
            await controller.create_topics([NewTopic("u")], validate_only=False)
            await controller.create_partitions("u", 4, None, validate_only=True)
            await controller.alter_configs(TOPIC_RESOURCE, "u", [
                ConfigChange("retention.ms", "5")], incremental=True, validate_only=True)
            assert "t" not in controller.image.topics
            assert len(controller.image.topics["u"].partitions) == 1
            assert controller.image.topic_configs("u") == {}
            # Exactly one entry was written: the creation of "u".
            assert raft_log.end_offset == end + 1
            assert controller.image.offset == end > offset
        finally:
            await controller.quorum.close()

    asyncio.run(main())


def test_delete_partitions_and_configs(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        try:
            await register_live(controller, 1)
            await controller.create_topics([NewTopic("t", num_partitions=2)],
                                           validate_only=False)
            await controller.create_partitions("t", 5, None, validate_only=False)
            assert sorted(controller.image.topics["t"].partitions) == [0, 1, 2, 3, 4]
            with pytest.raises(KafkaError) as info:
                await controller.create_partitions("t", 3, None, validate_only=False)
            assert info.value.code is ErrorCode.invalid_partitions
            with pytest.raises(KafkaError) as info:
                await controller.create_partitions("t", 6, [[2]], validate_only=False)
            assert info.value.code is ErrorCode.invalid_replica_assignment

            await controller.alter_configs(TOPIC_RESOURCE, "t", [
                ConfigChange("cleanup.policy", "compact", 0)], incremental=True,
                validate_only=False)
            await controller.alter_configs(TOPIC_RESOURCE, "t", [
                ConfigChange("cleanup.policy", "delete", 2)], incremental=True,
                validate_only=False)
            assert controller.image.topic_configs("t") == {"cleanup.policy": "compact,delete"}
            await controller.alter_configs(TOPIC_RESOURCE, "t", [
                ConfigChange("retention.ms", "5")], incremental=False, validate_only=False)
            assert controller.image.topic_configs("t") == {"retention.ms": "5"}

            [deleted, missing] = await controller.delete_topics(["t", "nope"])
            assert not isinstance(deleted, KafkaError)
            assert isinstance(missing, KafkaError)
            assert missing.code is ErrorCode.unknown_topic_or_partition
            assert "t" not in controller.image.topics
            assert controller.image.topic_configs("t") == {}
            await controller.quorum.close()

            reopened = await open_controller(tmp_path)
            assert "t" not in reopened.image.topics
            assert reopened.image.topic_configs("t") == {}
            await reopened.quorum.close()
        finally:
            await controller.quorum.close()

    asyncio.run(main())


def test_producer_id_blocks_never_repeat(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        first, size = await controller.allocate_producer_ids(1)
        second, _ = await controller.allocate_producer_ids(2)
        assert second >= first + size
        await controller.quorum.close()
        reopened = await open_controller(tmp_path)
        try:
            third, _ = await reopened.allocate_producer_ids(1)
            assert third >= second + size
        finally:
            await reopened.quorum.close()

    asyncio.run(main())


def test_torn_raft_log_tail(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        await register_live(controller, 1)
        for name in ("a", "b"):  # one Raft entry each
            [created] = await controller.create_topics([NewTopic(name)], validate_only=False)
            assert isinstance(created, CreatedTopic)
        await controller.quorum.close()

        path = segment_path(tmp_path)
        original, frames = read_frames(path)
        assert topics_created_by(frames[-1]) == {"b"}
        with open(path, "ab") as handle:
            handle.write(b"\x00\x00\x01\x00garbage")  # a torn frame after the last one

        reopened = await open_controller(tmp_path)
        assert set(reopened.image.topics) == {"a", "b"}
        # The garbage was cut off: the file is what it was, then only valid frames.
        data, _ = read_frames(path)
        assert data.startswith(original)
        [created] = await reopened.create_topics([NewTopic("c")], validate_only=False)
        assert isinstance(created, CreatedTopic)
        await reopened.quorum.close()

        # Cut the last frame (the creation of "c") in its middle: only that change is lost.
        _, frames = read_frames(path)
        position = frames[-1][0]
        assert topics_created_by(frames[-1]) == {"c"}
        with open(path, "r+b") as handle:
            handle.truncate(position + _FRAME.size + 3)
        again = await open_controller(tmp_path)
        try:
            assert set(again.image.topics) == {"a", "b"}
            data, frames = read_frames(path)
            assert all(topics_created_by(frame) != {"c"} for frame in frames)
            # The log goes on from where the valid part ended.
            [created] = await again.create_topics([NewTopic("c")], validate_only=False)
            assert isinstance(created, CreatedTopic)
        finally:
            await again.quorum.close()
        last = await open_controller(tmp_path)
        try:
            assert set(last.image.topics) == {"a", "b", "c"}
            assert last.image.topics["c"].topic_id == created.topic_id
        finally:
            await last.quorum.close()

    asyncio.run(main())


def test_append_to_a_list_starts_from_the_default(tmp_path):
    async def main():
        controller = await open_controller(tmp_path)
        try:
            await register_live(controller, 1)
            await controller.create_topics([NewTopic("t")], validate_only=False)
            await controller.alter_configs(TOPIC_RESOURCE, "t", [
                ConfigChange("cleanup.policy", "compact", 2)], incremental=True,
                validate_only=False)
            assert controller.image.topic_configs("t") == {"cleanup.policy": "delete,compact"}
            await controller.alter_configs(TOPIC_RESOURCE, "t", [
                ConfigChange("cleanup.policy", "delete", 3)], incremental=True,
                validate_only=False)
            assert controller.image.topic_configs("t") == {"cleanup.policy": "compact"}
        finally:
            await controller.quorum.close()

    asyncio.run(main())
