"""The metadata-quorum workload: topics created and partitions reassigned while faults
strike, with every node's Raft state sampled throughout (quorum_checker.py checks it).

- CreateTopics through librdkafka's admin client: `meta-<n>`, 1-3 partitions, replication
  factor 2 (so a topic can be created while one node is down), about two a second;
- AlterPartitionReassignments through kafka-python's admin client: a partition of an
  acknowledged topic moves one replica to the node it lacks, about one a second; a partition
  whose last request's outcome is unknown is left alone from then on;
- samplers, one per node: its /metrics (kafka_controller_kafkacontroller_activecontrollercount,
  kafka_server_raftmetrics_current_epoch and _current_leader, read from one scrape) and
  DescribeQuorum asked of its own controller listener, every 0.2 s.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from e2e.chaos.checker import FAIL, INFO, OK
from e2e.chaos.quorum_checker import QuorumHistory, Reassignment, Sample, TopicOp
from moldau.cluster.launcher import LocalCluster
from moldau.cluster.probe import ProbeError, describe_quorum

SAMPLE_INTERVAL = 0.2
REPLICATION_FACTOR = 2
ADMIN_TIMEOUT_S = 10.0
# Errors after which the request may still have taken effect.
UNKNOWN_OUTCOME = {KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT,
                   KafkaError.NOT_CONTROLLER, KafkaError._MSG_TIMED_OUT}


@dataclass
class MetadataWorkload:
    cluster: LocalCluster
    prefix: str
    history: QuorumHistory = field(default_factory=QuorumHistory)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Partitions whose replicas the workload knows (last acknowledged state), and those
    # whose last reassignment's outcome is unknown.
    _replicas: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    _unsure: set[tuple[str, int]] = field(default_factory=set)

    @property
    def first_topic(self) -> str:
        return f"{self.prefix}-0"

    def start(self) -> MetadataWorkload:
        self._create(0)  # the schedule aims its leader faults at this one
        workers = [(self._sample, node.node_id) for node in self.cluster.nodes]
        workers += [(self._create_topics, 0), (self._reassign, 0)]
        for target, arg in workers:
            thread = threading.Thread(target=target, args=(arg,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                self.errors.append(f"{thread.name} still running {timeout:g} s after stop")

    def acknowledged(self) -> tuple[int, int]:
        with self._lock:
            return (sum(1 for op in self.history.topic_ops if op.status == OK),
                    sum(1 for op in self.history.reassignments if op.status == OK))

    # ------------------------------------------------------------------ samplers

    def _sample(self, node_id: int) -> None:
        node = self.cluster.node(node_id)
        while not self._stop.wait(SAMPLE_INTERVAL):
            samples = []
            try:
                with urllib.request.urlopen(node.metrics_url, timeout=1.0) as answer:
                    text = answer.read().decode()
                values = {sample.name: sample.value
                          for family in text_string_to_metric_families(text)
                          for sample in family.samples}
                epoch = values.get("kafka_server_raftmetrics_current_epoch")
                if epoch is not None:
                    samples.append(Sample(
                        node_id, time.time(), "metrics", int(epoch),
                        int(values.get("kafka_server_raftmetrics_current_leader", -1)),
                        values.get("kafka_controller_kafkacontroller_activecontrollercount") == 1))
            except OSError:
                pass  # paused, crashed or cut off: no sample
            if node.controller_address is not None:
                try:
                    view = describe_quorum([node.controller_address], 1.0)
                    samples.append(Sample(node_id, time.time(), "describe-quorum",
                                          view.leader_epoch, view.leader_id, False))
                except ProbeError:
                    pass
            with self._lock:
                self.history.samples.extend(samples)

    # ------------------------------------------------------------------ CreateTopics

    def _create(self, index: int) -> None:
        topic, partitions = f"{self.prefix}-{index}", 1 + index % 3
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        future = admin.create_topics(
            [NewTopic(topic, partitions, REPLICATION_FACTOR)],
            request_timeout=ADMIN_TIMEOUT_S, operation_timeout=ADMIN_TIMEOUT_S)[topic]
        try:
            future.result(ADMIN_TIMEOUT_S + 5)
            status, error = OK, ""
        except KafkaException as exc:
            err = exc.args[0]
            status = OK if err.code() == KafkaError.TOPIC_ALREADY_EXISTS else \
                INFO if err.code() in UNKNOWN_OUTCOME else FAIL
            error = str(err)
        except Exception as exc:  # the future's own timeout
            status, error = INFO, repr(exc)
        with self._lock:
            self.history.topic_ops.append(TopicOp(topic, partitions, status, error))

    def _create_topics(self, _: int) -> None:
        index = 1
        while not self._stop.wait(0.5):
            self._create(index)
            index += 1

    # ------------------------------------------------------------------ reassignments

    def _reassign(self, _: int) -> None:
        admin: KafkaAdminClient | None = None
        while not self._stop.wait(1.0):
            try:
                if admin is None:
                    admin = KafkaAdminClient(
                        bootstrap_servers=self.cluster.bootstrap_servers.split(","),
                        request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
                self._learn_replicas(admin)
                self._move_one(admin)
            except Exception as exc:  # the admin client's own failures: try again
                self.errors.append(f"reassigner: {exc!r}")
                if admin is not None:
                    admin.close()
                admin = None
        if admin is not None:
            admin.close()

    def _learn_replicas(self, admin: KafkaAdminClient) -> None:
        """The replicas of acknowledged topics not seen yet, from Metadata."""
        with self._lock:
            known = {key[0] for key in self._replicas}
            wanted = [op.topic for op in self.history.topic_ops
                      if op.status == OK and op.topic not in known]
        if not wanted:
            return
        for topic in admin.describe_topics(wanted):
            if topic.get("error_code"):
                continue
            for part in topic["partitions"]:
                with self._lock:
                    self._replicas[(topic["name"], part["partition_index"])] = \
                        tuple(part["replica_nodes"])

    def _move_one(self, admin: KafkaAdminClient) -> None:
        nodes = [node.node_id for node in self.cluster.nodes]
        with self._lock:
            movable = sorted(key for key in self._replicas if key not in self._unsure)
            if not movable:
                return
            key = movable[len(self.history.reassignments) % len(movable)]
            current = self._replicas[key]
        missing = next(node for node in nodes if node not in current)
        target = (current[1], missing)  # the first replica gives way to the absent node
        try:
            result = admin.alter_partition_reassignments(
                {TopicPartition(*key): list(target)}, timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
            error = result.get(TopicPartition(*key))
            status = OK if error is None else FAIL
            text = "" if error is None else getattr(error, "__name__", str(error))
        except Exception as exc:  # a timeout or a lost connection: it may have been taken
            status, text = INFO, repr(exc)
        with self._lock:
            self.history.reassignments.append(Reassignment(*key, target, status, text))
            if status == OK:
                self._replicas[key] = target
            elif status == INFO:
                self._unsure.add(key)

    # ------------------------------------------------------------------ after healing

    def final_state(self, admin: KafkaAdminClient) -> None:
        """Every workload topic's partitions and replicas, once no reassignment is ongoing."""
        names = [name for name in admin.list_topics() if name.startswith(f"{self.prefix}-")]
        for topic in admin.describe_topics(names):
            if not topic.get("error_code"):
                self.history.final[topic["name"]] = {
                    part["partition_index"]: tuple(part["replica_nodes"])
                    for part in topic["partitions"]}
