"""A secured KafkaCluster on a real Kubernetes: TLS listeners with SCRAM-SHA-512 and
client-certificate authentication and ACLs; the operator's CAs, node certificates and its
own mutual-TLS connection; KafkaUser resources whose Secrets let clients in and whose ACLs
let them do exactly what they list; a CA renewal that restarts no pod and drops no client;
a deleted user loses its login and its ACLs."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from e2e.kube.cluster_names import install
from e2e.kube.operator_bed import (
    TESTBED_DNS,
    OperatorProcess,
    cluster_manifest,
    local_volumes,
    wait_ready,
)
from e2e.kube.testbed import Cluster, poll
from e2e.support import unique

pytestmark = pytest.mark.kube

NAME = "sec"
TLS_PORT, SCRAM_PORT = 9093, 9094
# Certificates the kubelet puts in place on its Secret sync, about a minute at most.
SECRET_SYNC_SECONDS = 240.0


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("mkc-sec")
    with local_volumes(kube, name, count=2):
        yield name


@pytest.fixture(scope="module")
def namespace(kube: Cluster, crd: None, storage_class: str) -> Iterator[str]:
    with kube.namespace(unique("mkc-sec")) as name:
        yield name


def secret(kube: Cluster, namespace: str, name: str) -> dict[str, bytes]:
    data = kube.get_json("-n", namespace, "secret", name).get("data") or {}
    return {key: base64.b64decode(value) for key, value in data.items()}


def user_manifest(name: str, authentication: str, acls: list[dict]) -> dict:
    return {"apiVersion": "moldau.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": name, "labels": {"moldau.io/cluster": NAME}},
            "spec": {"authentication": {"type": authentication},
                     "authorization": {"type": "simple", "acls": acls}}}


def topic_manifest(name: str) -> dict:
    return {"apiVersion": "moldau.io/v1alpha1", "kind": "Topic",
            "metadata": {"name": name, "labels": {"moldau.io/cluster": NAME}},
            "spec": {"partitions": 1, "replicas": 1}}


def wait_resource_ready(kube: Cluster, namespace: str, kind: str, name: str) -> dict:
    def ready() -> dict | None:
        found = kube.get_json("-n", namespace, kind, name).get("status") or {}
        conditions = found.get("conditions") or []
        return found if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in conditions) else None

    return poll(ready, 180, f"{kind} {name} to be Ready",
                lambda: json.dumps(kube.get_json("-n", namespace, kind, name).get("status")))


class Files:
    """PEM files of a Secret's keys, for kafka-python's ssl_* settings."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)


def bootstrap(namespace: str, port: int) -> str:
    return f"{NAME}-bootstrap.{namespace}.svc:{port}"


def scram_settings(namespace: str, ca_file: str, user: str, password: str) -> dict:
    return {"bootstrap_servers": bootstrap(namespace, SCRAM_PORT),
            "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": password,
            "ssl_cafile": ca_file, "request_timeout_ms": 30000}


def tls_settings(namespace: str, ca_file: str, cert: str, key: str) -> dict:
    return {"bootstrap_servers": bootstrap(namespace, TLS_PORT), "security_protocol": "SSL",
            "ssl_cafile": ca_file, "ssl_certfile": cert, "ssl_keyfile": key,
            "request_timeout_ms": 30000}


def read_all(settings: dict, topic: str, count: int, group: str | None = None) -> list[bytes]:
    consumer = KafkaConsumer(group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=20000, **settings)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) >= count:
                break
        if group:
            consumer.commit()
        return values
    finally:
        consumer.close()


def served_serial(host: str, port: int, ca_file: str) -> int:
    """The serial number of the certificate a broker serves now."""
    context = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def broker_log(kube: Cluster, namespace: str) -> str:
    return kube.kubectl("-n", namespace, "logs", f"{NAME}-brokers-0")


def pods_state(kube: Cluster, namespace: str) -> dict[str, tuple[str, int]]:
    pods = kube.get_json("-n", namespace, "pods", "-l", f"moldau.io/cluster={NAME}")
    return {pod["metadata"]["name"]: (pod["metadata"]["uid"], sum(
        status.get("restartCount", 0) for status in pod["status"].get("containerStatuses", [])))
        for pod in pods["items"]}


def test_a_secured_cluster_with_users_acls_and_a_ca_renewal(
        kube: Cluster, namespace: str, storage_class: str, operator: OperatorProcess,
        tmp_path: Path) -> None:
    install(TESTBED_DNS)
    files = Files(tmp_path)
    manifest = cluster_manifest(NAME, storage_class)
    manifest["spec"]["listeners"] = [
        {"name": "tls", "port": TLS_PORT, "tls": True, "authentication": {"type": "tls"}},
        {"name": "scram", "port": SCRAM_PORT, "tls": True,
         "authentication": {"type": "scram-sha-512"}}]
    manifest["spec"]["authorization"] = {"type": "simple"}
    started = time.monotonic()
    kube.apply(json.dumps(manifest), namespace)
    # Ready means the operator reached the brokers over mutual TLS with its certificate,
    # and the nodes each other over theirs.
    wait_ready(kube, namespace, NAME)
    print(f"kubectl apply to Ready (secured, 1 controller + 1 broker): "
          f"{time.monotonic() - started:.1f} s")
    ca_file = files.write("ca.crt", secret(kube, namespace, f"{NAME}-cluster-ca-cert")["ca.crt"])

    orders, other = unique("orders"), unique("other")
    for topic in (orders, other):
        kube.apply(json.dumps(topic_manifest(topic)), namespace)
    kube.apply(json.dumps(user_manifest("alice", "scram-sha-512", [
        {"resource": {"type": "topic", "name": orders}, "operations": ["Write", "Describe"]},
        {"resource": {"type": "topic", "name": "orders", "patternType": "prefix"},
         "operations": ["Read"]},
        {"resource": {"type": "group", "name": "alice-", "patternType": "prefix"},
         "operations": ["Read"]}])), namespace)
    kube.apply(json.dumps(user_manifest("bob", "tls", [
        {"resource": {"type": "topic", "name": orders}, "operations": ["Read", "Describe"]}])),
        namespace)
    for topic in (orders, other):
        wait_resource_ready(kube, namespace, "topic", topic)
    alice_status = wait_resource_ready(kube, namespace, "kafkauser", "alice")
    assert alice_status["username"] == "alice" and alice_status["secret"] == "alice"
    assert wait_resource_ready(kube, namespace, "kafkauser", "bob")["username"] == "CN=bob"

    password = secret(kube, namespace, "alice")["password"].decode()
    alice = scram_settings(namespace, ca_file, "alice", password)
    producer = KafkaProducer(acks="all", **alice)
    for n in range(5):
        producer.send(orders, f"before-{n}".encode()).get(timeout=60)
    # Its ACLs name only `orders`: writing elsewhere is refused.
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send(other, b"nope").get(timeout=60)
    assert read_all(alice, orders, 5, group="alice-readers") == \
        [f"before-{n}".encode() for n in range(5)]
    with pytest.raises(KafkaError):
        KafkaProducer(max_block_ms=15000,
                      **scram_settings(namespace, ca_file, "alice", password + "x"))
    # kafka-python retries until its timeout; the broker says why it closed the connection.
    poll(lambda: "invalid credentials with SASL mechanism SCRAM-SHA-512" in
         broker_log(kube, namespace), 60, "the broker to log the failed login")

    bob_secret = secret(kube, namespace, "bob")
    bob = tls_settings(namespace, files.write("bob-ca.crt", bob_secret["ca.crt"]),
                       files.write("bob.crt", bob_secret["user.crt"]),
                       files.write("bob.key", bob_secret["user.key"]))
    # bob's certificate is checked against the clients CA; the brokers' against the cluster
    # CA (bob's ca.crt is the clients CA: give the cluster CA to check the brokers).
    bob["ssl_cafile"] = ca_file
    assert read_all(bob, orders, 5) == [f"before-{n}".encode() for n in range(5)]
    # Not idempotent: an idempotent producer without any Write is refused its producer id
    # (CLUSTER_AUTHORIZATION_FAILED, as Kafka answers) before it gets to the topic.
    bob_producer = KafkaProducer(enable_idempotence=False, **bob)
    with pytest.raises(TopicAuthorizationFailedError):
        bob_producer.send(orders, b"bob may not write").get(timeout=60)
    bob_producer.close()

    # Renew both CAs: Secrets change, brokers reload their certificates, no pod restarts,
    # and the producer connected before goes on.
    before = pods_state(kube, namespace)
    broker = f"{NAME}-brokers-0.{NAME}-nodes.{namespace}.svc.cluster.local"
    serial = served_serial(broker, TLS_PORT, ca_file)
    renewing = time.monotonic()
    kube.kubectl("-n", namespace, "annotate", "kafkacluster", NAME,
                 "moldau.io/force-renew=cluster-ca,clients-ca")
    poll(lambda: secret(kube, namespace, f"{NAME}-cluster-ca-cert")["ca.crt"].count(
        b"BEGIN CERTIFICATE") == 2, 120, "the renewed CA next to the old one in ca.crt")
    renewed_ca = files.write("ca2.crt", secret(kube, namespace,
                                               f"{NAME}-cluster-ca-cert")["ca.crt"])
    poll(lambda: served_serial(broker, TLS_PORT, renewed_ca) != serial, SECRET_SYNC_SECONDS,
         "the broker to serve its re-issued certificate")
    print(f"force-renew to the broker serving its new certificate: "
          f"{time.monotonic() - renewing:.1f} s")
    annotations = kube.get_json("-n", namespace, "kafkacluster", NAME)["metadata"].get(
        "annotations") or {}
    assert "moldau.io/force-renew" not in annotations
    for n in range(5):
        producer.send(orders, f"after-{n}".encode()).get(timeout=60)
    producer.close()
    assert pods_state(kube, namespace) == before
    # Old trust still checks the new certificates (same CA key), new trust the old ones.
    assert read_all({**alice, "ssl_cafile": ca_file}, orders, 10) == \
        [f"{when}-{n}".encode() for when in ("before", "after") for n in range(5)]
    assert read_all(bob, orders, 10)[-1] == b"after-4"

    # Deleting alice removes her SCRAM login and her ACLs.
    operator_secret = secret(kube, namespace, f"{NAME}-operator-certs")
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap(namespace, 9091), security_protocol="SSL",
        ssl_cafile=renewed_ca, ssl_certfile=files.write("op.crt", operator_secret["operator.crt"]),
        ssl_keyfile=files.write("op.key", operator_secret["operator.key"]),
        request_timeout_ms=30000)
    everything = ACLFilter(principal="User:alice", host=None, operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(
                               ResourceType.ANY, None, ACLResourcePatternType.ANY))
    assert len(admin.describe_acls(everything)[0]) == 4
    kube.kubectl("-n", namespace, "delete", "kafkauser", "alice", "--wait=true", timeout=120)
    assert admin.describe_acls(everything)[0] == []
    admin.close()
    with pytest.raises(KafkaError):
        KafkaProducer(max_block_ms=15000, **alice)
