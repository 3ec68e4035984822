"""Replication on a real 3-node cluster of `moldau broker` processes, seen by librdkafka:
acks=all against min.insync.replicas while a replica is down, and replica log files that end
up byte for byte the same once it is back."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.support import segment_batches
from moldau.cluster.launcher import LocalCluster

TOPIC = "acks-isr"


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
    stored = segment_batches(cluster.node(node_id).data_dir, TOPIC)
    return b"".join(batch for _, batch in stored)


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
