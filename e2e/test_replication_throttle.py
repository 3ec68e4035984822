"""Replication throttling (KIP-73) on real brokers: Kafka's `kafka-reassign-partitions
--throttle` moves a partition no faster than the rate it sets, and `--verify` removes the
throttle once the move is done; without a throttle the same move is quick.

Three `moldau broker` processes from LocalCluster. The quota is measured over two windows
of one second (`replication.quota.window.num=2`) rather than Kafka's eleven: a young quota
counts all but one window as elapsed, so with eleven a move must exceed ten seconds' worth
of the rate before the throttle shows, which would make the test long.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.support import running_cluster, unique, wait_until
from moldau.client import Admin, Producer, TopicPartition
from moldau.client.admin import ConfigResource, NewTopic, ResourceType
from moldau.cluster import LocalCluster

pytestmark = pytest.mark.timeout(400)

BROKERS = 3
REASSIGN_MAIN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
RECORD = 10 * 1024
PARTITION_BYTES = 4 * 1024 * 1024
RATE = 400 * 1024  # bytes per second
# The move may beat size/rate by what the quota lets through before it first measures an
# excess: one window's worth of the rate plus one fetch (replica.fetch.max.bytes).
SLACK_BYTES = RATE + 1024 * 1024
THROTTLE_CONFIGS = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
REPLICA_CONFIGS = {"leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from e2e.kafka_dist import ensure_artifacts
    ensure_artifacts()  # Kafka's tools: fails naming make kafka-deps' script if missing
    directory = tmp_path_factory.mktemp("throttle") / "cluster"
    with running_cluster(directory, BROKERS, {"auto.leader.rebalance.enable": "false",
                                              "replication.quota.window.num": "2"}) as local:
        yield local


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": cluster.bootstrap_servers,
                "default.api.timeout.ms": 30000}) as client:
        yield client


def fill(cluster: LocalCluster, admin: Admin, tp: TopicPartition, leader: int) -> int:
    """A one-replica partition on `leader` holding PARTITION_BYTES; its size on disk."""
    admin.create_topics([NewTopic(tp.topic, replica_assignment={0: [leader]})])
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                   "linger.ms": 20, "compression.type": "none"}) as producer:
        value = bytes(RECORD)
        for _ in range(PARTITION_BYTES // RECORD):
            producer.send(tp.topic, value, partition=0)
        producer.flush(120)
    dirs = admin.describe_log_dirs([leader])[leader]
    return sum(d.replicas[tp].size for d in dirs.values() if tp in d.replicas)


def reassign(cluster: LocalCluster, tp: TopicPartition, replicas: list[int], tmp_path: Path,
             *extra: str) -> tuple[Path, float]:
    """Start the move with Kafka's tool; the plan file and when the tool returned."""
    from e2e.kafka_dist import run_java

    plan = tmp_path / f"{tp.topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": replicas}]}))
    executed = run_java(REASSIGN_MAIN, "--bootstrap-server", cluster.bootstrap_servers,
                        "--reassignment-json-file", str(plan), "--execute", *extra)
    assert f"Successfully started partition reassignment for {tp.topic}-{tp.partition}" \
        in executed.stdout, executed.describe()
    return plan, time.monotonic()


def wait_moved(admin: Admin, tp: TopicPartition, replicas: tuple[int, ...]) -> float:
    def done() -> bool:
        partition = admin.describe_topics([tp.topic])[tp.topic].partitions[tp.partition]
        return partition.replicas == replicas and set(partition.isr) == set(replicas) \
            and tp not in admin.list_partition_reassignments([tp])

    wait_until(done, 180, f"{tp} moved to {list(replicas)}", interval=0.2)
    return time.monotonic()


def verify(cluster: LocalCluster, plan: Path) -> str:
    from e2e.kafka_dist import run_java

    result = run_java(REASSIGN_MAIN, "--bootstrap-server", cluster.bootstrap_servers,
                      "--reassignment-json-file", str(plan), "--verify")
    return result.stdout


def dynamic_configs(admin: Admin, kind: ResourceType, name: str) -> dict[str, str]:
    """The settings of a resource set on it (not defaults)."""
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource]
    wanted = THROTTLE_CONFIGS | REPLICA_CONFIGS
    return {key: entry.value for key, entry in entries.items()
            if key in wanted and entry.value not in (None, "", str(2**63 - 1))}


def throttled_bytes(cluster: LocalCluster, node: int, side: str) -> float:
    url = cluster.node(node).metrics_url
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf"^moldau_{side}_replication_throttled_bytes_total (\S+)$", text, re.M)
    assert match, f"no {side} throttled bytes metric on node {node}"
    return float(match.group(1))


def test_a_throttled_move_keeps_to_the_rate_and_verify_clears_it(cluster, admin, tmp_path):
    tp = TopicPartition(unique("throttled"), 0)
    size = fill(cluster, admin, tp, leader=1)
    assert size >= PARTITION_BYTES

    plan, started = reassign(cluster, tp, [1, 2], tmp_path, "--throttle", str(RATE))
    # What the tool set while the move runs: the rates on both brokers, the leader's
    # replica and the new one in the topic's lists.
    for broker in ("1", "2"):
        assert dynamic_configs(admin, ResourceType.BROKER, broker) == {
            name: str(RATE) for name in THROTTLE_CONFIGS}
    assert dynamic_configs(admin, ResourceType.TOPIC, tp.topic) == {
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "0:2"}
    elapsed = wait_moved(admin, tp, (1, 2)) - started

    floor = (size - SLACK_BYTES) / RATE
    print(f"throttled move: {size} bytes in {elapsed:.1f} s = {size / elapsed / 1024:.0f} "
          f"KiB/s at a throttle of {RATE / 1024:.0f} KiB/s")
    assert elapsed >= floor, f"{size} bytes moved in {elapsed:.1f} s, faster than {RATE} B/s"
    assert elapsed <= 4 * size / RATE + 30, f"the move took {elapsed:.1f} s"
    assert throttled_bytes(cluster, 1, "leader") >= size - SLACK_BYTES
    assert throttled_bytes(cluster, 2, "follower") >= size - SLACK_BYTES

    stdout = verify(cluster, plan)
    assert f"Reassignment of partition {tp.topic}-0 is completed." in stdout, stdout
    assert "Clearing broker-level throttles" in stdout and "Clearing topic-level throttles" \
        in stdout, stdout
    for broker in ("1", "2", "3"):
        assert dynamic_configs(admin, ResourceType.BROKER, broker) == {}
    assert dynamic_configs(admin, ResourceType.TOPIC, tp.topic) == {}


def test_an_unthrottled_move_is_quick(cluster, admin, tmp_path):
    tp = TopicPartition(unique("unthrottled"), 0)
    size = fill(cluster, admin, tp, leader=3)
    _, started = reassign(cluster, tp, [3, 2], tmp_path)
    elapsed = wait_moved(admin, tp, (3, 2)) - started
    print(f"unthrottled move: {size} bytes in {elapsed:.1f} s")
    assert elapsed < size / RATE / 2, f"an unthrottled move took {elapsed:.1f} s"
