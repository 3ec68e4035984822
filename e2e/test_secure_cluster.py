"""A secured cluster: a controller quorum over TLS and three brokers whose clients and whose
replication both use SASL_SSL, with the broker's own credentials from its JAAS config."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.certs import CertAuthority
from e2e.conftest import Broker, free_port
from e2e.support import (
    assert_records_equal,
    ck_consume_all,
    ck_consumer,
    ck_produce,
    make_records,
    unique,
    wait_until,
    with_offsets,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret" '
        'user_alice="alice-secret";')


def test_sasl_ssl_brokers_replicate_with_a_tls_controller_quorum(tmp_path: Path) -> None:
    ca = CertAuthority()
    keystore = str(ca.write_pem_keystore(ca.issue("localhost", server=True),
                                         tmp_path / "node.pem"))
    ca_file = str(ca.write_ca(tmp_path / "ca.pem"))
    controller_port = free_port()
    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
           "ssl.truststore.type": "PEM", "ssl.truststore.location": ca_file}
    common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
              "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL", **tls}
    controller = Broker(tmp_path / "controller", {
        **common, "node.id": 1, "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})
    ports = [free_port() for _ in range(3)]
    brokers = [Broker(tmp_path / f"broker-{node}", {
        **common, "node.id": node, "process.roles": "broker",
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "offsets.topic.replication.factor": 3}, port=port)
        for node, port in zip((2, 3, 4), ports, strict=True)]
    client = {"security.protocol": "SASL_SSL", "ssl.ca.location": ca_file,
              "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
    try:
        controller.start()
        for broker in brokers:
            broker.start()
        bootstrap = ",".join(broker.bootstrap for broker in brokers)
        topic = unique("secured")
        admin = AdminClient({"bootstrap.servers": bootstrap, **client})
        admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)

        def in_sync() -> bool:
            partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
            return all(len(p.isrs) == 3 for p in partitions.values())

        records = make_records(40, partitions=2)
        ck_produce(bootstrap, topic, records, acks="all", **client)
        wait_until(in_sync, 30, "every replica in sync over SASL_SSL")
        # Stop the leader of partition 0: its followers took every record over SASL_SSL.
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        stopped = next(b for b, node in zip(brokers, (2, 3, 4), strict=True) if node == leader)
        stopped.stop()
        rest = ",".join(b.bootstrap for b in brokers if b is not stopped)
        # A new leader's high watermark moves up once the remaining follower has fetched
        # from it (as in Kafka): until then a consumer would stop short.
        produced = {p: sum(1 for r in records if r.partition == p) for p in (0, 1)}
        wait_until(lambda: high_watermarks(rest, topic, client) == produced, 30,
                   f"high watermarks {produced} on the remaining brokers")
        got = ck_consume_all(rest, topic, partitions=(0, 1), **client)
        assert_records_equal(got, with_offsets(records))
        for node in (controller, *brokers):
            assert "Traceback" not in node.tail(500)
            assert "Failed authentication" not in node.tail(500)
    finally:
        for node in (*brokers, controller):
            if node.alive:
                node.stop()


def high_watermarks(bootstrap: str, topic: str, client: dict) -> dict[int, int]:
    consumer = ck_consumer(bootstrap, **client)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in (0, 1)}
    finally:
        consumer.close()
