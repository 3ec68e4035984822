"""Log compaction on a real broker: what consumers read after the cleaner has run."""

from __future__ import annotations

import time

import pytest

from e2e.support import Rec, ck_consume_all, ck_create_topic, ck_produce, now_ms, unique

pytestmark = pytest.mark.timeout(240)

KEYS = 2000
VERSIONS = 4


def latest_by_key(records: list[Rec]) -> dict[bytes, Rec]:
    latest: dict[bytes, Rec] = {}
    for record in records:
        assert record.key is not None
        latest[record.key] = record
    return latest


def test_compacted_topic_keeps_the_latest_value_per_key(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": 200})
    topic = unique("compacted")
    ck_create_topic(broker.bootstrap, topic, configs={
        "cleanup.policy": "compact", "segment.bytes": "65536",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    base = now_ms()
    produced = [Rec(0, f"key-{k:05d}".encode(), f"v{v}-{k}".encode() * 4, (), base + v)
                for v in range(VERSIONS) for k in range(KEYS)]
    # Every tenth key ends with a tombstone.
    produced += [Rec(0, f"key-{k:05d}".encode(), None, (), base + VERSIONS)
                 for k in range(0, KEYS, 10)]
    # Batches must fit a segment (RECORD_LIST_TOO_LARGE otherwise, as in Kafka).
    producer_config = {"compression.type": "lz4", "batch.size": 16384}
    offsets = ck_produce(broker.bootstrap, topic, produced, **producer_config)
    produced = [Rec(r.partition, r.key, r.value, r.headers, r.timestamp, offset)
                for r, offset in zip(produced, offsets, strict=True)]
    latest = latest_by_key(produced)
    survivors = {key: r for key, r in latest.items() if r.value is not None}

    deadline = time.monotonic() + 120
    while True:
        read = ck_consume_all(broker.bootstrap, topic)
        if len(read) < len(produced) // 2:
            break
        assert time.monotonic() < deadline, f"not compacted: {len(read)} records remain"
        time.sleep(1)

    # Offsets keep their order; every surviving key's latest version is there, unchanged,
    # at the offset the producer was given.
    assert [r.offset for r in read] == sorted({r.offset for r in read})
    by_offset = {r.offset: r for r in read}
    for key, want in survivors.items():
        got = by_offset.get(want.offset)
        assert got is not None, f"latest value of {key!r} at {want.offset} was removed"
        assert (got.key, got.value) == (want.key, want.value)
    # What is left besides the survivors is only the not-yet-cleaned tail of the log.
    last_read = latest_by_key(read)
    for key, record in last_read.items():
        assert record.offset == latest[key].offset, f"{key!r} reads an outdated version"
    superseded = [r for r in read if latest[r.key].offset != r.offset]
    assert len(superseded) < len(produced) // 10

    broker.restart()
    assert ck_consume_all(broker.bootstrap, topic) == read
