"""A broker whose TLS comes from the operator's planned Secrets (moldau.operator.pki), as a pod
mounts them: its PEM keystore `<pod>.pem`, the clients CA bundle as truststore, client
certificates required. confluent-kafka connects with users' certificates from issue_user
(principal `User:CN=<user>`); a certificate of another clients CA is refused. Renewing the
CAs (same keys) and replacing the files on disk changes no trust and needs no restart."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from e2e.conftest import Broker
from e2e.support import ck_consume_all, ck_produce, free_port, make_records, unique, wait_until
from e2e.test_tls import _handshake
from moldau.operator import certs, pki

CLUSTER = "local"
POD = "local-kafka-0"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def plan(existing: dict | None = None, force: frozenset[str] = frozenset()
         ) -> dict[str, dict[str, bytes]]:
    """The cluster's Secrets, its one pod reached at localhost / 127.0.0.1."""
    return pki.plan(pki.PkiInput(CLUSTER, "default", [POD], {POD: ["localhost"]},
                                 {POD: ["127.0.0.1"]}, pki.CaSettings(), pki.CaSettings(),
                                 force_renew=force), existing or {})


class MountedSecrets:
    """The broker Secret's files as a pod sees them; users' files next to them."""

    def __init__(self, directory: Path, secrets: dict[str, dict[str, bytes]]) -> None:
        self.dir = directory
        self.secrets = secrets
        self.keystore = directory / f"{POD}.pem"
        self.truststore = directory / "clients-ca.crt"
        self.cluster_ca = directory / "ca.crt"
        self.mount(secrets)

    def mount(self, secrets: dict[str, dict[str, bytes]]) -> None:
        """Replace each file at once (a rename), as the kubelet swaps a Secret volume."""
        self.secrets = secrets
        data = secrets[pki.broker_secret(CLUSTER)]
        for path, content in ((self.keystore, data[pki.keystore_key(POD)]),
                              (self.truststore, data[pki.CLIENTS_CA_CERT]),
                              (self.cluster_ca, data[pki.CA_CERT])):
            staging = path.with_suffix(".new")
            staging.write_bytes(content)
            staging.replace(path)

    def user(self, name: str, secrets: dict[str, dict[str, bytes]] | None = None
             ) -> dict[str, object]:
        """librdkafka settings of a user whose certificate the clients CA of `secrets`
        (these Secrets' when None) issued."""
        source = secrets or self.secrets
        data = pki.issue_user(source[pki.ca_key_secret(CLUSTER, pki.CLIENTS_CA)],
                              source[pki.ca_cert_secret(CLUSTER, pki.CLIENTS_CA)], name,
                              365, None, 30)
        assert data is not None
        cert, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert.write_bytes(data[pki.USER_CERT])
        key.write_bytes(data[pki.USER_KEY])
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.cluster_ca),
                "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}

    def context(self, user: dict[str, object]) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(user["ssl.ca.location"]))
        context.load_cert_chain(str(user["ssl.certificate.location"]),
                                str(user["ssl.key.location"]))
        return context


@pytest.fixture
def mounted(tmp_path: Path) -> MountedSecrets:
    return MountedSecrets(tmp_path, plan())


@pytest.fixture
def tls_broker(mounted: MountedSecrets, broker_factory) -> Broker:
    port = free_port()
    return broker_factory({
        "listeners": f"SSL://127.0.0.1:{port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(mounted.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(mounted.truststore),
        "ssl.client.auth": "required",
        # Only alice may do anything: her principal must be exactly User:CN=alice.
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:CN=alice"},
        port=port)


def test_users_certificates_from_the_clients_ca(mounted: MountedSecrets,
                                                tls_broker: Broker) -> None:
    bootstrap = tls_broker.bootstrap
    alice = mounted.user("alice")
    topic = unique("pki")
    assert ck_produce(bootstrap, topic, make_records(5), **alice) == list(range(5))
    assert [r.offset for r in ck_consume_all(bootstrap, topic, **alice)] == list(range(5))
    # bob's certificate is trusted too, but his principal is User:CN=bob: not a super user.
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000,
                         **mounted.user("bob")})
    errors: list[KafkaError] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    # A user of another cluster's clients CA: refused in the handshake.
    mallory = mounted.user("mallory", plan())
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(tls_broker, mounted.context(mallory), then_read=True)
    # The same for librdkafka: no metadata, whatever the wait.
    with pytest.raises(KafkaException, match="Failed to get metadata"):
        AdminClient({"bootstrap.servers": bootstrap, **mallory}).list_topics(timeout=5)
    log = tls_broker.tail(400)
    assert "Failed authentication with /127.0.0.1" in log
    assert "Traceback" not in log


def test_renewed_cas_need_no_restart(mounted: MountedSecrets, tls_broker: Broker) -> None:
    bootstrap = tls_broker.bootstrap
    before = mounted.user("alice")
    old_keystore = mounted.keystore.read_bytes()
    renewed = plan(mounted.secrets, frozenset({pki.CLUSTER_CA, pki.CLIENTS_CA}))
    mounted.mount(renewed)
    new_leaf = certs.split(mounted.keystore.read_bytes())[0]
    assert new_leaf != certs.split(old_keystore)[0]
    # Clients trusting only the cluster CA's certificate from before the renewal.
    old_cluster_ca = mounted.dir / "old-ca.crt"
    old_cluster_ca.write_bytes(certs.split(renewed[pki.ca_cert_secret(
        CLUSTER, pki.CLUSTER_CA)][pki.CA_CERT])[1])

    def served(user: dict[str, object]) -> bytes:
        context = mounted.context({**user, "ssl.ca.location": str(old_cluster_ca)})
        with _handshake(tls_broker, context, then_read=True) as tls:
            der = tls.getpeercert(binary_form=True)
        return ssl.DER_cert_to_PEM_cert(der).encode()

    # alice's certificate, from before the renewal, gets her to the broker serving its
    # renewed certificate, which the old CA certificate trusts: the same keys signed both.
    wait_until(lambda: served(before) == new_leaf, 30, "the renewed certificate served")
    # A user certificate issued after the renewal, likewise.
    assert served(mounted.user("alice2")) == new_leaf
    assert topic_round_trip(bootstrap, before)
    # The truststore down to the new clients CA certificate alone: alice still gets in.
    reloads = reloaded(tls_broker)
    mounted.truststore.write_bytes(certs.split(mounted.truststore.read_bytes())[0])
    wait_until(lambda: served(before) == new_leaf and reloaded(tls_broker) > reloads, 30,
               "the reduced truststore in use")
    assert topic_round_trip(bootstrap, before)
    assert tls_broker.starts == 1 and tls_broker.alive


def reloaded(broker: Broker) -> int:
    return broker.stderr_path.read_text().count("reloaded its TLS keystore")


def topic_round_trip(bootstrap: str, user: dict[str, object]) -> bool:
    topic = unique("renewed")
    return (ck_produce(bootstrap, topic, make_records(2), **user) == [0, 1]
            and len(ck_consume_all(bootstrap, topic, **user)) == 2)
