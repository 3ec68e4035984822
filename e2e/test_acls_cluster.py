"""ACLs across a cluster: brokers forward admin requests to the controller with the client's
principal, and the controller listener cannot be used to get around the ACLs.

A controller-only node and two brokers. Clients use SASL_PLAINTEXT; the controller listener
is TLS and asks for client certificates: the nodes present theirs (mapped to User:localhost,
a super user), anyone else is User:ANONYMOUS there.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from e2e.certs import CertAuthority
from e2e.conftest import _ACTIVE, Broker, free_port
from e2e.support import unique, wait_until
from moldau.broker.security.forwarding import principal_bytes
from moldau.client.connection import BrokerConnection
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import encode_request, request_class

pytestmark = pytest.mark.timeout(240)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret";')
CREATE_TOPICS, DESCRIBE_QUORUM, ENVELOPE, BROKER_HEARTBEAT = 19, 55, 58, 63


def _create_topics_body(name: str) -> Any:
    return build(request_class(CREATE_TOPICS, 7), {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": 30000, "validate_only": False})


async def _as_anonymous(ca_file: str, port: int, calls: list[tuple[int, int, Any]]
                        ) -> list[Any]:
    """Requests sent straight to the controller listener over TLS without a certificate."""
    security = ClientSecurity("SSL", ssl.create_default_context(cafile=ca_file))
    connection = BrokerConnection(1, "127.0.0.1", port, client_id="intruder",
                                  request_timeout_ms=15000, security=security)
    await connection.open()
    try:
        return [await connection.send(key, version, body) for key, version, body in calls]
    finally:
        connection.close()


def test_forwarded_requests_are_authorized_for_their_clients(tmp_path: Path) -> None:
    ca = CertAuthority()
    node = ca.issue("localhost", server=True, client=True)
    keystore = str(ca.write_pem_keystore(node, tmp_path / "node.pem"))
    ca_file = str(ca.write_ca(tmp_path / "ca.pem"))
    controller_port = free_port()
    common = {
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca_file,
        "listener.name.controller.ssl.client.auth": "requested",
        "listener.name.controller.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:localhost",
        "broker.session.timeout.ms": 4000, "broker.heartbeat.interval.ms": 500}
    controller = Broker(tmp_path / "controller", {
        **common, "node.id": 1, "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})
    ports = [free_port() for _ in range(2)]
    brokers = [Broker(tmp_path / f"broker-{number}", {
        **common, "node.id": number, "process.roles": "broker",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "offsets.topic.replication.factor": 1}, port=port)
        for number, port in zip((2, 3), ports, strict=True)]

    def admin(user: str) -> AdminClient:
        return AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                            "sasl.username": user, "sasl.password": f"{user}-secret"})

    _ACTIVE.extend([controller, *brokers])  # their logs go with a failure's report
    try:
        controller.start()
        for broker in brokers:
            broker.start()
        super_user, alice = admin("admin"), admin("alice")
        # Every admin request of these brokers is forwarded: the controller is elsewhere.
        kept = unique("by-admin")
        super_user.create_topics([NewTopic(kept, 1, 1)])[kept].result(30)
        refused = unique("by-alice")
        with pytest.raises(KafkaException) as denied:
            alice.create_topics([NewTopic(refused, 1, 1)])[refused].result(30)
        assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grants = super_user.create_acls([AclBinding(
            ResourceType.TOPIC, "by-alice", ResourcePatternType.PREFIXED, "User:alice", "*",
            AclOperation.CREATE, AclPermissionType.ALLOW)])
        for future in grants.values():
            future.result(30)
        # The grant reaches every node through the metadata log; the controller decides.
        wait_until(lambda: _creates(alice, unique("by-alice")), 30, "alice's topic created")

        _replicate_and_commit_across_brokers(brokers, super_user)

        # Straight to the controller listener without a certificate: User:ANONYMOUS.
        intruded = unique("intruder")
        forged = encode_request(CREATE_TOPICS, 7, 1, "intruder",
                                _create_topics_body(intruded))[4:]
        envelope = build(request_class(ENVELOPE, 0), {
            "request_data": forged, "request_principal": principal_bytes("User:admin"),
            "client_host_address": bytes([127, 0, 0, 1])})
        heartbeat = build(request_class(BROKER_HEARTBEAT, 0), {
            "broker_id": 2, "broker_epoch": 0, "current_metadata_offset": 0,
            "want_fence": True, "want_shut_down": False})
        quorum = build(request_class(DESCRIBE_QUORUM, 0), {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
        created, forwarded, fenced, described = asyncio.run(_as_anonymous(
            ca_file, controller_port, [(CREATE_TOPICS, 7, _create_topics_body(intruded)),
                                       (ENVELOPE, 0, envelope), (BROKER_HEARTBEAT, 0, heartbeat),
                                       (DESCRIBE_QUORUM, 0, quorum)]))
        denied_code = ErrorCode.topic_authorization_failed.value
        assert created.topics[0].error_code == denied_code
        assert forwarded.error_code == ErrorCode.cluster_authorization_failed.value
        assert fenced.error_code == ErrorCode.cluster_authorization_failed.value
        assert described.error_code == ErrorCode.cluster_authorization_failed.value
        assert intruded not in super_user.list_topics(timeout=10).topics
        wait_until(lambda: "Refusing a forwarded request from User:ANONYMOUS" in
                   controller.tail(300), 10, "the refused Envelope logged")
        # The brokers, super users by their certificates, were never refused.
        assert "from User:localhost" not in controller.tail(2000)
        assert all(broker.alive for broker in brokers)
    finally:
        for node in (*brokers, controller):
            node.close()


def _replicate_and_commit_across_brokers(brokers: list[Broker], admin: AdminClient) -> None:
    """The brokers' own traffic under ACLs: followers fetch (CLUSTER_ACTION) and transaction
    markers reach the other broker's partition (WriteTxnMarkers, CLUSTER_ACTION), as
    User:admin over the inter-broker listener."""
    topic = unique("replicated")
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
              "sasl.username": "admin", "sasl.password": "admin-secret"}
    bootstrap = ",".join(broker.bootstrap for broker in brokers)
    values = [b"record-%02d" % number for number in range(20)]
    producer = Producer({"bootstrap.servers": bootstrap, **client, "acks": "all"})
    for number, value in enumerate(values[:10]):
        producer.produce(topic, value, partition=number % 2)
    assert producer.flush(30) == 0
    producer = Producer({"bootstrap.servers": bootstrap, **client,
                         "transactional.id": unique("txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number, value in enumerate(values[10:]):
        producer.produce(topic, value, partition=number % 2)
    producer.commit_transaction(30)
    leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10)
               .topics[topic].partitions.values()}
    assert set(leaders.values()) == {2, 3}  # the transaction spans both brokers
    assert sorted(_read(bootstrap, topic, (0, 1), client, len(values))) == values

    def in_sync() -> bool:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        return all(len(p.isrs) == 2 for p in partitions)

    assert in_sync()
    # A follower in sync has fetched everything: stop partition 0's leader, read from the other.
    stopped = next(b for b, node in zip(brokers, (2, 3), strict=True) if node == leaders[0])
    stopped.stop()
    rest = next(b for b in brokers if b is not stopped).bootstrap
    assert sorted(_read(rest, topic, (0,), client, 10)) == values[0::2]
    stopped.start()


def _read(bootstrap: str, topic: str, partitions: tuple[int, ...], client: dict[str, str],
          count: int) -> list[bytes]:
    """The committed values of these partitions, once `count` of them have been read."""
    reader = Consumer({"bootstrap.servers": bootstrap, **client, "group.id": unique("r"),
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(topic, partition, 0) for partition in partitions])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
    finally:
        reader.close()
    return got


def _creates(client: AdminClient, name: str) -> bool:
    try:
        client.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        return True
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, exc
        return False



def test_a_broker_the_controller_refuses_says_why(tmp_path: Path) -> None:
    """Brokers whose principal on the controller listener is not a super user (here
    User:ANONYMOUS on PLAINTEXT) cannot join; both sides say so in their logs."""
    controller_port, port = free_port(), free_port()
    common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
              "authorizer.class.name":
                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin"}
    controller = Broker(tmp_path / "controller", {
        **common, "node.id": 1, "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})
    broker = Broker(tmp_path / "broker", {
        **common, "node.id": 2, "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}"}, port=port)
    try:
        controller.start()
        with pytest.raises(AssertionError, match="moldau broker ready"):
            broker.start(timeout=8)
        assert "refuses this node's requests as not authorized" in broker.tail(100)
        assert "Refusing api 1 from User:ANONYMOUS" in controller.tail(100)
    finally:
        broker.kill()
        controller.close()
