"""Replication on a real 3-node cluster of `moldau broker` processes, seen by librdkafka:
acks=all against min.insync.replicas while a replica is down, and replica log files that end
up byte for byte the same once it is back."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cluster.launcher import LocalCluster, free_base_port
from moldau.records.codec import iter_batches

FAST = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 4000,
    "controller.quorum.election.timeout.ms": 500,
    "controller.quorum.fetch.timeout.ms": 1000,
}
TOPIC = "acks-isr"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster", brokers=3, base_port=free_base_port(3),
                         overrides=FAST)
    local.start(timeout=60)
    try:
        yield local
    finally:
        local.stop(timeout=30)


def deliver(bootstrap: str, value: bytes, acks: str) -> KafkaError | None:
    """Produce one record without retries; the delivery error, or None."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "retries": 0,
                         "enable.idempotence": False, "message.timeout.ms": 20000})
    outcome: list[KafkaError | None] = []
    producer.produce(TOPIC, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def isr(cluster: LocalCluster) -> tuple[int, list[int]]:
    view = cluster.metadata()
    [entry] = [p for p in view.partitions if p.topic == TOPIC and p.partition == 0]
    return entry.leader, sorted(entry.isr)


def log_batches(cluster: LocalCluster, node_id: int) -> bytes:
    """The partition's record batches as stored in a stopped node's segment files."""
    directory = cluster.node(node_id).data_dir / f"{TOPIC}-0"
    out = bytearray()
    for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
        data = Path(path).read_bytes()
        for position, header in iter_batches(data):
            out += data[position:position + header.size]
    return bytes(out)


def test_acks_all_needs_min_insync_replicas_and_replicas_end_identical(cluster):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "3"})]
                        )[TOPIC].result(30)
    cluster.wait_until(lambda view: any(p.topic == TOPIC for p in view.partitions), 30,
                       "the topic in the metadata")
    assert deliver(bootstrap, b"all three", "all") is None

    leader, _ = isr(cluster)
    follower = next(node for node in (1, 2, 3) if node != leader)
    cluster.kill(follower)
    cluster.wait_until(lambda view: any(p.topic == TOPIC and follower not in p.isr
                                        for p in view.partitions), 30, "a shrunk ISR")
    error = deliver(bootstrap, b"two of three", "all")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
    assert deliver(bootstrap, b"leader only", "1") is None

    cluster.start_node(follower)
    cluster.wait_until(lambda view: all(sorted(p.isr) == [1, 2, 3]
                                        for p in view.partitions if p.topic == TOPIC),
                       60, "the follower back in the ISR")
    assert deliver(bootstrap, b"all three again", "all") is None
    cluster.stop(timeout=30)
    logs = [log_batches(cluster, node) for node in (1, 2, 3)]
    assert logs[0] and logs[0] == logs[1] == logs[2]
