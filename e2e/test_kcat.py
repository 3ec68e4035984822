"""kcat (librdkafka's command line tool): metadata, produce with codecs, consume, offsets."""

from __future__ import annotations

import pytest

from e2e.support import (
    CODECS,
    Rec,
    assert_codec,
    assert_idempotent_batches,
    expected_offset_for_time,
    kcat,
    kcat_json_lines,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    now_ms,
    stored_batches,
    unique,
    wait_until,
    with_offsets,
)

pytestmark = pytest.mark.timeout(120)

BROKER_OVERRIDES = {"num.partitions": 2, "node.id": 3}


def test_metadata_listing(module_broker):
    topic = unique("kcat-meta")
    kp_create_topic(module_broker.bootstrap, topic, partitions=3)
    listing = kcat_json_lines(kcat(module_broker.bootstrap, "-L", "-J", "-t", topic).stdout)[0]
    assert listing["brokers"] == [{"id": 3, "name": module_broker.bootstrap}]
    (entry,) = listing["topics"]
    assert entry["topic"] == topic
    assert "error" not in entry, entry
    partitions = sorted(entry["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p["leader"] == 3
        assert p["replicas"] == [{"id": 3}] and p["isrs"] == [{"id": 3}]
    # Without -t: every topic.
    everything = kcat_json_lines(kcat(module_broker.bootstrap, "-L", "-J").stdout)[0]
    assert topic in {t["topic"] for t in everything["topics"]}


@pytest.mark.parametrize("codec", CODECS)
def test_produce_with_codec_then_read_back(module_broker, codec):
    bootstrap = module_broker.bootstrap
    topic = unique(f"kcat-{codec}")
    kp_create_topic(bootstrap, topic)
    lines = [(f"key-{i}", f"value {i} " + "compressible text " * (i % 9 + 3)) for i in range(50)]
    stdin = "".join(f"{k}:{v}\n" for k, v in lines).encode()
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", ":", "-H", "origin=kcat",
         "-H", "empty=", "-X", "enable.idempotence=true", "-X", "linger.ms=50", stdin=stdin)

    got = kp_consume_all(bootstrap, topic)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, k.encode(), v.encode()) for i, (k, v) in enumerate(lines)]
    assert all(r.headers == (("origin", b"kcat"), ("empty", b"")) for r in got), got[0].headers
    batches = stored_batches(bootstrap, topic)
    assert_idempotent_batches(batches)
    assert_codec(batches, codec)


def test_consume_from_beginning_to_end(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kcat-consume")
    kp_create_topic(bootstrap, topic, partitions=2)
    base = now_ms() - 500_000
    records = [Rec(i % 2, None if i == 4 else b"k%d" % i, b"value-%d" % i,
                   (("h", b"x%d" % i),) if i % 2 else (), base + i * 10) for i in range(30)]
    expected = with_offsets(records)
    kp_produce(bootstrap, topic, records, compression_type="lz4")

    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J").stdout
    messages = kcat_json_lines(out)
    got = sorted((m["partition"], m["offset"], m["key"], m["payload"], m.get("headers"),
                   m["tstype"], m["ts"]) for m in messages)
    want = sorted((r.partition, r.offset, None if r.key is None else r.key.decode(),
                   r.value.decode(), [r.headers[0][0], r.headers[0][1].decode()]
                   if r.headers else None, "create", r.timestamp) for r in expected)
    assert got == want


def test_query_offsets_by_time(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kcat-query")
    kp_create_topic(bootstrap, topic, partitions=1)
    records = make_records(20, seed=3, step_ms=100)
    expected = with_offsets(records)
    kp_produce(bootstrap, topic, records)
    for ts in (records[0].timestamp - 1, records[7].timestamp + 50, records[-1].timestamp):
        out = kcat(bootstrap, "-Q", "-J", "-t", f"{topic}:0:{ts}").stdout
        answer = kcat_json_lines(out)[0][topic]["0"]
        assert "error" not in answer, answer
        assert answer["offset"] == expected_offset_for_time(expected, 0, ts), (ts, answer)


def test_produce_auto_creates_topic_with_num_partitions(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kcat-auto")
    kcat(bootstrap, "-P", "-t", topic, "-p", "1", stdin=b"one\ntwo\nthree\n")

    def partitions() -> list:
        listing = kcat_json_lines(kcat(bootstrap, "-L", "-J", "-t", topic).stdout)[0]
        entry = listing["topics"][0]
        return [] if "error" in entry else entry["partitions"]

    found = wait_until(partitions, 15, "auto-created topic in metadata")
    assert sorted(p["partition"] for p in found) == [0, 1]  # num.partitions=2
    got = kp_consume_all(bootstrap, topic, range(2))
    assert [(r.partition, r.offset, r.value) for r in got] == [
        (1, 0, b"one"), (1, 1, b"two"), (1, 2, b"three")]
