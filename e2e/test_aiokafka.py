"""aiokafka against the broker: admin, idempotent produce with every codec, consume back."""

from __future__ import annotations

import pytest

from e2e.support import (
    CODEC_IDS,
    CODECS,
    aio_consume_all,
    aio_create_topic,
    aio_offsets_for_times,
    aio_produce,
    assert_codec,
    assert_idempotent_batches,
    assert_records_equal,
    expected_offset_for_time,
    kp_produce,
    make_records,
    run,
    stored_batches,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(120)


def test_admin_creates_topic_with_configs(module_broker):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = unique("aio-admin")

    async def scenario() -> tuple[list, list]:
        await aio_create_topic(module_broker.bootstrap, topic, partitions=3,
                               configs={"retention.ms": "7200000"})
        admin = AIOKafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
        await admin.start()
        try:
            described = await admin.describe_topics([topic])
            configs = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None})])
            return described, configs
        finally:
            await admin.close()

    described, configs = run(scenario())
    (meta,) = described
    assert meta["error_code"] == 0
    assert sorted(p["partition"] for p in meta["partitions"]) == [0, 1, 2]
    resources = configs[0].resources
    assert len(resources) == 1
    error_code, _, _, name, entries = resources[0][:5]
    assert (error_code, name) == (0, topic)
    assert [(e[0], e[1]) for e in entries] == [("retention.ms", "7200000")]


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(module_broker, codec):
    bootstrap = module_broker.bootstrap
    topic = unique(f"aio-{codec}")
    records = make_records(60, partitions=2, seed=100 + CODEC_IDS[codec])
    expected = with_offsets(records)

    async def scenario() -> tuple[list[int], list]:
        await aio_create_topic(bootstrap, topic, partitions=2)
        offsets = await aio_produce(bootstrap, topic, records, enable_idempotence=True,
                                    linger_ms=20,
                                    compression_type=None if codec == "none" else codec)
        return offsets, await aio_consume_all(bootstrap, topic, range(2))

    offsets, consumed = run(scenario())
    assert offsets == [r.offset for r in expected]
    assert_records_equal(consumed, expected)
    for partition in range(2):
        batches = stored_batches(bootstrap, topic, partition)
        assert_idempotent_batches(batches)
        assert_codec(batches, codec)


def test_offsets_for_times(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("aio-times")
    records = make_records(30, seed=31)
    expected = with_offsets(records)
    first, last = records[0].timestamp, records[-1].timestamp

    async def scenario() -> list[tuple[int, dict, dict]]:
        await aio_create_topic(bootstrap, topic)
        await aio_produce(bootstrap, topic, records, enable_idempotence=True)
        out = []
        for ts in (first - 1, first, first + 4_200, last, last + 1000):
            got = await aio_offsets_for_times(bootstrap, topic, {0: ts})
            out.append((ts, got, {0: expected_offset_for_time(expected, 0, ts)}))
        return out

    for ts, got, want in run(scenario()):
        assert got == want, f"timestamp {ts}"


def test_reads_what_kafka_python_wrote(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("aio-cross")
    records = make_records(40, partitions=2, seed=41)

    async def create() -> None:
        await aio_create_topic(bootstrap, topic, partitions=2)

    run(create())
    kp_produce(bootstrap, topic, records, compression_type="zstd")
    consumed = run(aio_consume_all(bootstrap, topic, range(2)))
    assert_records_equal(consumed, with_offsets(records))
