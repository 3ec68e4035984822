"""Kafka's console producer and consumer, kafka-get-offsets, kafka-delete-records and
kafka-log-dirs, against Moldau and against Apache Kafka."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks
from e2e.kafka_dist import ToolResult, kafka_tool
from e2e.support import Rec, kp_create_topic, kp_produce, now_ms, unique

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS

# Console producer input: headers, key and value separated by tabs (the tool's defaults),
# headers as name:value pairs joined by commas, and <NULL> for a null key or value.
LINES = [
    ("h1:v1,h2:v2", "k1", "v1"),
    ("h:", "k2", "v2 with spaces"),
    ("h3:", "", "empty key"),
    ("h4:x", "<NULL>", "null key"),
    ("h5:y,h5:z", "k5", "<NULL>"),
    ("h6:é", "key-é", "value-ü"),
] + [("n:1", f"key-{i}", f"value-{i}" * (i % 5)) for i in range(40)]
NULL = "<NULL>"


def default_partition(key: str, partitions: int) -> int:
    """Where the Java producer's default partitioner puts a non-null key: murmur2 of the key
    bytes, made positive, modulo the partition count."""
    data = key.encode()
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    length4 = len(data) // 4
    for i in range(length4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = data[4 * length4:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_console_producer_and_consumer(target):
    topic = unique("java-console")
    kp_create_topic(target.bootstrap, topic, partitions=3)
    text = "".join("\t".join(line) + "\n" for line in LINES)
    produced = kafka_tool("kafka-console-producer", "--bootstrap-server", target.bootstrap,
                          "--topic", topic, "--property", "parse.key=true",
                          "--property", "parse.headers=true", "--property",
                          f"null.marker={NULL}", stdin=text)
    consumed = kafka_tool("kafka-console-consumer", "--bootstrap-server", target.bootstrap,
                          "--topic", topic, "--from-beginning",
                          "--max-messages", str(len(LINES)), "--timeout-ms", "30000",
                          "--property", "print.key=true", "--property", "print.headers=true",
                          "--property", "print.partition=true",
                          "--property", "print.offset=true",
                          "--property", f"null.literal={NULL}")
    with Checks() as check:
        check.equal("console producer output", produced.stdout + produced.stderr, "")
        check.equal("console consumer summary", consumed.stderr.splitlines()[-1:],
                    [f"Processed a total of {len(LINES)} messages"])
        rows = [line.split("\t") for line in consumed.lines]
        check.equal("records read (headers, key, value)",
                    sorted(tuple(row[2:]) for row in rows), sorted(LINES))
        offsets = defaultdict(list)
        for row in rows:
            partition = int(row[0].removeprefix("Partition:"))
            offsets[partition].append(int(row[1].removeprefix("Offset:")))
            key = row[3]
            if key != NULL:  # null keys go to a partition the producer picks at random
                check.equal(f"partition of key {key!r}", partition,
                            default_partition(key, 3))
        for partition, seen in offsets.items():
            check.equal(f"offsets in partition {partition}", seen, list(range(len(seen))))


def test_console_consumer_from_an_offset(target):
    topic = unique("java-console-seek")
    kp_create_topic(target.bootstrap, topic, partitions=2)
    base = now_ms() - 60_000
    kp_produce(target.bootstrap, topic,
               [Rec(1, b"k%d" % i, b"v%d" % i, (), base + i) for i in range(6)])
    consumed = kafka_tool("kafka-console-consumer", "--bootstrap-server", target.bootstrap,
                          "--topic", topic, "--partition", "1", "--offset", "3",
                          "--max-messages", "3", "--timeout-ms", "30000",
                          "--property", "print.key=true", "--property", "print.offset=true",
                          "--property", "print.timestamp=true")
    assert consumed.lines == [f"CreateTime:{base + i}\tOffset:{i}\tk{i}\tv{i}"
                              for i in range(3, 6)], consumed.describe()


def get_offsets(target, *args: str) -> list[str]:
    return kafka_tool("kafka-get-offsets", "--bootstrap-server", target.bootstrap,
                      *args).lines


def test_get_offsets_and_delete_records(target, tmp_path):
    topic = unique("java-offsets")
    kp_create_topic(target.bootstrap, topic, partitions=2)
    base = now_ms() - 600_000
    # Partition 0 has its largest timestamp in the middle; partition 1 increases.
    stamps0 = [0, 5000, 9000, 2000, 4000, 7000]
    records = [Rec(0, b"a", b"x" * i, (), base + ts) for i, ts in enumerate(stamps0)]
    records += [Rec(1, b"b", b"y" * i, (), base + 1000 * i) for i in range(4)]
    kp_produce(target.bootstrap, topic, records)

    with Checks() as check:
        check.equal("latest", get_offsets(target, "--topic", topic),
                    [f"{topic}:0:6", f"{topic}:1:4"])
        check.equal("earliest", get_offsets(target, "--topic", topic, "--time", "-2"),
                    [f"{topic}:0:0", f"{topic}:1:0"])
        check.equal("max timestamp", get_offsets(target, "--topic", topic, "--time", "-3"),
                    [f"{topic}:0:2", f"{topic}:1:3"])
        check.equal("earliest local", get_offsets(target, "--topic", topic, "--time", "-4"),
                    [f"{topic}:0:0", f"{topic}:1:0"])
        # The first offset whose timestamp is at least the one asked for; a partition with
        # no such record is left out.
        check.equal("by timestamp",
                    get_offsets(target, "--topic", topic, "--time", str(base + 4500)),
                    [f"{topic}:0:1"])
        check.equal("by an earlier timestamp",
                    get_offsets(target, "--topic", topic, "--time", str(base + 1500)),
                    [f"{topic}:0:1", f"{topic}:1:2"])
        check.equal("one partition", get_offsets(target, "--topic-partitions", f"{topic}:1"),
                    [f"{topic}:1:4"])

        plan = tmp_path / "delete.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "offset": 4}]}))
        deleted = kafka_tool("kafka-delete-records", "--bootstrap-server", target.bootstrap,
                             "--offset-json-file", str(plan))
        check.equal("kafka-delete-records output", deleted.lines, [
            "Executing records delete operation",
            "Records delete operation completed:",
            f"partition: {topic}-0\tlow_watermark: 4"])
        check.equal("earliest after delete-records",
                    get_offsets(target, "--topic", topic, "--time", "-2"),
                    [f"{topic}:0:4", f"{topic}:1:0"])


def test_log_dirs(target):
    topic = unique("java-logdirs")
    kp_create_topic(target.bootstrap, topic, partitions=2)
    kp_produce(target.bootstrap, topic, [Rec(i % 2, None, b"z" * 100, (), now_ms())
                                         for i in range(10)])
    result = kafka_tool("kafka-log-dirs", "--bootstrap-server", target.bootstrap,
                        "--describe", "--topic-list", topic)
    check_log_dirs(result, topic, target.log_dir)


def check_log_dirs(result: ToolResult, topic: str, log_dir) -> None:
    lines = result.lines
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"], result.describe()
    report = json.loads(lines[2])
    (broker,) = report["brokers"]
    (entry,) = broker["logDirs"]
    partitions = sorted(entry["partitions"], key=lambda p: p["partition"])
    # The size is the bytes of the partition's segment files on disk.
    sizes = {p: sum(f.stat().st_size for f in (log_dir / f"{topic}-{p}").glob("*.log"))
             for p in range(2)}
    assert report == {
        "version": 1,
        "brokers": [{"broker": 1, "logDirs": [{
            "logDir": str(log_dir), "error": None, "partitions": entry["partitions"]}]}],
    }
    assert partitions == [{"partition": f"{topic}-{p}", "size": sizes[p], "offsetLag": 0,
                           "isFuture": False} for p in range(2)]
    assert all(sizes.values())
