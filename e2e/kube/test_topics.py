"""Topic resources on a real Kubernetes, reconciled by the operator (a process on this host)
into a KafkaCluster of one controller and three brokers: create, grow partitions, change
settings, replication factor 1 -> 3 with the records intact, a refused decrease, an
immutable topic name, Kafka's refusals as reasons, ResourceConflict, the unmanage
annotation, topics made elsewhere listed on the KafkaCluster, and the finalizer released
once the KafkaCluster is deleted."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest

from e2e.kube.cluster_names import install
from e2e.kube.operator_bed import (
    TESTBED_DNS,
    OperatorProcess,
    cluster_manifest,
    condition,
    local_volumes,
    running_operator,
    status,
    wait_ready,
)
from e2e.kube.testbed import Cluster, KubectlError, poll
from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)
from e2e.test_monitoring_live import dashboard_checks, unmet
from moldau.client import Admin
from moldau.client.admin import ConfigResource, ConfigSource
from monitoring.queries import OPERATOR_DASHBOARD, load_dashboards

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]

CLUSTER = "kc"
TOPIC_TIMEOUT = 180.0
# Deleting a Topic whose cluster does not answer waits this long before releasing it.
DELETION_TIMEOUT = "20"


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("mkt-local")
    with local_volumes(kube, name, count=6):
        yield name


@pytest.fixture(scope="module")
def namespace(kube: Cluster, crd: None, storage_class: str) -> Iterator[str]:
    with kube.namespace(unique("mkt")) as name:
        yield name


@pytest.fixture(scope="module")
def operator(kube: Cluster, namespace: str, image: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(kube, namespace, image, log,
                          ("--topic-deletion-timeout", DELETION_TIMEOUT)) as process:
        yield process


@pytest.fixture(scope="module")
def bootstrap(kube: Cluster, namespace: str, storage_class: str,
              operator: OperatorProcess) -> str:
    kube.apply(json.dumps(cluster_manifest(CLUSTER, storage_class, brokers=3)), namespace)
    wait_ready(kube, namespace, CLUSTER, brokers="3/3")
    install(TESTBED_DNS)
    return f"{CLUSTER}-bootstrap.{namespace}.svc:9092"


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 30000}) as client:
        yield client


def topic_manifest(name: str, spec: dict, *, cluster: str = CLUSTER,
                   annotations: dict | None = None) -> str:
    meta: dict = {"name": name, "labels": {"moldau.io/cluster": cluster}}
    if annotations:
        meta["annotations"] = annotations
    return json.dumps({"apiVersion": "moldau.io/v1alpha1", "kind": "Topic", "metadata": meta,
                       "spec": spec})


def topic_status(kube: Cluster, namespace: str, name: str) -> dict:
    return kube.get_json("-n", namespace, "topic", name).get("status") or {}


def wait_topic(kube: Cluster, namespace: str, name: str, ready: str = "True",
               reason: str | None = None, **facts: object) -> dict:
    """The Topic's status once it is for its current generation, its Ready condition is
    `ready` (with `reason`) and each of `facts` (status field: value) holds."""
    generation = kube.get_json("-n", namespace, "topic", name)["metadata"]["generation"]

    def settled() -> dict | None:
        found = topic_status(kube, namespace, name)
        cond = condition(found, "Ready")
        if found.get("observedGeneration") != generation or cond.get("status") != ready:
            return None
        if reason is not None and cond.get("reason") != reason:
            return None
        return found if all(found.get(k) == v for k, v in facts.items()) else None

    return poll(settled, TOPIC_TIMEOUT, f"Topic {name} Ready={ready} {reason or ''} {facts}",
                lambda: json.dumps(topic_status(kube, namespace, name), indent=1), 1.0)


def events_of(kube: Cluster, namespace: str, name: str) -> str:
    return kube.kubectl("-n", namespace, "get", "events", "--field-selector",
                        f"involvedObject.kind=Topic,involvedObject.name={name}")


def overrides(admin: Admin, topic: str) -> dict[str, str | None]:
    resource = ConfigResource.topic(topic)
    entries = admin.describe_configs([resource])[resource]
    return {k: e.value for k, e in entries.items()
            if e.source is ConfigSource.DYNAMIC_TOPIC_CONFIG}


def test_a_topic_is_created_grown_reconfigured_and_replicated(
        kube: Cluster, namespace: str, admin: Admin, bootstrap: str) -> None:
    started = time.monotonic()
    kube.apply(topic_manifest("orders", {"partitions": 2, "replicas": 1,
                                         "config": {"retention.ms": 7200000}}), namespace)
    found = wait_topic(kube, namespace, "orders", partitions=2, replicas=1)
    print(f"kubectl apply of a Topic to Ready: {time.monotonic() - started:.1f} s")
    assert found["topicName"] == "orders"
    described = admin.describe_topics(["orders"])["orders"]
    assert found["topicId"] == str(described.topic_id)
    assert overrides(admin, "orders") == {"retention.ms": "7200000"}
    columns = kube.kubectl("-n", namespace, "get", "mkt", "orders").splitlines()
    assert columns[0].split() == ["NAME", "CLUSTER", "TOPIC", "PARTITIONS", "REPLICAS",
                                  "READY", "AGE"]
    assert columns[1].split()[:6] == ["orders", CLUSTER, "orders", "2", "1", "True"]

    records = make_records(40, partitions=2, seed=11)
    kp_produce(bootstrap, "orders", records, acks="all")

    # More partitions; a setting removed (back to the default) and one added.
    kube.apply(topic_manifest("orders", {"partitions": 4, "replicas": 1,
                                         "config": {"cleanup.policy": "compact,delete"}}),
               namespace)
    wait_topic(kube, namespace, "orders", partitions=4)
    assert len(admin.describe_topics(["orders"])["orders"].partitions) == 4
    assert overrides(admin, "orders") == {"cleanup.policy": "compact,delete"}

    # Replication factor 1 -> 3: replicas move in, the records stay.
    started = time.monotonic()
    kube.apply(topic_manifest("orders", {"partitions": 4, "replicas": 3,
                                         "config": {"cleanup.policy": "compact,delete"}}),
               namespace)
    found = wait_topic(kube, namespace, "orders", replicas=3, replicasChange=None)
    print(f"replication factor 1 -> 3 of 4 partitions, apply to done: "
          f"{time.monotonic() - started:.1f} s")
    assert condition(found, "Ready")["reason"] == "Ready"
    assert all(len(p.replicas) == 3 for p in admin.describe_topics(["orders"])["orders"]
               .partitions)
    assert_records_equal(kp_consume_all(bootstrap, "orders", partitions=[0, 1]),
                         with_offsets(records))
    events = events_of(kube, namespace, "orders")
    for reason in ("TopicCreated", "PartitionsIncreased", "ConfigChanged",
                   "ReplicasChangeStarted", "ReplicasChanged"):
        assert reason in events, events


def test_a_partition_decrease_is_refused_and_never_applied(kube: Cluster, namespace: str,
                                                           admin: Admin) -> None:
    kube.kubectl("-n", namespace, "patch", "topic", "orders", "--type=merge",
                 "-p", json.dumps({"spec": {"partitions": 2}}))
    found = wait_topic(kube, namespace, "orders", ready="False", reason="NotSupported")
    assert condition(found, "Ready")["message"] == (
        "Decreasing partitions of topic 'orders' from 4 to 2 is not supported: Kafka cannot "
        "remove partitions")
    assert found["partitions"] == 4
    assert len(admin.describe_topics(["orders"])["orders"].partitions) == 4
    assert "NotSupported" in events_of(kube, namespace, "orders")
    kube.kubectl("-n", namespace, "patch", "topic", "orders", "--type=merge",
                 "-p", json.dumps({"spec": {"partitions": 4}}))
    wait_topic(kube, namespace, "orders", reason="Ready")


def test_the_topic_name_cannot_change_and_the_schema_refuses_bad_names(
        kube: Cluster, namespace: str) -> None:
    with pytest.raises(KubectlError, match="spec.topicName cannot change"):
        kube.kubectl("-n", namespace, "patch", "topic", "orders", "--type=merge",
                     "-p", json.dumps({"spec": {"topicName": "orders-v2"}}))
    with pytest.raises(KubectlError, match=r"spec.topicName: Invalid value"):
        kube.apply(topic_manifest("bad-name", {"topicName": "no spaces"}), namespace)
    with pytest.raises(KubectlError, match=r"spec.partitions: Invalid value: 0"):
        kube.apply(topic_manifest("no-partitions", {"partitions": 0}), namespace)


def test_kafkas_refusal_is_the_reason(kube: Cluster, namespace: str, admin: Admin) -> None:
    kube.apply(topic_manifest("bad-config", {"partitions": 1, "replicas": 1,
                                             "config": {"cleanup.policy": "sometimes"}}),
               namespace)
    found = wait_topic(kube, namespace, "bad-config", ready="False", reason="INVALID_CONFIG")
    assert "cleanup.policy" in condition(found, "Ready")["message"]
    kube.apply(topic_manifest("too-many", {"partitions": 1, "replicas": 5}), namespace)
    found = wait_topic(kube, namespace, "too-many", ready="False",
                       reason="INVALID_REPLICATION_FACTOR")
    assert "3 broker(s) are registered" in condition(found, "Ready")["message"]
    assert not {"bad-config", "too-many"} & set(admin.list_topics())
    kube.kubectl("-n", namespace, "delete", "topic", "bad-config", "too-many", "--wait=true")


def test_a_second_resource_for_the_same_topic_conflicts_and_the_first_keeps_it(
        kube: Cluster, namespace: str, admin: Admin) -> None:
    kube.apply(topic_manifest("orders-again", {"topicName": "orders", "partitions": 8}),
               namespace)
    found = wait_topic(kube, namespace, "orders-again", ready="False",
                       reason="ResourceConflict")
    assert condition(found, "Ready")["message"] == (
        f"Managed by {namespace}/orders: topic 'orders' is named by an older Topic resource")
    wait_topic(kube, namespace, "orders", reason="Ready")
    assert len(admin.describe_topics(["orders"])["orders"].partitions) == 4
    # Deleting the one in conflict leaves the topic alone.
    kube.kubectl("-n", namespace, "delete", "topic", "orders-again", "--wait=true",
                 timeout=120)
    assert "orders" in admin.list_topics()


def test_topics_made_elsewhere_are_listed_on_the_cluster(kube: Cluster, namespace: str,
                                                         admin: Admin) -> None:
    outside = unique("outside")
    admin.create_topic(outside, 1, 1)

    def listed() -> dict | None:
        topics = status(kube, namespace, CLUSTER).get("topics") or {}
        return topics if outside in topics.get("unmanagedNames", ()) else None

    topics = poll(listed, 60, f"{outside} listed as unmanaged on the KafkaCluster")
    assert topics["managed"] >= 1 and "orders" not in topics["unmanagedNames"]
    assert topics["unmanaged"] >= 1


def test_deleting_a_topic_deletes_it_in_kafka_unless_unmanaged(
        kube: Cluster, namespace: str, admin: Admin) -> None:
    kube.apply(topic_manifest("short-lived", {"partitions": 1, "replicas": 1}), namespace)
    wait_topic(kube, namespace, "short-lived", reason="Ready")
    assert kube.get_json("-n", namespace, "topic", "short-lived")["metadata"][
        "finalizers"] == ["moldau.io/topic-operator"]
    kube.kubectl("-n", namespace, "delete", "topic", "short-lived", "--wait=true", timeout=120)
    poll(lambda: "short-lived" not in admin.list_topics(), 60, "short-lived deleted in Kafka")

    kube.kubectl("-n", namespace, "annotate", "topic", "orders", "moldau.io/managed=false")
    wait_topic(kube, namespace, "orders", reason="Unmanaged")
    kube.kubectl("-n", namespace, "delete", "topic", "orders", "--wait=true", timeout=120)
    assert "orders" in admin.list_topics()


def test_the_finalizer_is_released_when_the_kafkacluster_is_deleted(
        kube: Cluster, namespace: str, admin: Admin) -> None:
    kube.apply(topic_manifest("last", {"partitions": 1, "replicas": 1}), namespace)
    wait_topic(kube, namespace, "last", reason="Ready")
    kube.kubectl("-n", namespace, "delete", "kafkacluster", CLUSTER, "--wait=true",
                 timeout=180)
    started = time.monotonic()
    kube.kubectl("-n", namespace, "delete", "topic", "last", "--wait=true", timeout=120)
    print(f"Topic deleted after its KafkaCluster: released in "
          f"{time.monotonic() - started:.1f} s")
    assert "FinalizerReleased" in events_of(kube, namespace, "last")


def test_the_operator_dashboard_answers(kube: Cluster, namespace: str, storage_class: str,
                                        operator: OperatorProcess, prometheus_factory) -> None:
    """monitoring/dashboards/moldau-operator.json against a real Prometheus scraping this
    operator after the work above (and a spec it must refuse, which its errors panels count):
    every panel and variable query answers, with its legend's labels."""
    kube.apply(json.dumps(cluster_manifest("typo", storage_class,
                                           config={"num.partiton": "3"})), namespace)
    poll(lambda: status(kube, namespace, "typo").get("phase") == "Failed", 60,
         "the bad spec to be refused")
    kube.kubectl("-n", namespace, "delete", "kafkacluster", "typo", "--wait=true")
    prom = prometheus_factory([f"127.0.0.1:{operator.port}"])
    checks = dashboard_checks({OPERATOR_DASHBOARD: load_dashboards()[OPERATOR_DASHBOARD]})
    problems: dict[str, str] = {}

    def answered() -> bool:
        problems.clear()
        problems.update(unmet(prom, checks))
        return not problems

    with contextlib.suppress(AssertionError):
        poll(answered, 120, "every operator dashboard query answering", interval=2.0)
    assert problems == {}
