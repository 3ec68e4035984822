"""moldau.operator.pki: the TLS Secrets of a cluster over its life. Made once, byte for byte
the same while nothing is due, CAs renewed with their keys and the old certificate kept in the
bundle until it expires, node certificates re-issued one by one as their names change, and
half-present or unreadable CA Secrets refused rather than replaced. Chains are checked with
`openssl verify` at the planned times."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest

from moldau.operator import certs, pki
from moldau.operator.pki import PkiError
from tests.operator.x509_tools import text, verify

NOW = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
CLUSTER, NAMESPACE = "orders", "kafka"
PODS = ("orders-controllers-0", "orders-brokers-0", "orders-brokers-1")
CA_KEY, CA_CERT = "orders-cluster-ca", "orders-cluster-ca-cert"
CLIENTS_KEY, CLIENTS_CERT = "orders-clients-ca", "orders-clients-ca-cert"
BROKERS, OPERATOR = "orders-broker-certs", "orders-operator-certs"


def dns(pod: str) -> list[str]:
    return [f"{pod}.orders-nodes.kafka.svc.cluster.local", "orders-bootstrap.kafka.svc"]


def inputs(**changes: object) -> pki.PkiInput:
    base = pki.PkiInput(CLUSTER, NAMESPACE, PODS, {pod: dns(pod) for pod in PODS}, {},
                        pki.CaSettings(), pki.CaSettings())
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def settled() -> dict[str, dict[str, bytes]]:
    return pki.plan(inputs(), {}, now=NOW)


def leaf(keystore: bytes) -> bytes:
    return certs.split(keystore)[0]


def changed(before: dict[str, dict[str, bytes]], after: dict[str, dict[str, bytes]]
            ) -> set[str]:
    """`secret/key` of every datum added, dropped or changed."""
    return {f"{secret}/{key}" for secret in before.keys() | after.keys()
            for key in before.get(secret, {}).keys() | after.get(secret, {}).keys()
            if before.get(secret, {}).get(key) != after.get(secret, {}).get(key)}


def test_a_new_cluster_gets_every_secret(settled) -> None:
    assert {name: set(data) for name, data in settled.items()} == {
        CA_KEY: {"ca.key"}, CA_CERT: {"ca.crt"},
        CLIENTS_KEY: {"ca.key"}, CLIENTS_CERT: {"ca.crt"},
        BROKERS: {f"{pod}.pem" for pod in PODS} | {"ca.crt", "clients-ca.crt"},
        OPERATOR: {"operator.crt", "operator.key", "ca.crt"}}
    cluster_ca, clients_ca = settled[CA_CERT]["ca.crt"], settled[CLIENTS_CERT]["ca.crt"]
    assert "Subject: O = io.moldau, CN = orders-cluster-ca" in text(cluster_ca)
    assert "Subject: O = io.moldau, CN = orders-clients-ca" in text(clients_ca)
    assert certs.key_matches(cluster_ca, settled[CA_KEY]["ca.key"])
    assert certs.key_matches(clients_ca, settled[CLIENTS_KEY]["ca.key"])
    assert settled[BROKERS]["ca.crt"] == settled[OPERATOR]["ca.crt"] == cluster_ca
    assert settled[BROKERS]["clients-ca.crt"] == clients_ca
    for pod in PODS:
        keystore = settled[BROKERS][f"{pod}.pem"]
        # Kafka's PEM keystore: the key, then the node's certificate and the CA's.
        key, chain = certs.private_key(keystore), certs.split(keystore)
        assert keystore == key + chain[0] + chain[1] and chain[1] == cluster_ca
        assert certs.key_matches(chain[0], key)
        shown = text(chain[0])
        assert "Subject: O = io.moldau, CN = orders-kafka" in shown
        assert "TLS Web Server Authentication, TLS Web Client Authentication" in shown
        assert certs.names(chain[0]) == set(dns(pod))
        for purpose in ("sslserver", "sslclient"):
            ok, said = verify(cluster_ca, chain[0], at=NOW, purpose=purpose)
            assert ok, said
        # Not the clients CA's.
        assert not verify(clients_ca, chain[0], at=NOW)[0]
    operator = settled[OPERATOR]["operator.crt"]
    assert "Subject: O = io.moldau, CN = orders-operator" in text(operator)
    assert verify(cluster_ca, operator, at=NOW, purpose="sslclient")[0]
    assert not verify(cluster_ca, operator, at=NOW, purpose="sslserver")[0]
    assert certs.key_matches(operator, settled[OPERATOR]["operator.key"])
    assert pki.broker_principal(CLUSTER) == "User:CN=orders-kafka,O=io.moldau"


def test_a_settled_cluster_has_nothing_to_rewrite(settled) -> None:
    for later in (NOW, NOW + 100 * DAY, NOW + 334 * DAY):
        again = pki.plan(inputs(), settled, now=later)
        assert again == settled, changed(settled, again)


def test_renewal_keeps_the_old_ca_trusted_until_it_expires(settled) -> None:
    old_ca = settled[CA_CERT]["ca.crt"]
    at = NOW + 336 * DAY
    renewed = pki.plan(inputs(), settled, now=at)
    new_ca, kept = certs.split(renewed[CA_CERT]["ca.crt"])
    assert kept == old_ca and new_ca != old_ca
    assert renewed[CA_KEY] == settled[CA_KEY] and renewed[CLIENTS_KEY] == settled[CLIENTS_KEY]
    assert len(certs.split(renewed[CLIENTS_CERT]["ca.crt"])) == 2
    assert renewed[BROKERS]["ca.crt"] == renewed[CA_CERT]["ca.crt"]
    for pod in PODS:
        before, after = (leaf(s[BROKERS][f"{pod}.pem"]) for s in (settled, renewed))
        # Issued anew, so that it chains to the newest CA certificate...
        assert before != after and certs.split(renewed[BROKERS][f"{pod}.pem"])[1] == new_ca
        assert certs.not_after(after) == at + 365 * DAY
        # ...while either certificate trusts either node certificate: the key is the same.
        for cert, anchor in ((before, new_ca), (after, old_ca), (after, new_ca)):
            ok, said = verify(anchor, cert, at=at)
            assert ok, said
    assert renewed[OPERATOR]["operator.crt"] != settled[OPERATOR]["operator.crt"]
    # Settled again, until the old certificate expires: then it leaves the bundles alone.
    assert pki.plan(inputs(), renewed, now=at + DAY) == renewed
    old_end = certs.not_after(old_ca)
    assert pki.plan(inputs(), renewed, now=old_end) == renewed
    pruned = pki.plan(inputs(), renewed, now=old_end + timedelta(seconds=1))
    assert pruned[CA_CERT]["ca.crt"] == new_ca
    assert changed(renewed, pruned) == {f"{CA_CERT}/ca.crt", f"{CLIENTS_CERT}/ca.crt",
                                        f"{BROKERS}/ca.crt", f"{BROKERS}/clients-ca.crt",
                                        f"{OPERATOR}/ca.crt"}


def test_forced_renewal(settled) -> None:
    soon = NOW + DAY
    clients = pki.plan(inputs(force_renew=frozenset({pki.CLIENTS_CA})), settled, now=soon)
    assert changed(settled, clients) == {f"{CLIENTS_CERT}/ca.crt", f"{BROKERS}/clients-ca.crt"}
    new, old = certs.split(clients[CLIENTS_CERT]["ca.crt"])
    assert old == settled[CLIENTS_CERT]["ca.crt"]
    assert certs.not_before(new) == soon - certs.BACKDATE
    cluster = pki.plan(inputs(force_renew=frozenset({pki.CLUSTER_CA})), settled, now=soon)
    assert changed(settled, cluster) == {
        f"{CA_CERT}/ca.crt", f"{BROKERS}/ca.crt", f"{OPERATOR}/ca.crt",
        f"{OPERATOR}/operator.crt", f"{OPERATOR}/operator.key",
        *(f"{BROKERS}/{pod}.pem" for pod in PODS)}
    # The annotation gone, nothing more to do.
    assert pki.plan(inputs(), cluster, now=soon) == cluster


def test_changed_names_reissue_only_those_pods(settled) -> None:
    names = {pod: dns(pod) for pod in PODS}
    names["orders-brokers-1"] = [*dns("orders-brokers-1"), "broker-1.orders.example.com"]
    names["orders-brokers-2"] = dns("orders-brokers-2")
    del names["orders-controllers-0"]
    pods = ("orders-brokers-0", "orders-brokers-1", "orders-brokers-2")
    ips = {"orders-brokers-0": ["192.0.2.10", "2001:db8:0:0::10"]}
    after = pki.plan(inputs(broker_pods=pods, dns_names=names, ip_addresses=ips), settled,
                     now=NOW + DAY)
    assert changed(settled, after) == {f"{BROKERS}/{pod}.pem" for pod in (
        "orders-controllers-0", *pods)}
    assert "orders-controllers-0.pem" not in after[BROKERS]
    assert certs.names(leaf(after[BROKERS]["orders-brokers-0.pem"])) == {
        *dns("orders-brokers-0"), "192.0.2.10", "2001:db8::10"}
    assert "broker-1.orders.example.com" in certs.names(
        leaf(after[BROKERS]["orders-brokers-1.pem"]))
    # The same names written another way are the same names: nothing re-issued.
    same = {"orders-brokers-0": ["2001:DB8::10", "192.0.2.10"]}
    assert pki.plan(inputs(broker_pods=pods, dns_names=names, ip_addresses=same), after,
                    now=NOW + DAY) == after


def test_unreadable_or_foreign_keystores_are_issued_anew(settled) -> None:
    other = pki.plan(inputs(), {}, now=NOW)
    existing = {**settled, BROKERS: {**settled[BROKERS],
                                     "orders-brokers-0.pem": b"junk",
                                     # A keystore of another cluster CA.
                                     "orders-brokers-1.pem": other[BROKERS][
                                         "orders-brokers-1.pem"]}}
    after = pki.plan(inputs(), existing, now=NOW)
    assert changed(settled, after) == {f"{BROKERS}/orders-brokers-0.pem",
                                       f"{BROKERS}/orders-brokers-1.pem"}
    for pod in ("orders-brokers-0", "orders-brokers-1"):
        assert certs.issued_by(leaf(after[BROKERS][f"{pod}.pem"]), settled[CA_CERT]["ca.crt"])
    swapped = {**settled, OPERATOR: {**settled[OPERATOR],
                                     "operator.key": settled[CA_KEY]["ca.key"]}}
    assert changed(settled, pki.plan(inputs(), swapped, now=NOW)) == {
        f"{OPERATOR}/operator.crt", f"{OPERATOR}/operator.key"}


def _without(secrets: dict, name: str) -> dict:
    return {key: value for key, value in secrets.items() if key != name}


def _broken(settled: dict) -> dict[str, tuple[dict, str]]:
    other_key = pki.plan(inputs(), {}, now=NOW)[CA_KEY]["ca.key"]
    torn = settled[CA_CERT]["ca.crt"][:300] + settled[CA_CERT]["ca.crt"][-40:]
    return {
        "key without cert": (_without(settled, CA_CERT),
                             "Secret kafka/orders-cluster-ca exists without "
                             "Secret kafka/orders-cluster-ca-cert: restore it"),
        "cert without key": (_without(settled, CLIENTS_KEY),
                             "Secret kafka/orders-clients-ca-cert exists without "
                             "Secret kafka/orders-clients-ca: the CA key is lost"),
        "torn certificate": ({**settled, CA_CERT: {"ca.crt": torn}},
                             "Secret kafka/orders-cluster-ca-cert, ca.crt: not a readable PEM "
                             "certificate"),
        "no certificate": ({**settled, CA_CERT: {"ca.crt": b"\n"}},
                           "Secret kafka/orders-cluster-ca-cert, ca.crt: no PEM certificate"),
        "no key field": ({**settled, CA_KEY: {"tls.key": settled[CA_KEY]["ca.key"]}},
                         "Secret kafka/orders-cluster-ca has no ca.key"),
        "no cert field": ({**settled, CLIENTS_CERT: {}},
                          "Secret kafka/orders-clients-ca-cert has no ca.crt"),
        "unreadable key": ({**settled, CA_KEY: {"ca.key": b"-----BEGIN PRIVATE KEY-----\nxx"}},
                           "Secret kafka/orders-cluster-ca, ca.key: not a readable unencrypted "
                           "PEM private key"),
        "another key": ({**settled, CA_KEY: {"ca.key": other_key}},
                        "Secret kafka/orders-cluster-ca, ca.key: not the key of the first "
                        "certificate of Secret kafka/orders-cluster-ca-cert"),
    }


@pytest.mark.parametrize("case", ["key without cert", "cert without key", "torn certificate",
                                  "no certificate", "no key field", "no cert field",
                                  "unreadable key", "another key"])
def test_half_present_or_corrupt_ca_secrets_are_errors(settled, case: str) -> None:
    existing, message = _broken(settled)[case]
    with pytest.raises(PkiError) as raised:
        pki.plan(inputs(), existing, now=NOW)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"cluster_ca": pki.CaSettings(30, 30)},
     "clusterCa: renewalDays (30) must be less than validityDays (30)"),
    ({"clients_ca": pki.CaSettings(0, 0)},
     "clientsCa: validityDays (0) and renewalDays (0) must be at least 1"),
    ({"dns_names": {pod: dns(pod) for pod in PODS[1:]}},
     "pod kafka/orders-controllers-0: no DNS names to certify"),
    ({"ip_addresses": {"orders-brokers-0": ["node-1"]}},
     "pod kafka/orders-brokers-0: 'node-1' is not an IP address"),
])
def test_bad_inputs_are_errors(settled, changes: dict, message: str) -> None:
    with pytest.raises(PkiError, match=f"^{re.escape(message)}$"):
        pki.plan(inputs(**changes), settled, now=NOW)


def test_a_cluster_name_too_long_for_a_certificate() -> None:
    name = "o" * 54
    with pytest.raises(PkiError, match=f"^the cluster-ca of cluster {name}: the common name "
                                       ".* has 65 characters"):
        pki.plan(dataclasses.replace(inputs(), cluster=name), {}, now=NOW)


def test_user_certificates(settled) -> None:
    key_secret, cert_secret = settled[CLIENTS_KEY], settled[CLIENTS_CERT]
    assert pki.issue_user(None, None, "alice", 365, None, 30, now=NOW) is None
    alice = pki.issue_user(key_secret, cert_secret, "alice", 365, None, 30, now=NOW)
    assert set(alice) == {"user.crt", "user.key", "ca.crt"}
    assert alice["ca.crt"] == cert_secret["ca.crt"]
    shown = text(alice["user.crt"])
    assert "Subject: CN = alice\n" in shown and "TLS Web Client Authentication" in shown
    ok, said = verify(cert_secret["ca.crt"], alice["user.crt"], at=NOW, purpose="sslclient")
    assert ok, said
    assert not verify(settled[CA_CERT]["ca.crt"], alice["user.crt"], at=NOW)[0]
    # Kept while valid, and while it ends with the clients CA certificate, due itself but not
    # renewed yet: issued anew it would end there too.
    for later in (NOW + 300 * DAY, NOW + 336 * DAY):
        assert pki.issue_user(key_secret, cert_secret, "alice", 365, alice, 30,
                              now=later) == alice
    # Issued anew when due.
    bob = pki.issue_user(key_secret, cert_secret, "bob", 100, None, 30, now=NOW)
    assert pki.issue_user(key_secret, cert_secret, "bob", 100, bob, 30, now=NOW + 69 * DAY) == bob
    due = pki.issue_user(key_secret, cert_secret, "bob", 100, bob, 30, now=NOW + 71 * DAY)
    assert due["user.crt"] != bob["user.crt"] and due["user.key"] != bob["user.key"]
    assert certs.not_after(due["user.crt"]) == NOW + 171 * DAY
    # After the clients CA is renewed, issued anew and chaining to its newest certificate.
    renewed = pki.plan(inputs(force_renew=frozenset({pki.CLIENTS_CA})), settled,
                       now=NOW + DAY)
    after = pki.issue_user(renewed[CLIENTS_KEY], renewed[CLIENTS_CERT], "alice", 365, alice,
                           30, now=NOW + DAY)
    assert after["user.crt"] != alice["user.crt"]
    assert after["ca.crt"] == renewed[CLIENTS_CERT]["ca.crt"]
    # Another clients CA (the cluster made anew): issued anew too.
    other = pki.plan(inputs(), {}, now=NOW)
    moved = pki.issue_user(other[CLIENTS_KEY], other[CLIENTS_CERT], "alice", 365, alice, 30,
                           now=NOW)
    assert certs.issued_by(moved["user.crt"], other[CLIENTS_CERT]["ca.crt"])


def test_user_certificate_errors(settled) -> None:
    key_secret, cert_secret = settled[CLIENTS_KEY], settled[CLIENTS_CERT]
    with pytest.raises(PkiError, match="^the clients CA key Secret exists without the clients "
                                       "CA certificate Secret"):
        pki.issue_user(key_secret, None, "alice", 365, None, 30, now=NOW)
    with pytest.raises(PkiError, match="^KafkaUser u{65}: the common name .* has 65"):
        pki.issue_user(key_secret, cert_secret, "u" * 65, 365, None, 30, now=NOW)
    with pytest.raises(PkiError, match=r"^clientsCa: renewalDays \(400\) must be less"):
        pki.issue_user(key_secret, cert_secret, "alice", 365, None, 400, now=NOW)
