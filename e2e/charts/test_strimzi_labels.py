"""Strimzi's Grafana dashboards and alert rules on Moldau's brokers.

A real Prometheus scrapes a real three-node cluster, each node given the target labels
Kubernetes service discovery gives a broker pod of the operator's (pool `kafka`, container
`kafka`), through the relabelling the chart's PodMonitor asks of the Prometheus Operator. Every
series Strimzi's Kafka and KRaft dashboards and its Kafka alert rules read, apart from the
JVM's and Kubernetes' own (docs/metrics.md), must then answer with the labels they select, group
and name their variables by: `namespace`, `strimzi_io_cluster`, `strimzi_io_name`,
`kubernetes_pod_name` (`<cluster>-<broker>`), `pod` and `container`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from confluent_kafka import Consumer
from kafka.admin import NewTopic

from e2e.charts.helm import kinds, render
from e2e.support import ck_producer, kp_admin, unique, wait_until
from moldau.cluster.launcher import LocalCluster

NAMESPACE = "streaming"
CLUSTER = "orders"
POD_PREFIX = f"{CLUSTER}-kafka-"  # a pool named `kafka` gives Strimzi's pod names
SERIES_TIMEOUT = 60.0

# The series Strimzi's dashboards read per broker, selected by namespace, cluster and pod.
PER_BROKER = (
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_controllerstats_uncleanleaderelections_total",
    "kafka_server_kafkaserver_linux_disk_read_bytes",
    "kafka_server_kafkaserver_linux_disk_write_bytes",
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
    "kafka_server_raftmetrics_current_leader",
    "kafka_server_raftmetrics_current_vote",
    "kafka_server_raftmetrics_current_epoch",
    "kafka_server_raftmetrics_append_records_rate",
    "kafka_server_raftmetrics_commit_latency_avg",
    "kafka_server_raftchannelmetrics_incoming_byte_total",
    "kafka_server_raftchannelmetrics_outgoing_byte_total",
    "kafka_server_raftchannelmetrics_request_total",
    "kafka_server_raftchannelmetrics_response_total",
)
# Per topic (their panels leave out the all-topics series with topic!="").
PER_TOPIC = (
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_totalproducerequests_total",
    "kafka_server_brokertopicmetrics_failedproducerequests_total",
    "kafka_server_brokertopicmetrics_totalfetchrequests_total",
    "kafka_server_brokertopicmetrics_failedfetchrequests_total",
    "kafka_cluster_partition_replicascount",
    "kafka_cluster_partition_atminisr",
    "kafka_cluster_partition_underminisr",
    "kafka_log_log_size",
)
# The KRaft panels that select the node by Strimzi's resource name instead of the cluster.
BY_RESOURCE_NAME = (
    "kafka_server_raftmetrics_high_watermark",
    "kafka_server_raftmetrics_log_end_offset",
    "kafka_server_raftmetrics_fetch_records_rate",
)

# What the Prometheus Operator turns a PodMonitor's camelCase relabelings into.
RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label",
                "separator": "separator", "regex": "regex", "modulus": "modulus",
                "replacement": "replacement", "action": "action"}


def label_name(kubernetes_label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in kubernetes_label)


def pod_monitor_relabelling(monitor: dict) -> list[dict]:
    """The relabel_configs the Prometheus Operator generates for a PodMonitor's endpoint:
    its own `namespace`, `container` and `pod` labels and the podTargetLabels, then the
    endpoint's relabelings."""
    generated = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"],
         "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    generated += [{"source_labels": [f"__meta_kubernetes_pod_label_{label_name(label)}"],
                   "target_label": label_name(label)}
                  for label in monitor["spec"].get("podTargetLabels", [])]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    generated += [{RELABEL_KEYS[key]: value for key, value in relabeling.items()}
                  for relabeling in endpoint.get("relabelings", [])]
    return generated


def pod_target_labels(index: int) -> dict[str, str]:
    """What Kubernetes service discovery knows of the operator's broker pod `index`."""
    return {"__meta_kubernetes_namespace": NAMESPACE,
            "__meta_kubernetes_pod_name": f"{POD_PREFIX}{index}",
            "__meta_kubernetes_pod_container_name": "kafka",
            "__meta_kubernetes_pod_label_moldau_io_cluster": CLUSTER,
            "__meta_kubernetes_pod_node_name": "node-1",
            "__meta_kubernetes_pod_host_ip": "10.250.0.1"}


def produce_and_consume(bootstrap: str, topic: str) -> None:
    admin = kp_admin(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 3)])
    finally:
        admin.close()
    producer = ck_producer(bootstrap, acks="all")
    for number in range(30):
        producer.produce(topic, value=b"%d" % number, key=b"%d" % number)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("strimzi"),
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = 0
    try:
        def all_read() -> bool:
            nonlocal read
            read += len(consumer.consume(30, timeout=1.0))
            return read >= 30
        wait_until(all_read, 60, "the 30 records consumed")
    finally:
        consumer.close()


def test_strimzi_dashboards_and_rules_read_moldau_brokers(
        cluster: LocalCluster, prometheus_factory, helm_binary: Path) -> None:
    [monitor] = kinds(render({"monitoring": {"brokers": {"enabled": True}}}), "PodMonitor")
    targets = [f"127.0.0.1:{node.http_port}" for node in cluster.nodes]
    prom = prometheus_factory(
        targets, target_labels={target: pod_target_labels(index)
                                for index, target in enumerate(targets)},
        relabel_configs=pod_monitor_relabelling(monitor))
    topic = unique("strimzi-topic")
    produce_and_consume(cluster.bootstrap_servers, topic)

    in_cluster = f'namespace="{NAMESPACE}",strimzi_io_cluster="{CLUSTER}"'
    pods = {f"{POD_PREFIX}{index}" for index in range(len(targets))}

    def label_values(expr: str, label: str) -> set[str]:
        return {series["metric"].get(label, "") for series in prom.query(expr)}

    def missing() -> list[str]:
        """The selections that do not yet answer for every broker (or, per topic, for the
        topic); rates and per-topic series need the load to have been scraped."""
        gaps = [name for name in PER_BROKER
                if label_values(f'{name}{{{in_cluster},kubernetes_pod_name=~"{CLUSTER}-.+"}}',
                                "kubernetes_pod_name") != pods]
        gaps += [name for name in PER_TOPIC
                 if not prom.query(f'{name}{{{in_cluster},topic="{topic}",'
                                   f'kubernetes_pod_name=~"{CLUSTER}-.+"}}')]
        gaps += [name for name in BY_RESOURCE_NAME
                 if label_values(f'{name}{{namespace="{NAMESPACE}",strimzi_io_name='
                                 f'"{CLUSTER}-kafka",kubernetes_pod_name=~"{CLUSTER}-.+"}}',
                                 "kubernetes_pod_name") != pods]
        if label_values(f'process_open_fds{{namespace="{NAMESPACE}",container="kafka"}}',
                        "kubernetes_pod_name") != pods:
            gaps.append("process_open_fds")
        return gaps

    gaps: list[str] = []

    def answered() -> bool:
        gaps[:] = missing()
        return not gaps

    with contextlib.suppress(AssertionError):
        wait_until(answered, SERIES_TIMEOUT, "every Strimzi series answering", interval=1.0)
    assert gaps == []

    # The dashboards' variables: namespace, then cluster, then the broker as the pod name
    # after "<cluster>-"; connections by pod and listener; the KRaft state by pod and state.
    assert label_values("kafka_server_replicamanager_leadercount", "namespace") == {NAMESPACE}
    assert label_values(f'kafka_server_replicamanager_leadercount{{namespace="{NAMESPACE}"}}',
                        "strimzi_io_cluster") == {CLUSTER}
    connections = prom.query("sum(kafka_server_socket_server_metrics_connection_count"
                             f"{{{in_cluster}}}) by (kubernetes_pod_name, listener)")
    assert {series["metric"]["kubernetes_pod_name"] for series in connections} == pods
    assert all(series["metric"].get("listener") for series in connections)
    states = prom.query("max(kafka_server_raftmetrics_current_state) "
                        "by (kubernetes_pod_name, current_state)")
    assert {series["metric"]["current_state"] for series in states} >= {"leader", "follower"}

    # The alert rules' selections and groupings.
    controllers = prom.query("sum(kafka_controller_kafkacontroller_activecontrollercount) "
                             "by (strimzi_io_name, namespace)")
    assert [(c["metric"], c["value"][1]) for c in controllers] == [
        ({"strimzi_io_name": f"{CLUSTER}-kafka", "namespace": NAMESPACE}, "1")]
    offline = prom.query("sum(kafka_controller_kafkacontroller_offlinepartitionscount) "
                         "by (namespace, pod)")
    assert {series["metric"]["pod"] for series in offline} == pods
    assert label_values('up{kubernetes_pod_name=~".+-kafka-[0-9]+"} == 1',
                        "kubernetes_pod_name") == pods
    for name in ("kafka_server_replicamanager_underreplicatedpartitions",
                 "kafka_server_replicamanager_underminisrpartitioncount",
                 "kafka_log_logmanager_offlinelogdirectorycount"):
        assert label_values(name, "kubernetes_pod_name") == pods, name
