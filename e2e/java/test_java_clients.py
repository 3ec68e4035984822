"""The Java client library (kafka-clients) with its default settings, against Moldau and
against Apache Kafka: the idempotent producer with every codec, and a classic-protocol group
consumer (fetch sessions on, as by default) reading everything back byte for byte."""

from __future__ import annotations

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks, rec_from_json, rec_to_json, run_driver
from e2e.support import (
    CODEC_IDS,
    assert_codec,
    assert_idempotent_batches,
    assert_records_equal,
    make_records,
    stored_batches,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS

CODECS = ["none", "lz4", "zstd", "gzip", "snappy"]
PARTITIONS = 3


def test_producer_codecs_and_group_consumer(target, tmp_path):
    prefix = unique("java-client")
    topics = {codec: f"{prefix}-{codec}" for codec in CODECS}
    records = {codec: make_records(60, partitions=PARTITIONS, seed=CODEC_IDS[codec])
               for codec in CODECS}
    group = unique("java-client-group")
    total = sum(len(recs) for recs in records.values())
    steps: list[dict] = [{"op": "create_topic", "name": topic, "partitions": PARTITIONS}
                         for topic in topics.values()]
    # Defaults otherwise: enable.idempotence=true, acks=all, batching by linger and size.
    steps += [{"op": "produce", "topic": topics[codec],
               "config": {} if codec == "none" else {"compression.type": codec},
               "records": [rec_to_json(r) for r in records[codec]]} for codec in CODECS]
    steps.append({"op": "consume", "group": group, "topics": list(topics.values()),
                  "count": total, "commit": True,
                  "config": {"auto.offset.reset": "earliest"}})
    # The same group again: it resumes at the committed offsets, so nothing is left to read.
    steps.append({"op": "consume", "group": group, "topics": list(topics.values()),
                  "count": 0, "linger_ms": 3000, "commit": False})
    results = run_driver(target.bootstrap, steps, tmp_path)
    produced = {codec: results[len(CODECS) + i] for i, codec in enumerate(CODECS)}
    first, second = results[-2], results[-1]

    with Checks() as check:
        for codec in CODECS:
            expected = with_offsets(records[codec])
            check.equal(f"{codec}: offsets acknowledged to the producer",
                        produced[codec]["offsets"], [r.offset for r in expected])
            got = [rec_from_json(r) for r in first["records"] if r["topic"] == topics[codec]]
            try:
                assert_records_equal(got, expected)
            except AssertionError as exc:
                check.true(f"{codec}: records read back", False, str(exc))
            for partition in range(PARTITIONS):
                batches = stored_batches(target.bootstrap, topics[codec], partition)
                try:
                    assert_idempotent_batches(batches)
                    assert_codec(batches, codec)
                except AssertionError as exc:
                    check.true(f"{codec}: stored batches of partition {partition}", False,
                               str(exc))
        ends = {f"{topics[c]}:{r.partition}": r.offset + 1
                for c in CODECS for r in with_offsets(records[c])}
        check.equal("committed offsets after the first consumer", first["committed"], ends)
        check.equal("assignment of the only member", sorted(first["assignment"]), sorted(ends))
        check.equal("records read by the second consumer of the group", second["records"], [])
        check.equal("committed offsets seen by the second consumer", second["committed"], ends)
