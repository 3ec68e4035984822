"""KafkaCluster spec -> manifests, without any server: each object checked against
Kubernetes' own schemas (kubernetes-validate) and for what the brokers need."""

from __future__ import annotations

import kubernetes_validate
import pytest

from moldau.operator.naming import assign_node_id_bases
from moldau.operator.objects import desired_objects, owner_reference
from moldau.operator.spec import SpecError, parse_spec

KUBERNETES = "1.37.0"
# The contract's example.
SPEC = {
    "image": "localhost/moldau-broker:0.1.0",
    "nodePools": [
        {"name": "controllers", "roles": ["controller"], "replicas": 3,
         "storage": {"size": "1Gi", "storageClassName": "local"},
         "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
         "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
             {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": {
                                                   "moldau.io/cluster": "kc"}}}}]}},
         "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                          "effect": "NoSchedule"}],
         "template": {"labels": {"team": "data"}, "annotations": {"note": "x"},
                      "env": [{"name": "KAFKA_NUM_IO_THREADS", "value": "4"}]}},
        {"name": "brokers", "roles": ["broker"], "replicas": 3, "storage": {"size": "1Gi"}},
    ],
    "listeners": [{"name": "plain", "port": 9092, "type": "internal"},
                  {"name": "external", "port": 9094, "type": "nodeport"}],
    "rack": {"topologyKey": "topology.kubernetes.io/zone"},
    "config": {"default.replication.factor": "3"},
    "metrics": {"enabled": True},
}
BASES = {"controllers": 0, "brokers": 100}
OWNER = owner_reference("kc", "0c5a3c4e-0000-4000-8000-000000000001")


def cluster(spec: dict | None = None, name: str = "kc"):
    return parse_spec(name, "team-a", spec or SPEC, default_image="default:1")


def objects(spec: dict | None = None, bases: dict | None = None) -> list[dict]:
    return desired_objects(cluster(spec), bases or BASES, OWNER)


def by_name(kind: str, name: str, found: list[dict]) -> dict:
    return next(o for o in found if o["kind"] == kind and o["metadata"]["name"] == name)


def properties(found: list[dict], pool: str) -> dict[str, str]:
    text = by_name("ConfigMap", f"kc-{pool}-config", found)["data"]["server.properties"]
    return dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))


def test_every_object_is_valid_for_kubernetes() -> None:
    for manifest in objects():
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def test_every_object_is_labelled_and_owned_by_the_cluster() -> None:
    found = objects()
    assert {o["kind"] for o in found} == {"ServiceAccount", "ConfigMap", "Service",
                                          "PodDisruptionBudget", "StatefulSet"}
    for manifest in found:
        labels = manifest["metadata"]["labels"]
        assert labels["moldau.io/cluster"] == "kc"
        assert labels["app.kubernetes.io/managed-by"] == "moldau-operator"
        assert labels["app.kubernetes.io/instance"] == "kc"
        assert manifest["metadata"]["ownerReferences"] == [OWNER]
        assert manifest["metadata"]["namespace"] == "team-a"


def test_server_properties_name_the_quorum_by_pod_dns_never_localhost() -> None:
    found = objects()
    controllers, brokers = properties(found, "controllers"), properties(found, "brokers")
    assert controllers["process.roles"] == "controller"
    assert brokers["process.roles"] == "broker"
    voters = ",".join(f"{i}@kc-controllers-{i}.kc-nodes.team-a.svc.cluster.local:9090"
                      for i in range(3))
    assert controllers["controller.quorum.voters"] == brokers["controller.quorum.voters"] == voters
    assert controllers["listeners"] == "CONTROLLER://0.0.0.0:9090"
    assert brokers["listeners"] == ("PLAIN://0.0.0.0:9092,EXTERNAL://0.0.0.0:9094,"
                                    "REPLICATION://0.0.0.0:9091")
    assert brokers["inter.broker.listener.name"] == "REPLICATION"
    assert brokers["default.replication.factor"] == "3"
    for manifest in found:
        if manifest["kind"] == "ConfigMap":
            assert "localhost" not in manifest["data"]["server.properties"]


def test_a_combined_pool_is_broker_and_controller() -> None:
    spec = {"nodePools": [{"name": "dual", "roles": ["broker", "controller"], "replicas": 1,
                           "storage": {"size": "1Gi"}}],
            "listeners": [{"name": "plain", "port": 9092}]}
    props = properties(objects(spec, {"dual": 0}), "dual")
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == \
        "0@kc-dual-0.kc-nodes.team-a.svc.cluster.local:9090"
    assert props["listeners"] == ("PLAIN://0.0.0.0:9092,REPLICATION://0.0.0.0:9091,"
                                  "CONTROLLER://0.0.0.0:9090")


def test_the_statefulset_runs_the_broker_entrypoint_with_probes_and_a_claim() -> None:
    sts = by_name("StatefulSet", "kc-brokers", objects())
    spec = sts["spec"]
    assert spec["updateStrategy"] == {"type": "OnDelete"}
    assert spec["serviceName"] == "kc-nodes"
    assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "localhost/moldau-broker:0.1.0"
    assert container["args"] == ["--config", "/etc/moldau/server.properties"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 9404}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 9404}
    env = {e["name"]: e for e in container["env"]}
    assert env["MOLDAU_NODE_ID_OFFSET"]["value"] == "100"
    assert env["KAFKA_ADVERTISED_LISTENERS"]["value"] == (
        "PLAIN://$(POD_NAME).kc-nodes.team-a.svc.cluster.local:9092,"
        "EXTERNAL://$(POD_NAME).kc-nodes.team-a.svc.cluster.local:9094,"
        "REPLICATION://$(POD_NAME).kc-nodes.team-a.svc.cluster.local:9091")
    assert env["KAFKA_BROKER_RACK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['topology.kubernetes.io/zone']"
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert spec["template"]["metadata"]["labels"]["moldau.io/broker"] == "true"


def test_the_pool_settings_reach_the_pods() -> None:
    sts = by_name("StatefulSet", "kc-controllers", objects())
    template = sts["spec"]["template"]
    pod = template["spec"]
    assert pod["containers"][0]["resources"] == SPEC["nodePools"][0]["resources"]
    assert pod["affinity"] == SPEC["nodePools"][0]["affinity"]
    assert pod["tolerations"] == SPEC["nodePools"][0]["tolerations"]
    assert template["metadata"]["labels"]["team"] == "data"
    assert template["metadata"]["annotations"]["note"] == "x"
    assert {"name": "KAFKA_NUM_IO_THREADS", "value": "4"} in pod["containers"][0]["env"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local"
    # Controllers advertise only their controller listener and are not behind the
    # bootstrap Service.
    assert "moldau.io/broker" not in template["metadata"]["labels"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["KAFKA_ADVERTISED_LISTENERS"] == \
        "CONTROLLER://$(POD_NAME).kc-nodes.team-a.svc.cluster.local:9090"


def test_a_template_cannot_take_pods_out_of_their_selector() -> None:
    spec = {**SPEC, "nodePools": [{**SPEC["nodePools"][0],
                                   "template": {"labels": {"moldau.io/cluster": "other"}}},
                                  SPEC["nodePools"][1]]}
    sts = by_name("StatefulSet", "kc-controllers", objects(spec))
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["moldau.io/cluster"] == "kc"


def test_services_bootstrap_on_internal_listeners_and_one_per_broker_outside() -> None:
    found = objects()
    bootstrap = by_name("Service", "kc-bootstrap", found)["spec"]
    assert bootstrap["type"] == "ClusterIP"
    assert [p["port"] for p in bootstrap["ports"]] == [9092]
    assert bootstrap["selector"]["moldau.io/broker"] == "true"
    headless = by_name("Service", "kc-nodes", found)["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    external = sorted(o["metadata"]["name"] for o in found
                      if o["kind"] == "Service" and o["spec"].get("type") == "NodePort")
    assert external == [f"kc-brokers-{i}-external" for i in range(3)]
    pdb = by_name("PodDisruptionBudget", "kc", found)["spec"]
    assert pdb["maxUnavailable"] == 1


def test_a_config_change_changes_the_pod_template_hash() -> None:
    before = by_name("StatefulSet", "kc-brokers", objects())
    changed = {**SPEC, "config": {"default.replication.factor": "2"}}
    after = by_name("StatefulSet", "kc-brokers", objects(changed))
    key = "moldau.io/config-hash"
    assert before["spec"]["template"]["metadata"]["annotations"][key] != \
        after["spec"]["template"]["metadata"]["annotations"][key]
    # Same spec, same manifests: applying twice changes nothing.
    assert objects() == objects()


def test_node_id_ranges_stay_when_pools_are_added_in_front() -> None:
    first = assign_node_id_bases(["controllers", "brokers"], {})
    assert first == {"controllers": 0, "brokers": 100}
    later = assign_node_id_bases(["big", "controllers", "brokers"], first)
    assert later == {"controllers": 0, "brokers": 100, "big": 200}
    # A removed pool's range is not handed out again.
    assert assign_node_id_bases(["new"], {"gone": 0})["new"] == 100


@pytest.mark.parametrize(("change", "message"), [
    ({"config": {"default.replicaton.factor": "3"}},
     "config 'default.replicaton.factor' is not a Kafka broker setting (did you mean "
     "'default.replication.factor'?)"),
    ({"config": {"listeners": "PLAINTEXT://:9092"}},
     "config 'listeners' is set by the operator from the spec"),
    ({"nodePools": [SPEC["nodePools"][1]]}, "no node pool has the controller role"),
    ({"nodePools": [SPEC["nodePools"][0]]}, "no node pool has the broker role"),
    ({"listeners": [{"name": "plain", "port": 9404}]},
     "listener 'plain': port 9404 is taken by metrics and health"),
    ({"listeners": [{"name": "ext", "port": 9094, "type": "loadbalancer"}]},
     "no internal listener: clients in the cluster need one"),
    ({"replicationThrottle": 0},
     "replicationThrottle must be at least 1 byte per second, not 0"),
])
def test_specs_the_schema_lets_through_are_refused_with_a_reason(change: dict,
                                                                 message: str) -> None:
    with pytest.raises(SpecError) as raised:
        cluster({**SPEC, **change})
    assert message in str(raised.value).split("; ")


def test_the_replication_throttle_is_a_number_of_bytes_per_second() -> None:
    assert cluster().replication_throttle is None
    assert cluster({**SPEC, "replicationThrottle": 10485760}).replication_throttle == 10485760
    with pytest.raises(SpecError, match="replicationThrottle must be a number of bytes per "
                                        "second, not 'fast'"):
        cluster({**SPEC, "replicationThrottle": "fast"})


def test_statefulset_names_leave_room_for_the_revision_label() -> None:
    cluster(name="c" * (52 - len("-controllers")))
    with pytest.raises(SpecError, match="StatefulSet name 'c+-controllers' is longer than 52 "
                                        "characters: shorten the cluster or pool name"):
        cluster(name="c" * (53 - len("-controllers")))


@pytest.mark.parametrize(("spec", "default", "image"), [
    ({"image": "registry.example.com/moldau:7"}, "localhost/moldau-broker:0.1.0",
     "registry.example.com/moldau:7"),
    ({"version": "0.2.0"}, "localhost/moldau-broker:0.1.0", "localhost/moldau-broker:0.2.0"),
    ({"version": "0.2.0"}, "registry.example.com:5000/moldau-broker",
     "registry.example.com:5000/moldau-broker:0.2.0"),
    ({"version": "0.2.0"}, "localhost/moldau-broker@sha256:abc",
     "localhost/moldau-broker:0.2.0"),
    ({}, "localhost/moldau-broker:0.1.0", "localhost/moldau-broker:0.1.0"),
], ids=["image", "version", "registry port", "digest", "default"])
def test_the_image_comes_from_image_then_version_then_the_default(spec, default, image) -> None:
    from moldau.operator.spec import broker_image

    assert broker_image(spec, default) == image
