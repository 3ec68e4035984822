"""A real 3-node cluster of `moldau broker` processes under failures, driven by librdkafka.

Every test starts its own cluster (`moldau.cluster.LocalCluster`) with short sessions so that
failures are noticed in seconds, and checks what Kafka promises: acknowledged records survive
exactly once and in order, replicas agree on every offset, the controller role moves.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_dist import ensure_artifacts, kafka_tool
from e2e.support import segment_batches
from moldau.cluster.launcher import LocalCluster
from moldau.records.codec import decode_records


def create_topic(bootstrap: str, name: str, partitions: int = 1, factor: int = 3,
                 configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, factor, config=configs or {})])
    futures[name].result(30)


def partition_state(cluster: LocalCluster, topic: str, partition: int = 0) -> tuple[int,
                                                                                   list[int]]:
    view = cluster.metadata()
    for entry in view.partitions:
        if entry.topic == topic and entry.partition == partition:
            return entry.leader, list(entry.isr)
    raise AssertionError(f"{topic}-{partition} not in metadata")


class NumberedProducer:
    """Idempotent acks=all producer writing 0, 1, 2, ... in a thread; keeps what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000})
        self.topic = topic
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.first_ack_after: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(int(msg.value()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, str(number).encode(), on_delivery=self._delivered)
                number += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def __enter__(self) -> NumberedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(60)

    def wait_for_acks(self, count: int, timeout: float) -> float:
        """Wait until `count` more records are acked; returns the seconds it took."""
        start = time.monotonic()
        target = len(self.acked) + count
        while len(self.acked) < target:
            assert time.monotonic() - start < timeout, (
                f"only {len(self.acked)} of {target} acked after {timeout} s; errors "
                f"{self.failed[-3:]}")
            time.sleep(0.01)
        return time.monotonic() - start


def consume_all(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(offset, value) of every record of the partition, read by librdkafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, low)])
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if message.error() is None:
                    out.append((message.offset(), int(message.value())))
        return out
    finally:
        consumer.close()


def replica_records(cluster: LocalCluster, node_id: int, topic: str,
                    partition: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a stopped node's log files for the partition."""
    stored = segment_batches(cluster.node(node_id).data_dir, topic, partition)
    return [(header.base_offset + record.offset_delta, record.value)
            for header, batch in stored if not header.is_control
            for record in decode_records(batch)]


def replicas_agree(cluster: LocalCluster, topic: str) -> int:
    """Assert that the three stopped nodes hold the same records at the offsets all of them
    have; returns how many records that is."""
    logs = [replica_records(cluster, node, topic) for node in (1, 2, 3)]
    shortest = min(len(entries) for entries in logs)
    for entries in logs[1:]:
        assert entries[:shortest] == logs[0][:shortest]
    return shortest


def assert_exactly_once_in_order(values: list[int], acked: list[int]) -> None:
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == sorted(values), "records are out of order"
    missing = set(acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"


def test_leader_kill_loses_no_acknowledged_record(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "numbers", configs={"min.insync.replicas": "2"})
    with NumberedProducer(bootstrap, "numbers") as producer:
        producer.wait_for_acks(2000, 60)
        leader, isr = partition_state(cluster, "numbers")
        assert sorted(isr) == [1, 2, 3]
        cluster.kill(leader)
        killed_at = time.monotonic()
        producer.wait_for_acks(1, 60)
        recovery = time.monotonic() - killed_at
        print(f"first acks=all produce {recovery:.2f} s after kill -9 of the leader")
        producer.wait_for_acks(2000, 60)
        cluster.start_node(leader)
        cluster.wait_until(lambda view: not view.under_replicated, 60, "full ISR again")
        producer.wait_for_acks(500, 60)
    values = [value for _, value in consume_all(bootstrap, "numbers")]
    assert_exactly_once_in_order(values, producer.acked)
    # Every replica holds the same records at the same offsets.
    cluster.stop(timeout=30)
    assert replicas_agree(cluster, "numbers") >= len(producer.acked)


def test_controller_kill_elects_another(cluster: LocalCluster) -> None:
    ensure_artifacts()
    bootstrap = cluster.bootstrap_servers
    active = cluster.active_controller()
    assert active in (1, 2, 3)
    cluster.kill(active)
    deadline = time.monotonic() + 30
    while True:
        other = cluster.active_controller()
        if other not in (-1, active):
            break
        assert time.monotonic() < deadline, "no new controller"
        time.sleep(0.2)
    survivors = ",".join(node.broker_address for node in cluster.alive_nodes())
    create_topic(survivors, "after-failover", partitions=2, factor=2)
    admin = AdminClient({"bootstrap.servers": survivors})
    assert "after-failover" in admin.list_topics(timeout=10).topics
    # Kafka's own tool sees the same quorum through any broker (forwarded to the leader).
    status = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", survivors, "describe",
                        "--status").stdout
    fields = {key.strip(): value.strip() for key, _, value in
              (line.partition(":") for line in status.splitlines())}
    assert fields["LeaderId"] in {str(node.node_id) for node in cluster.alive_nodes()}
    assert all(f'"id": {node}' in fields["CurrentVoters"] for node in (1, 2, 3))
    del bootstrap


def test_follower_catches_up_and_rejoins_the_isr(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "catch-up", configs={"min.insync.replicas": "2"})
    leader, _ = partition_state(cluster, "catch-up")
    follower = next(node for node in (1, 2, 3) if node != leader)
    cluster.kill(follower)
    with NumberedProducer(bootstrap, "catch-up") as producer:
        producer.wait_for_acks(3000, 60)
        cluster.wait_until(lambda view: any(
            p.topic == "catch-up" and follower not in p.isr for p in view.partitions),
            30, "the follower out of the ISR")
        cluster.start_node(follower)
        cluster.wait_until(lambda view: all(
            sorted(p.isr) == [1, 2, 3] for p in view.partitions if p.topic == "catch-up"),
            60, "the follower back in the ISR")
        producer.wait_for_acks(500, 60)
    cluster.stop(timeout=30)
    leader_log = replica_records(cluster, leader, "catch-up")
    follower_log = replica_records(cluster, follower, "catch-up")
    assert len(follower_log) >= len(producer.acked)
    common = min(len(leader_log), len(follower_log))
    assert follower_log[:common] == leader_log[:common]


def test_double_failover_keeps_acknowledged_data(cluster: LocalCluster) -> None:
    """KIP-101: kill the leader, then quickly the new leader; bring both back. Whatever was
    acknowledged is still there once and in order, and no replica forks."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "double", configs={"min.insync.replicas": "2"})
    with NumberedProducer(bootstrap, "double") as producer:
        producer.wait_for_acks(1000, 60)
        first, _ = partition_state(cluster, "double")
        cluster.kill(first)
        producer.wait_for_acks(200, 60)
        second, _ = partition_state(cluster, "double")
        assert second != first
        cluster.start_node(first)
        cluster.kill(second)
        producer.wait_for_acks(200, 90)
        cluster.start_node(second)
        cluster.wait_until(lambda view: not view.under_replicated, 60, "full ISR again")
        producer.wait_for_acks(200, 60)
    values = [value for _, value in consume_all(bootstrap, "double")]
    assert_exactly_once_in_order(values, producer.acked)
    cluster.stop(timeout=30)
    replicas_agree(cluster, "double")


class GroupReader:
    """A librdkafka group member in a thread that commits what it processed, also when
    partitions are revoked, so a rebalance neither loses nor repeats records."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 1000})
        self.topic = topic
        self.values: list[int] = []
        self.errors: list[str] = []
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _commit(self) -> None:
        if self._positions:
            offsets = [TopicPartition(self.topic, p, o) for p, o in self._positions.items()]
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
                self._positions.clear()
            except Exception as exc:  # noqa: BLE001 - a failed commit is retried later
                self.errors.append(str(exc))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()

    def _run(self) -> None:
        self.consumer.subscribe([self.topic], on_revoke=self._revoked)
        last_commit = time.monotonic()
        while not self._stop.is_set():
            for message in self.consumer.consume(500, timeout=0.2):
                if message.error() is None:
                    self.values.append(int(message.value()))
                    self._positions[message.partition()] = message.offset() + 1
            if time.monotonic() - last_commit > 0.5:
                self._commit()
                last_commit = time.monotonic()
        self._commit()
        self.consumer.close()

    def __enter__(self) -> GroupReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for(self, wanted: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not wanted <= set(self.values):
            assert time.monotonic() < deadline, (
                f"{len(wanted - set(self.values))} records never consumed; "
                f"errors {self.errors[-3:]}")
            time.sleep(0.1)


def test_rolling_restart_under_load_loses_and_duplicates_nothing(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "rolling", partitions=3, configs={"min.insync.replicas": "2"})
    with NumberedProducer(bootstrap, "rolling") as producer, \
            GroupReader(bootstrap, "rolling", "rolling-readers") as reader:
        producer.wait_for_acks(1000, 60)
        for node in (1, 2, 3):
            stopped_at = time.monotonic()
            cluster.stop_node(node)
            print(f"node {node} stopped (SIGTERM) in {time.monotonic() - stopped_at:.2f} s")
            assert "Controlled shutdown complete" in cluster.node(node).log_path.read_text()
            view = cluster.metadata()
            assert not [p for p in view.partitions if p.leader == node or p.offline], \
                "leaderships did not move before the stop"
            producer.wait_for_acks(300, 60)
            cluster.start_node(node)
            cluster.wait_until(lambda view: not view.under_replicated, 60, "full ISRs")
            producer.wait_for_acks(300, 60)
    assert not producer.failed
    assert len(producer.acked) == len(set(producer.acked))
    with GroupReader(bootstrap, "rolling", "rolling-readers") as rest:
        time.sleep(3)  # the group's committed position: whatever is left over
    consumed = reader.values + rest.values
    assert set(producer.acked) <= set(consumed), "acknowledged records were not consumed"
    assert len(consumed) == len(set(consumed)), "records were consumed twice"
    for partition in range(3):
        values = [value for _, value in consume_all(bootstrap, "rolling", partition)]
        assert len(values) == len(set(values)) and values == sorted(values)
