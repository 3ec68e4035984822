"""moldau.operator.certs checked by OpenSSL: CA and node certificates as `openssl x509` reads
them, chains as `openssl verify` builds them, and a CA renewed with its own key trusted both
ways."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from moldau.operator import certs
from tests.operator.x509_tools import openssl, text, verify

NOW = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def ca() -> certs.Issued:
    return certs.new_ca("orders-cluster-ca", 365, now=NOW)


def test_a_ca_as_openssl_reads_it(ca: certs.Issued) -> None:
    shown = text(ca.cert)
    assert "Subject: O = io.moldau, CN = orders-cluster-ca" in shown
    assert "Issuer: O = io.moldau, CN = orders-cluster-ca" in shown
    assert "CA:TRUE, pathlen:0" in shown
    assert "Certificate Sign, CRL Sign" in shown
    assert "Public-Key: (2048 bit)" in shown and "rsaEncryption" in shown
    assert certs.not_after(ca.cert) == NOW + 365 * DAY
    assert ca.key.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    key = openssl("pkey", "-in", "{key}", "-noout", "-text", files={"key": ca.key})
    assert key.returncode == 0 and "Private-Key: (2048 bit" in key.stdout, key.stderr
    # The key is the certificate's.
    public = openssl("pkey", "-in", "{key}", "-pubout", files={"key": ca.key}).stdout
    assert public == openssl("x509", "-in", "{cert}", "-noout", "-pubkey",
                             files={"cert": ca.cert}).stdout
    assert verify(ca.cert, ca.cert, at=NOW)[0]


def test_a_node_certificate(ca: certs.Issued) -> None:
    node = certs.issue(ca, "orders-kafka", validity_days=30, server=True, client=True,
                       dns_names=["orders-kafka-0.orders-nodes.ns.svc", "orders-bootstrap"],
                       ip_addresses=["10.1.2.3", "fd00::0001"], now=NOW)
    shown = text(node.cert)
    assert "Subject: O = io.moldau, CN = orders-kafka" in shown
    assert "Issuer: O = io.moldau, CN = orders-cluster-ca" in shown
    assert "TLS Web Server Authentication, TLS Web Client Authentication" in shown
    assert ("DNS:orders-kafka-0.orders-nodes.ns.svc, DNS:orders-bootstrap, "
            "IP Address:10.1.2.3, IP Address:FD00:0:0:0:0:0:0:1") in shown
    assert "CA:FALSE" in shown
    assert certs.names(node.cert) == {"orders-kafka-0.orders-nodes.ns.svc", "orders-bootstrap",
                                      "10.1.2.3", "fd00::1"}
    assert certs.ip_name("fd00::0001") == "fd00::1"
    for purpose in ("sslserver", "sslclient"):
        ok, said = verify(ca.cert, node.cert, at=NOW, purpose=purpose)
        assert ok, said
    assert certs.issued_by(node.cert, ca.cert) and certs.key_matches(node.cert, node.key)
    assert not certs.issued_by(node.cert, node.cert)
    # Issued with its dates: valid from a few minutes before, expired after 30 days.
    assert certs.not_before(node.cert) == NOW - certs.BACKDATE
    assert not verify(ca.cert, node.cert, at=NOW + 31 * DAY)[0]


def test_a_client_certificate_is_no_server_certificate(ca: certs.Issued) -> None:
    user = certs.issue(ca, "alice", validity_days=30, client=True, organization=None, now=NOW)
    shown = text(user.cert)
    assert "Subject: CN = alice\n" in shown
    assert "TLS Web Client Authentication" in shown and "Server Authentication" not in shown
    assert certs.names(user.cert) == frozenset()
    assert verify(ca.cert, user.cert, at=NOW, purpose="sslclient")[0]
    ok, said = verify(ca.cert, user.cert, at=NOW, purpose="sslserver")
    assert not ok and "unsuitable certificate purpose" in said
    with pytest.raises(ValueError, match="must be for a server or a client"):
        certs.issue(ca, "nobody", validity_days=30, now=NOW)


def test_another_ca_is_not_trusted(ca: certs.Issued) -> None:
    other = certs.new_ca("orders-cluster-ca", 365, now=NOW)
    node = certs.issue(other, "orders-kafka", validity_days=30, server=True, now=NOW)
    # Same subject as `ca`, another key: neither openssl nor issued_by take it for `ca`'s.
    ok, said = verify(ca.cert, node.cert, at=NOW)
    assert not ok, said
    assert not certs.issued_by(node.cert, ca.cert)
    assert certs.issued_by(node.cert, other.cert)


def test_never_outlives_its_ca(ca: certs.Issued) -> None:
    late = NOW + 300 * DAY
    node = certs.issue(ca, "orders-kafka", validity_days=365, server=True, now=late)
    assert certs.not_after(node.cert) == certs.not_after(ca.cert)
    with pytest.raises(ValueError, match="CA certificate .* expired on 2032-02-29 12:00:00 UTC"):
        certs.issue(ca, "orders-kafka", validity_days=365, server=True, now=NOW + 366 * DAY)


def test_due_for_renewal(ca: certs.Issued) -> None:
    expires = certs.not_after(ca.cert)
    assert not certs.due_for_renewal(ca.cert, 30, now=expires - 30 * DAY - timedelta(seconds=1))
    assert certs.due_for_renewal(ca.cert, 30, now=expires - 30 * DAY)
    assert certs.due_for_renewal(ca.cert, 30, now=expires + DAY)
    # A naive datetime is UTC.
    assert certs.due_for_renewal(ca.cert, 30, now=(expires - 29 * DAY).replace(tzinfo=None))


def test_a_renewed_ca_trusts_before_and_after(ca: certs.Issued) -> None:
    before = certs.issue(ca, "orders-kafka", validity_days=365, server=True, now=NOW)
    at = NOW + 340 * DAY
    renewed = certs.renew_ca(ca, 365, now=at)
    assert renewed.key == ca.key
    assert renewed.cert != ca.cert
    assert certs.not_after(renewed.cert) == at + 365 * DAY
    old_text, new_text = text(ca.cert), text(renewed.cert)
    assert _line(old_text, "Serial Number") != _line(new_text, "Serial Number")
    assert _line(old_text, "Subject:") == _line(new_text, "Subject:")
    after = certs.issue(renewed, "orders-kafka", validity_days=365, server=True, now=at)
    # Before the renewal, verified against the renewed certificate alone; after, against the
    # old one alone: the key is the same.
    for cert, ca_cert in ((before.cert, renewed.cert), (after.cert, ca.cert)):
        ok, said = verify(ca_cert, cert, at=at)
        assert ok, said
        assert certs.issued_by(cert, ca_cert)
    # Once the old certificate expired, only the renewed one is a trust anchor.
    beyond = certs.not_after(ca.cert) + DAY
    assert verify(renewed.cert, after.cert, at=beyond)[0]
    assert not verify(ca.cert, after.cert, at=beyond)[0]


def test_renewing_with_a_key_not_the_certificates_is_refused(ca: certs.Issued) -> None:
    other = certs.new_ca("other", 365, now=NOW)
    with pytest.raises(ValueError, match="not the key of the CA certificate"):
        certs.renew_ca(certs.Issued(ca.cert, other.key), 365, now=NOW)


def test_bundles(ca: certs.Issued) -> None:
    renewed = certs.renew_ca(ca, 365, now=NOW + 340 * DAY)
    both = certs.bundle([renewed.cert, ca.cert])
    assert certs.split(both) == [renewed.cert, ca.cert]
    assert certs.bundle([c.rstrip(b"\n") for c in certs.split(both)]) == both
    # Nothing expired: the same bytes back.
    assert certs.without_expired(both, now=NOW + 341 * DAY) is both
    assert certs.without_expired(both, now=certs.not_after(ca.cert) + DAY) == renewed.cert
    # A keystore: the key is not one of its certificates.
    keystore = ca.key + both
    assert certs.split(keystore) == [renewed.cert, ca.cert]
    assert certs.private_key(keystore) == ca.key
    assert certs.split(b"not pem at all") == []


def test_unreadable_pem_is_a_value_error(ca: certs.Issued) -> None:
    torn = ca.cert[:200] + ca.cert[-30:]
    with pytest.raises(ValueError, match="not a readable PEM certificate"):
        certs.split(torn)
    with pytest.raises(ValueError, match="not a readable PEM certificate"):
        certs.not_after(b"garbage")
    with pytest.raises(ValueError, match="no PEM private key"):
        certs.private_key(ca.cert)
    with pytest.raises(ValueError, match="not a readable unencrypted PEM private key"):
        certs.key_matches(ca.cert, ca.key.replace(b"M", b"N", 3))
    assert not certs.issued_by(b"garbage", ca.cert)


def test_names_that_do_not_fit_a_certificate(ca: certs.Issued) -> None:
    with pytest.raises(ValueError, match="has 65 characters; a certificate's holds 1 to 64"):
        certs.new_ca("c" * 65, 365)
    with pytest.raises(ValueError, match="'10.0.0.300' is not an IP address"):
        certs.issue(ca, "orders-kafka", validity_days=1, server=True,
                    ip_addresses=["10.0.0.300"], now=NOW)


def _line(shown: str, label: str) -> str:
    lines = shown.splitlines()
    index = next(i for i, line in enumerate(lines) if label in line)
    # The serial number is on the line after its label.
    return lines[index] + lines[index + 1]
