"""Partition reassignments (KIP-455) and leader elections (KIP-460) on real brokers.

The errors and the wire format are checked against one broker; moving a partition while a
producer writes needs a real cluster: four `moldau broker` processes started by LocalCluster.
Kafka's own `kafka-reassign-partitions` and `kafka-leader-election` run against that cluster
too when the Java tools are available (as for the oracle tests in e2e/java).

The cluster has LocalCluster's default layout: nodes 1-3 are voters, node 4 only a broker,
so the move also puts a replica on a broker-only node. These tests need brokers that
replicate (followers fetching, leaders sending AlterPartition) and broker-only nodes that find
the controller; until the cluster side has both, the cluster fixture fails at start-up with
the node's log in the message.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.support import running_cluster, unique, wait_until
from moldau.client import Admin, Consumer, Producer, TopicPartition
from moldau.client.admin import ElectionType, NewTopic, PartitionReassignment
from moldau.client.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from moldau.cluster import LocalCluster

pytestmark = pytest.mark.timeout(300)

NODE_ID = 1
BROKER_OVERRIDES = {"node.id": NODE_ID}
BROKERS = 4
REASSIGN_MAIN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION_MAIN = "org.apache.kafka.tools.LeaderElectionCommand"


def code_of(call) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


# --------------------------------------------------------------------------- one broker


@pytest.fixture(scope="module")
def single(module_broker) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": module_broker.bootstrap,
                "default.api.timeout.ms": 20000}) as admin:
        yield admin


def test_errors_on_one_broker(single):
    topic = unique("reassign-errors")
    single.create_topics([NewTopic(topic, 2, 1)])
    tp = TopicPartition(topic, 0)

    assert code_of(lambda: single.alter_partition_reassignments({tp: [NODE_ID, NODE_ID]})) \
        is ErrorCode.invalid_replica_assignment
    assert code_of(lambda: single.alter_partition_reassignments({tp: []})) \
        is ErrorCode.invalid_replica_assignment
    assert code_of(lambda: single.alter_partition_reassignments({tp: [NODE_ID, 99]})) \
        is ErrorCode.invalid_replica_assignment
    assert code_of(lambda: single.alter_partition_reassignments({tp: None})) \
        is ErrorCode.no_reassignment_in_progress
    assert code_of(lambda: single.alter_partition_reassignments(
        {TopicPartition(topic, 7): [NODE_ID]})) is ErrorCode.unknown_topic_or_partition
    assert code_of(lambda: single.alter_partition_reassignments(
        {TopicPartition(unique("missing"), 0): [NODE_ID]})) \
        is ErrorCode.unknown_topic_or_partition
    # Per partition, from one request: each its own answer.
    results = single.alter_partition_reassignments_each({
        tp: [NODE_ID], TopicPartition(topic, 1): [NODE_ID, 99],
        TopicPartition(topic, 7): [NODE_ID]})
    assert {p: e and e.code for p, e in results.items()} == {
        tp: None, TopicPartition(topic, 1): ErrorCode.invalid_replica_assignment,
        TopicPartition(topic, 7): ErrorCode.unknown_topic_or_partition}
    # The current assignment as target: accepted, nothing to do.
    single.alter_partition_reassignments({tp: [NODE_ID]})
    assert single.list_partition_reassignments() == {}
    assert single.list_partition_reassignments([tp, TopicPartition(topic, 9)]) == {}

    results = single.elect_leaders(ElectionType.PREFERRED,
                                   [tp, TopicPartition(topic, 1), TopicPartition(topic, 5)])
    assert {p: e.code for p, e in results.items()} == {
        tp: ErrorCode.election_not_needed,
        TopicPartition(topic, 1): ErrorCode.election_not_needed,
        TopicPartition(topic, 5): ErrorCode.unknown_topic_or_partition}
    results = single.elect_leaders(ElectionType.UNCLEAN, [tp])
    assert results[tp].code is ErrorCode.election_not_needed
    assert single.elect_leaders(ElectionType.PREFERRED) == {}


# --------------------------------------------------------------------------- four brokers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("reassignment") / "cluster"
    with running_cluster(directory, BROKERS, {"auto.leader.rebalance.enable": "false"}) as local:
        yield local


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": cluster.bootstrap_servers,
                "default.api.timeout.ms": 30000}) as client:
        yield client


def partition_state(admin: Admin, tp: TopicPartition) -> tuple[int, tuple[int, ...],
                                                                 tuple[int, ...]]:
    description = admin.describe_topics([tp.topic])[tp.topic].partitions[tp.partition]
    return description.leader_id, description.replicas, description.isr


def wait_in_sync(admin: Admin, tp: TopicPartition, replicas: tuple[int, ...],
                 timeout: float = 60) -> None:
    def settled() -> bool:
        try:
            leader, current, isr = partition_state(admin, tp)
        except UnknownTopicOrPartitionError:
            return False  # the broker asked has not applied the topic's creation yet
        return current == replicas and set(isr) == set(replicas) and leader in replicas \
            and tp not in admin.list_partition_reassignments([tp])

    wait_until(settled, timeout, f"{tp} on {list(replicas)}, all in sync")


def hosts(cluster: LocalCluster, admin: Admin, broker: int, tp: TopicPartition) -> bool:
    """The broker reports a replica of `tp` (DescribeLogDirs) or has its log directory (a
    deleted log's directory is renamed to `<name>.<id>-delete` and removed later)."""
    dirs = admin.describe_log_dirs([broker])[broker]
    reported = any(tp in description.replicas for description in dirs.values())
    on_disk = (cluster.node(broker).data_dir / f"{tp.topic}-{tp.partition}").exists()
    return reported or on_disk


class BackgroundProducer:
    """Writes numbered values (acks=all, idempotent) until stopped; remembers which were
    acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 5, "delivery.timeout.ms": 120000})
        self.topic = topic
        self.acked: set[bytes] = set()
        self.failed: list[BaseException] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reassign-producer",
                                        daemon=True)

    def _done(self, value: bytes):
        def callback(_metadata: object, error: BaseException | None) -> None:
            with self._lock:
                if error is None:
                    self.acked.add(value)
                else:
                    self.failed.append(error)
        return callback

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"value-{self.sent:06d}".encode()
            self.producer.send(self.topic, value, partition=0, callback=self._done(value))
            self.sent += 1
            time.sleep(0.002)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(120)
        self.producer.close()


def read_all(bootstrap: str, tp: TopicPartition, end: int) -> list[bytes]:
    values: list[bytes] = []
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"read {len(values)} of {end} records of {tp}"
            values += [record.value for record in consumer.poll(1.0)]
    return values


def test_move_a_partition_while_a_producer_writes(cluster, admin):
    topic = unique("moving")
    tp = TopicPartition(topic, 0)
    admin.create_topics([NewTopic(topic, replica_assignment={0: [1, 2, 3]},
                                  configs={"min.insync.replicas": "2"})])
    wait_in_sync(admin, tp, (1, 2, 3))
    assert hosts(cluster, admin, 1, tp) and not hosts(cluster, admin, 4, tp)

    producer = BackgroundProducer(cluster.bootstrap_servers, topic).start()
    try:
        wait_until(lambda: producer.count() >= 200, 60, "the first acknowledged records")
        admin.alter_partition_reassignments({tp: [2, 3, 4]})
        ongoing = admin.list_partition_reassignments([tp])
        if tp in ongoing:  # it may already be done
            assert ongoing[tp] == PartitionReassignment((2, 3, 4, 1), (4,), (1,))
            assert ongoing[tp].target_replicas == (2, 3, 4)
        wait_in_sync(admin, tp, (2, 3, 4))
        leader, _, _ = partition_state(admin, tp)
        assert leader == 2  # the leader was removed: the first replica of the target leads
        moved_at = producer.count()
        wait_until(lambda: producer.count() >= moved_at + 200, 60,
                   "acknowledged records after the move")
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:3]
    assert producer.acked

    wait_until(lambda: not hosts(cluster, admin, 1, tp), 30,
               "broker 1 to delete its replica")
    assert all(hosts(cluster, admin, broker, tp) for broker in (2, 3, 4))
    end = admin.list_offsets({tp: -1})[tp].offset
    values = read_all(cluster.bootstrap_servers, tp, end)
    missing = producer.acked - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert len(values) == len(set(values)), "duplicates in the log"


def test_cancel_and_preferred_election(cluster, admin):
    topic = unique("elect")
    tp = TopicPartition(topic, 0)
    admin.create_topics([NewTopic(topic, replica_assignment={0: [2, 3, 4]})])
    wait_in_sync(admin, tp, (2, 3, 4))

    # Reordering in-sync replicas completes at once; the leader stays where it was.
    admin.alter_partition_reassignments({tp: [3, 2, 4]})
    wait_in_sync(admin, tp, (3, 2, 4))
    assert partition_state(admin, tp)[0] == 2
    results = admin.elect_leaders(ElectionType.PREFERRED, [tp])
    assert results == {tp: None}
    wait_until(lambda: partition_state(admin, tp)[0] == 3, 30, "broker 3 to lead")
    assert admin.elect_leaders(ElectionType.PREFERRED, [tp])[tp].code \
        is ErrorCode.election_not_needed
    assert admin.elect_leaders(ElectionType.UNCLEAN, [tp])[tp].code \
        is ErrorCode.election_not_needed

    assert code_of(lambda: admin.alter_partition_reassignments({tp: None})) \
        is ErrorCode.no_reassignment_in_progress
    assert code_of(lambda: admin.alter_partition_reassignments({tp: [1, 2, 9]})) \
        is ErrorCode.invalid_replica_assignment


# --------------------------------------------------------------------------- Kafka's tools


def java_tools() -> None:
    if shutil.which("java") is None:
        pytest.skip("no java: Kafka's tools cannot run")
    from e2e.kafka_dist import ensure_artifacts
    ensure_artifacts()


def test_kafka_reassign_partitions_and_leader_election(cluster, admin, tmp_path: Path):
    java_tools()
    from e2e.kafka_dist import run_java

    topic = unique("kafka-tools")
    tp = TopicPartition(topic, 0)
    admin.create_topics([NewTopic(topic, replica_assignment={0: [1, 2, 3]})])
    wait_in_sync(admin, tp, (1, 2, 3))
    plan = tmp_path / "reassignment.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [4, 3, 2]}]}))
    bootstrap = ["--bootstrap-server", cluster.bootstrap_servers]

    executed = run_java(REASSIGN_MAIN, *bootstrap, "--reassignment-json-file", str(plan),
                        "--execute")
    assert f"Successfully started partition reassignment for {topic}-0" in executed.stdout, \
        executed.describe()
    # The assignment to roll back to, as the tool read it through Metadata.
    assert '"replicas":[1,2,3]' in executed.stdout, executed.describe()

    def verified() -> bool:
        result = run_java(REASSIGN_MAIN, *bootstrap, "--reassignment-json-file", str(plan),
                          "--verify", "--preserve-throttles", check=False)
        assert result.returncode == 0, result.describe()
        return f"Reassignment of partition {topic}-0 is completed." in result.stdout

    wait_until(verified, 90, "kafka-reassign-partitions --verify to report completion",
               interval=1.0)
    wait_in_sync(admin, tp, (4, 3, 2))
    # Leader 1 was removed: replica 4, the first of the target, took over already.
    assert partition_state(admin, tp)[0] == 4

    elected = run_java(LEADER_ELECTION_MAIN, *bootstrap, "--election-type", "PREFERRED",
                       "--topic", topic, "--partition", "0", check=False)
    assert f"Valid replica already elected for partitions {topic}-0" in elected.stdout, \
        elected.describe()

    admin.alter_partition_reassignments({tp: [3, 4, 2]})
    wait_in_sync(admin, tp, (3, 4, 2))
    elected = run_java(LEADER_ELECTION_MAIN, *bootstrap, "--election-type", "PREFERRED",
                       "--all-topic-partitions")
    assert "Successfully completed leader election (PREFERRED) for partitions" \
        in elected.stdout and f"{topic}-0" in elected.stdout, elected.describe()
    wait_until(lambda: partition_state(admin, tp)[0] == 3, 30, "broker 3 to lead")
