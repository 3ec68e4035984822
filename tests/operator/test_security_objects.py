"""A secured KafkaCluster (TLS and SCRAM listeners, authorization) -> the nodes' settings,
read by the broker's own config parser as each pod's container would, and the pod template,
the Services and the refusals that go with it."""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path

import kubernetes_validate
import pytest

from moldau.broker.config import BrokerConfig
from moldau.broker.container import properties_from_env
from moldau.operator.certificates import node_names, security_switch
from moldau.operator.external import ExternalAddresses
from moldau.operator.naming import admin_ports
from moldau.operator.objects import desired_objects, owner_reference
from moldau.operator.spec import SpecError, parse_spec
from moldau.properties import load_properties

KUBERNETES = "1.37.0"
SPEC = {
    "image": "localhost/moldau-broker:0.1.0",
    "nodePools": [
        {"name": "controllers", "roles": ["controller"], "replicas": 3,
         "storage": {"size": "1Gi"}},
        {"name": "brokers", "roles": ["broker"], "replicas": 2, "storage": {"size": "1Gi"}},
    ],
    "listeners": [
        {"name": "plain", "port": 9092, "type": "internal"},
        {"name": "tls", "port": 9093, "type": "internal", "tls": True,
         "authentication": {"type": "tls"}},
        {"name": "scram", "port": 9094, "type": "internal", "tls": True,
         "authentication": {"type": "scram-sha-512"}},
        {"name": "external", "port": 9095, "type": "loadbalancer", "tls": True},
    ],
    "authorization": {"type": "simple", "superUsers": ["User:CN=admin"]},
    "clusterCa": {"validityDays": 100, "renewalDays": 10},
}
BASES = {"controllers": 0, "brokers": 100}
OWNER = owner_reference("kc", "0c5a3c4e-0000-4000-8000-000000000001")


def cluster(spec: dict | None = None):
    return parse_spec("kc", "team-a", spec or SPEC, default_image="default:1")


def by_name(kind: str, name: str, found: list[dict]) -> dict:
    return next(o for o in found if o["kind"] == kind and o["metadata"]["name"] == name)


def node_config(pool: str, ordinal: int, spec: dict | None = None) -> BrokerConfig:
    """The broker's settings in pod `kc-<pool>-<ordinal>`: server.properties from the
    ConfigMap, then the container's KAFKA_* variables as Kubernetes expands them."""
    found = desired_objects(cluster(spec), BASES, OWNER)
    text = by_name("ConfigMap", f"kc-{pool}-config", found)["data"]["server.properties"]
    pod = f"kc-{pool}-{ordinal}"
    container = by_name("StatefulSet", f"kc-{pool}", found)["spec"]["template"]["spec"][
        "containers"][0]
    env = {var["name"]: var["value"].replace("$(POD_NAME)", pod)
           for var in container["env"] if "value" in var}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "server.properties"
        path.write_text(text)
        from_file = load_properties(str(path))
    raw = {**from_file, **properties_from_env(env),
           "node.id": str(BASES[pool] + ordinal)}
    return BrokerConfig(raw)


def test_the_broker_reads_a_secured_nodes_settings() -> None:
    broker = node_config("brokers", 1)
    assert broker.protocols == {"PLAIN": "PLAINTEXT", "TLS": "SSL", "SCRAM": "SASL_SSL",
                                "EXTERNAL": "SSL", "REPLICATION": "SSL"}
    assert broker.controller_protocol == "SSL"
    # Each node serves its own certificate; the nodes' listeners and the tls listener ask
    # clients for one, of the cluster CA and of the clients CA.
    assert broker.listener_setting("TLS", "ssl.keystore.location") == \
        "/etc/moldau/certs/kc-brokers-1.pem"
    for listener, truststore in (("REPLICATION", "ca.crt"), ("CONTROLLER", "ca.crt"),
                                 ("TLS", "clients-ca.crt")):
        assert broker.listener_setting(listener, "ssl.client.auth") == "required"
        assert broker.listener_setting(listener, "ssl.truststore.location") == \
            f"/etc/moldau/certs/{truststore}"
    assert broker.listener_setting("EXTERNAL", "ssl.client.auth") == "none"
    assert broker.listener_setting("SCRAM", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert broker["authorizer.class.name"] == \
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert broker["super.users"].split(";") == ["User:CN=kc-kafka,O=io.moldau",
                                                "User:CN=kc-operator,O=io.moldau",
                                                "User:CN=admin"]
    controller = node_config("controllers", 2)
    assert controller.listener_setting("CONTROLLER", "ssl.keystore.location") == \
        "/etc/moldau/certs/kc-controllers-2.pem"
    assert controller.protocols["CONTROLLER"] == "SSL"


def test_an_unsecured_cluster_stays_plaintext_without_certificates() -> None:
    spec = copy.deepcopy(SPEC)
    spec["listeners"] = [{"name": "plain", "port": 9092}]
    del spec["authorization"]
    plain = cluster(spec)
    assert not plain.secured
    broker = node_config("brokers", 0, spec)
    assert set(broker.protocols.values()) == {"PLAINTEXT"}
    found = desired_objects(plain, BASES, OWNER)
    pod = by_name("StatefulSet", "kc-brokers", found)["spec"]["template"]["spec"]
    assert [volume["name"] for volume in pod["volumes"]] == ["config"]
    assert admin_ports(plain) == [9092]


def test_secured_pods_mount_their_certificates_and_stay_valid_for_kubernetes() -> None:
    found = desired_objects(cluster(), BASES, OWNER)
    for manifest in found:
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)
    pod = by_name("StatefulSet", "kc-brokers", found)["spec"]["template"]["spec"]
    assert {"name": "certs", "secret": {"secretName": "kc-broker-certs",
                                        "defaultMode": 0o440}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "certs", "mountPath": "/etc/moldau/certs", "readOnly": True} in mounts
    # The operator reaches the cluster on the replication listener, through the bootstrap
    # Service, with its own certificate.
    ports = {port["name"]: port["port"]
             for port in by_name("Service", "kc-bootstrap", found)["spec"]["ports"]}
    assert ports == {"plain": 9092, "tls": 9093, "scram": 9094, "replication": 9091}
    assert admin_ports(cluster()) == [9091]


@pytest.mark.parametrize(("change", "message"), [
    ({"listeners": [{"name": "plain", "port": 9092, "authentication": {"type": "tls"}}]},
     "authentication tls needs tls: true"),
    ({"clientsCa": {"validityDays": 30, "renewalDays": 30}},
     "clientsCa: renewalDays (30) must be at least 1 and less than validityDays (30)"),
    ({"config": {"super.users": "User:bob"}},
     "config 'super.users' is set by the operator from spec.authorization"),
])
def test_security_specs_the_schema_lets_through_are_refused(change: dict, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        cluster({**SPEC, **change})


def _statefulset(with_certs: bool) -> dict:
    volumes = [{"name": "config"}] + ([{"name": "certs"}] if with_certs else [])
    return {"spec": {"template": {"spec": {"volumes": volumes}}}}


def test_security_is_not_switched_on_or_off_under_running_nodes() -> None:
    secured = cluster()
    assert security_switch(secured, {"brokers": _statefulset(True)}) is None
    assert security_switch(secured, {}) is None  # a new cluster
    refusal = security_switch(secured, {"brokers": _statefulset(False)})
    assert refusal is not None and refusal.reason == "SecuritySwitchRefused"
    assert "runs with plain between its nodes" in refusal.message
    spec = {**SPEC, "listeners": [{"name": "plain", "port": 9092}]}
    del spec["authorization"]
    refusal = security_switch(cluster(spec), {"brokers": _statefulset(True)})
    assert refusal is not None and "removed" in refusal.message


def test_each_node_certificate_names_the_pod_and_brokers_the_bootstrap_and_outside() -> None:
    external = ExternalAddresses(files={"brokers": ["0.EXTERNAL=kafka-0.example.com:9095",
                                                    "1.EXTERNAL=203.0.113.7:9095"]})
    dns, ips = node_names(cluster(), external, {})
    assert sorted(dns) == ["kc-brokers-0", "kc-brokers-1", "kc-controllers-0",
                           "kc-controllers-1", "kc-controllers-2"]
    assert dns["kc-controllers-0"] == ["kc-controllers-0.kc-nodes.team-a.svc",
                                       "kc-controllers-0.kc-nodes.team-a.svc.cluster.local"]
    assert "kc-bootstrap.team-a.svc" in dns["kc-brokers-1"]
    assert "kafka-0.example.com" in dns["kc-brokers-0"]
    assert ips == {"kc-brokers-0": [], "kc-brokers-1": ["203.0.113.7"],
                   "kc-controllers-0": [], "kc-controllers-1": [], "kc-controllers-2": []}
