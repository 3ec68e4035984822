"""The operator on a real Kubernetes: the CRD refuses bad specs, a KafkaCluster becomes Ready
from the broker image, clients produce and consume inside the cluster and from the host, a
settled cluster changes nothing, edits reconcile, deletion removes what the cluster owns."""

from __future__ import annotations

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
    outside_client,
    run_client_pod,
    status,
    wait_ready,
)
from e2e.kube.testbed import Cluster, KubectlError, poll, restart_api_server
from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)
from moldau.client import Admin

pytestmark = pytest.mark.kube

SETTLE_SECONDS = 60.0
OWNED_KINDS = "statefulsets,services,configmaps,serviceaccounts,poddisruptionbudgets"


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("mkc-local")
    with local_volumes(kube, name, count=14):
        yield name


@pytest.fixture(scope="module")
def namespace(kube: Cluster, crd: None, storage_class: str) -> Iterator[str]:
    # Deleted before the volumes: a bound volume waits for its claim to go.
    with kube.namespace(unique("mkc")) as name:
        yield name


def test_the_api_server_refuses_bad_specs_with_the_schemas_words(kube: Cluster,
                                                                 namespace: str) -> None:
    bad = cluster_manifest("bad", "x")
    bad["spec"]["nodePools"][0]["roles"] = ["leader"]
    bad["spec"]["nodePools"][1]["name"] = "Brokers_1"
    with pytest.raises(KubectlError) as refused:
        kube.apply(json.dumps(bad), namespace)
    message = str(refused.value)
    assert 'spec.nodePools[0].roles[0]: Unsupported value: "leader"' in message
    assert "spec.nodePools[1].name: Invalid value" in message
    # CEL rules, checked once the schema is satisfied.
    taken = cluster_manifest("taken", "x")
    taken["spec"]["listeners"] = [{"name": "plain", "port": 9404},
                                  {"name": "other", "port": 9404, "type": "nodeport"}]
    with pytest.raises(KubectlError) as refused:
        kube.apply(json.dumps(taken), namespace)
    message = str(refused.value)
    assert "ports 9090, 9091 and 9404 are the operator's" in message
    assert "listener ports must differ" in message
    empty = cluster_manifest("empty", "x")
    empty["spec"]["nodePools"] = []
    with pytest.raises(KubectlError, match="spec.nodePools: Invalid value: 0: spec.nodePools "
                                           "in body should have at least 1 items"):
        kube.apply(json.dumps(empty), namespace)


def test_a_cluster_becomes_ready_and_serves_clients(kube: Cluster, namespace: str,
                                                     storage_class: str, image: str,
                                                     operator: OperatorProcess) -> None:
    started = time.monotonic()
    kube.apply(json.dumps(cluster_manifest("kc", storage_class)), namespace)
    found = wait_ready(kube, namespace, "kc")
    took = time.monotonic() - started
    print(f"kubectl apply to Ready (1 controller + 1 broker): {took:.1f} s")
    bootstrap = f"kc-bootstrap.{namespace}.svc:9092"
    assert found["listeners"][0]["bootstrapServers"] == bootstrap
    assert found["clusterId"]
    assert found["quorum"]["leaderId"] == 0 and found["quorum"]["voters"] == [0]
    assert [(n["nodeId"], n["pod"]) for n in found["nodes"]] == [
        (0, "kc-controllers-0"), (100, "kc-brokers-0")]
    columns = kube.kubectl("-n", namespace, "get", "mkc", "kc").splitlines()
    assert columns[0].split() == ["NAME", "READY", "CONTROLLERS", "BOOTSTRAP", "PHASE", "AGE"]
    assert columns[1].split()[:5] == ["kc", "1/1", "1", bootstrap, "Ready"]
    events = kube.kubectl("-n", namespace, "get", "events", "--field-selector",
                          "involvedObject.kind=KafkaCluster,involvedObject.name=kc")
    assert "Created StatefulSet kc-brokers" in events

    # A client pod from the broker image, through the bootstrap Service.
    run_client_pod(kube, namespace, image, bootstrap)

    # From this host: pod addresses are routable here, names come from the cluster's DNS.
    install(TESTBED_DNS)
    topic = unique("host")
    records = make_records(10)
    kp_create_topic(bootstrap, topic)
    kp_produce(bootstrap, topic, records)
    assert_records_equal(kp_consume_all(bootstrap, topic), with_offsets(records))


def owned_versions(kube: Cluster, namespace: str) -> dict[str, str]:
    found = kube.get_json("-n", namespace, OWNED_KINDS + ",kafkaclusters",
                          "-l", "moldau.io/cluster=kc")["items"]
    found += [kube.get_json("-n", namespace, "kafkacluster", "kc")]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
            for o in found}


def changed_fields(before: object, after: object, path: str = "") -> list[str]:
    """Where two JSON documents differ: the paths and both values."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [change for key in sorted(set(before) | set(after))
                for change in changed_fields(before.get(key), after.get(key), f"{path}.{key}")]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def test_a_settled_cluster_changes_no_object(kube: Cluster, namespace: str,
                                             operator: OperatorProcess) -> None:
    # Settled means the status counts the topics the clients above made, too.
    with Admin({"bootstrap.servers": f"kc-bootstrap.{namespace}.svc:9092"}) as admin:
        made = sorted(admin.list_topics())
    poll(lambda: status(kube, namespace, "kc").get("topics", {}).get("unmanagedNames") == made,
         60, f"the status to list the topics {made}")
    before = owned_versions(kube, namespace)
    cluster_before = kube.get_json("-n", namespace, "kafkacluster", "kc")
    reconciles = operator.metrics().count("moldau_operator_reconciles_total")
    time.sleep(SETTLE_SECONDS)
    after = owned_versions(kube, namespace)
    cluster_after = kube.get_json("-n", namespace, "kafkacluster", "kc")
    assert after == before, changed_fields(cluster_before, cluster_after)
    assert len(before) >= 8
    assert reconciles >= 1


def test_a_spec_the_schema_accepts_but_cannot_run_is_reported(kube: Cluster, namespace: str,
                                                             operator: OperatorProcess,
                                                             storage_class: str) -> None:
    manifest = cluster_manifest("typo", storage_class, config={"num.partiton": "3"})
    kube.apply(json.dumps(manifest), namespace)
    found = poll(lambda: status(kube, namespace, "typo").get("phase") == "Failed"
                 and status(kube, namespace, "typo"), 60, "status Failed")
    ready = condition(found, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"] == ("config 'num.partiton' is not a Kafka broker setting "
                                "(did you mean 'num.partitions'?)")
    assert kube.get_json("-n", namespace, "statefulsets", "-l",
                         "moldau.io/cluster=typo")["items"] == []
    assert operator.alive() and operator.get("/healthz") == 200
    kube.kubectl("-n", namespace, "delete", "kafkacluster", "typo")


def test_edits_to_config_and_replicas_are_reconciled(kube: Cluster, namespace: str,
                                                     storage_class: str,
                                                     operator: OperatorProcess) -> None:
    old_pod = kube.get_json("-n", namespace, "pod", "kc-brokers-0")["metadata"]["uid"]
    manifest = cluster_manifest("kc", storage_class, brokers=2,
                                config={"num.partitions": "3"})
    kube.apply(json.dumps(manifest), namespace)
    generation = kube.get_json("-n", namespace, "kafkacluster", "kc")["metadata"]["generation"]
    wait_ready(kube, namespace, "kc", generation, brokers="2/2")
    config = kube.get_json("-n", namespace, "configmap", "kc-brokers-config")
    assert "num.partitions=3" in config["data"]["server.properties"].splitlines()
    # The config change rolled the old broker pod.
    assert kube.get_json("-n", namespace, "pod", "kc-brokers-0")["metadata"]["uid"] != old_pod
    assert kube.get_json("-n", namespace, "statefulset", "kc-brokers")["spec"]["replicas"] == 2
    events = kube.kubectl("-n", namespace, "get", "events", "--field-selector",
                          "involvedObject.kind=KafkaCluster,involvedObject.name=kc")
    assert "restarting kc-brokers-0: its config changed" in events


def test_the_operator_rides_out_the_api_server_going_away(kube: Cluster, namespace: str,
                                                         storage_class: str,
                                                         operator: OperatorProcess) -> None:
    """The API server is down for 20 s: the operator keeps running, and an edit made once it
    is back is reconciled."""
    if not kube.owned:
        pytest.skip("restarts the API server: this machine's test bed only")
    restart_api_server(kube, down_seconds=20)
    assert operator.alive()
    manifest = cluster_manifest("kc", storage_class, brokers=2,
                                config={"num.partitions": "3",
                                        "offsets.retention.minutes": "10000"})
    kube.apply(json.dumps(manifest), namespace)
    generation = kube.get_json("-n", namespace, "kafkacluster", "kc")["metadata"]["generation"]
    wait_ready(kube, namespace, "kc", generation, brokers="2/2")
    config = kube.get_json("-n", namespace, "configmap", "kc-brokers-config")
    assert "offsets.retention.minutes=10000" in \
        config["data"]["server.properties"].splitlines()
    assert operator.alive() and operator.get("/healthz") == 200


def test_brokers_take_their_rack_from_their_nodes_zone(kube: Cluster, namespace: str,
                                                      storage_class: str,
                                                      operator: OperatorProcess) -> None:
    if not kube.owned:
        pytest.skip("labels the node: this machine's test bed only")
    [node] = [item["metadata"]["name"] for item in kube.get_json("nodes")["items"]]
    kube.kubectl("label", "node", node, "topology.kubernetes.io/zone=zone-a", "--overwrite")
    try:
        manifest = cluster_manifest("rk", storage_class)
        manifest["spec"]["rack"] = {"topologyKey": "topology.kubernetes.io/zone"}
        kube.apply(json.dumps(manifest), namespace)
        wait_ready(kube, namespace, "rk")
        install(TESTBED_DNS)
        with Admin({"bootstrap.servers": f"rk-bootstrap.{namespace}.svc:9092"}) as admin:
            brokers = admin.describe_cluster().nodes
        assert [(b.node_id, b.rack) for b in brokers] == [(100, "zone-a")]
        kube.kubectl("-n", namespace, "delete", "kafkacluster", "rk", "--wait=true",
                     timeout=180)
    finally:
        kube.kubectl("label", "node", node, "topology.kubernetes.io/zone-")


def test_a_pools_storage_class_cannot_change(kube: Cluster, namespace: str) -> None:
    patch = json.dumps({"spec": {"nodePools": [
        {"name": "brokers", "roles": ["broker"], "replicas": 2,
         "storage": {"size": "100Mi", "storageClassName": "other"}}]}})
    with pytest.raises(KubectlError, match="a node pool's storage class cannot change"):
        kube.kubectl("-n", namespace, "patch", "kafkacluster", "kc", "--type=merge",
                     "-p", patch)


def test_deleting_the_cluster_removes_what_it_owns_but_keeps_the_claims(
        kube: Cluster, namespace: str, operator: OperatorProcess) -> None:
    claims = kube.get_json("-n", namespace, "pvc", "-l", "moldau.io/cluster=kc")["items"]
    assert len(claims) == 3
    kube.kubectl("-n", namespace, "delete", "kafkacluster", "kc", "--wait=true", timeout=180)

    def owned_gone() -> bool:
        return kube.get_json("-n", namespace, OWNED_KINDS + ",pods",
                             "-l", "moldau.io/cluster=kc")["items"] == []

    poll(owned_gone, 180, "the cluster's objects to be deleted")
    kept = kube.get_json("-n", namespace, "pvc", "-l", "moldau.io/cluster=kc")["items"]
    assert sorted(c["metadata"]["name"] for c in kept) == \
        sorted(c["metadata"]["name"] for c in claims)


def test_three_controllers_and_three_brokers_survive_a_deleted_broker_pod(
        kube: Cluster, namespace: str, storage_class: str, operator: OperatorProcess) -> None:
    started = time.monotonic()
    kube.apply(json.dumps(cluster_manifest("big", storage_class, brokers=3, controllers=3,
                                           config={"default.replication.factor": "3"})),
               namespace)
    found = wait_ready(kube, namespace, "big", brokers="3/3")
    print(f"kubectl apply to Ready (3 controllers + 3 brokers): "
          f"{time.monotonic() - started:.1f} s")
    assert found["quorum"]["voters"] == [0, 1, 2]
    assert found["controllers"] == 3
    install(TESTBED_DNS)
    bootstrap = f"big-bootstrap.{namespace}.svc:9092"
    topic = unique("big")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1, 3)
    records = make_records(20)
    kp_produce(bootstrap, topic, records, acks="all")

    # A broker pod deleted by hand comes back on its claim and rejoins the ISR.
    claim = kube.get_json("-n", namespace, "pvc", "data-big-brokers-1")["metadata"]["uid"]
    kube.kubectl("-n", namespace, "delete", "pod", "big-brokers-1", "--wait=true")
    wait_ready(kube, namespace, "big", brokers="3/3")
    assert kube.get_json("-n", namespace, "pvc", "data-big-brokers-1")["metadata"]["uid"] \
        == claim

    def full_isr() -> bool:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            described = admin.describe_topics([topic])[topic]
            return all(len(p.isr) == 3 for p in described.partitions)

    poll(full_isr, 120, "broker 101 back in the ISR")
    assert_records_equal(kp_consume_all(bootstrap, topic), with_offsets(records))
    kube.kubectl("-n", namespace, "delete", "kafkacluster", "big", "--wait=true", timeout=180)


def test_an_external_listener_serves_clients_outside_kubernetes(
        kube: Cluster, namespace: str, storage_class: str, operator: OperatorProcess) -> None:
    """A NodePort listener: each broker advertises its node's address and its own Service's
    node port, the status names them, and a client outside the cluster produces and
    consumes through them."""
    manifest = cluster_manifest("ext", storage_class, brokers=2)
    manifest["spec"]["listeners"].append({"name": "outside", "port": 9094, "type": "nodeport"})
    kube.apply(json.dumps(manifest), namespace)
    found = wait_ready(kube, namespace, "ext", brokers="2/2")
    expected = []
    for ordinal in (0, 1):
        pod = f"ext-brokers-{ordinal}"
        host = kube.get_json("-n", namespace, "pod", pod)["status"]["hostIP"]
        service = kube.get_json("-n", namespace, "service", f"{pod}-outside")
        assert service["spec"]["type"] == "NodePort"
        expected.append(f"{host}:{service['spec']['ports'][0]['nodePort']}")
    outside = next(entry for entry in found["listeners"] if entry["name"] == "outside")
    assert sorted(outside["bootstrapServers"].split(",")) == sorted(expected)

    assert outside_client(expected[0], unique("ext")) == sorted(expected)
    kube.kubectl("-n", namespace, "delete", "kafkacluster", "ext", "--wait=true", timeout=180)


def test_the_operator_counts_its_reconciles(operator: OperatorProcess) -> None:
    text = operator.metrics()
    assert 'moldau_operator_reconciles_total{outcome="ready"}' in text
    assert "moldau_operator_reconcile_duration_seconds_count" in text
    assert 'moldau_operator_reconcile_errors_total{reason="InvalidSpec"}' in text
