"""Planned certificates in real TLS handshakes over loopback: Python's ssl server presents a
pod's PEM keystore, clients check its host name against the cluster CA bundle; with client
certificates required, the operator's is accepted and one of another CA refused; a renewed CA
bundle serves as trust for certificates issued before and after the renewal."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from moldau.operator import certs, pki
from tests.operator.test_pki import BROKERS, CA_CERT, OPERATOR, inputs
from tests.operator.x509_tools import (
    client_context,
    server_context,
    subject_of,
    talk,
    tls_server,
)

POD = "orders-brokers-0"
HOST = f"{POD}.orders-nodes.kafka.svc.cluster.local"


@pytest.fixture(scope="module")
def planned() -> dict[str, dict[str, bytes]]:
    """The Secrets of a cluster made now (handshakes check dates against the clock)."""
    return pki.plan(inputs(), {})


def write(directory: Path, **files: bytes) -> dict[str, Path]:
    paths = {}
    for name, data in files.items():
        paths[name] = directory / name
        paths[name].write_bytes(data)
    return paths


def test_a_pod_keystore_serves_its_host_names(planned, tmp_path: Path) -> None:
    files = write(tmp_path, keystore=planned[BROKERS][f"{POD}.pem"],
                  bundle=planned[BROKERS]["ca.crt"])
    with tls_server(server_context(files["keystore"])) as server:
        trusting = client_context(files["bundle"])
        assert talk(server.port, trusting, HOST) == b"ok:ping"
        assert talk(server.port, trusting, "orders-bootstrap.kafka.svc") == b"ok:ping"
        # Another pod's name, or a client trusting another CA: refused by the client.
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            talk(server.port, trusting, "orders-brokers-1.orders-nodes.kafka.svc.cluster.local")
        stranger = write(tmp_path, other=pki.plan(inputs(), {})[CA_CERT]["ca.crt"])["other"]
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            talk(server.port, client_context(stranger), HOST)


def test_mutual_tls_accepts_the_operator_and_refuses_another_ca(planned, tmp_path: Path
                                                                ) -> None:
    other = pki.plan(inputs(), {})[OPERATOR]
    files = write(tmp_path, keystore=planned[BROKERS][f"{POD}.pem"],
                  bundle=planned[BROKERS]["ca.crt"],
                  operator_crt=planned[OPERATOR]["operator.crt"],
                  operator_key=planned[OPERATOR]["operator.key"],
                  other_crt=other["operator.crt"], other_key=other["operator.key"])
    with tls_server(server_context(files["keystore"], client_ca=files["bundle"])) as server:
        operator = client_context(files["bundle"], files["operator_crt"], files["operator_key"])
        assert talk(server.port, operator, HOST) == b"ok:ping"
        assert subject_of(server.seen[-1]) == {"organizationName": "io.moldau",
                                               "commonName": "orders-operator"}
        # A node is a client of the others: its keystore is a client certificate too.
        node = client_context(files["bundle"], files["keystore"])
        assert talk(server.port, node, HOST) == b"ok:ping"
        assert subject_of(server.seen[-1])["commonName"] == "orders-kafka"
        stranger = client_context(files["bundle"], files["other_crt"], files["other_key"])
        with pytest.raises((ssl.SSLError, ConnectionError)):
            talk(server.port, stranger, HOST)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            talk(server.port, client_context(files["bundle"]), HOST)
    refusals = [str(seen) for seen in server.seen[-2:]]
    assert "certificate verify failed" in refusals[0], refusals
    assert "peer did not return a certificate" in refusals[1], refusals


def test_a_renewed_bundle_trusts_certificates_from_before_and_after(planned, tmp_path: Path
                                                                    ) -> None:
    renewed = pki.plan(inputs(force_renew=frozenset({pki.CLUSTER_CA})), planned)
    new_ca, old_ca = certs.split(renewed[CA_CERT]["ca.crt"])
    files = write(tmp_path, old_keystore=planned[BROKERS][f"{POD}.pem"],
                  new_keystore=renewed[BROKERS][f"{POD}.pem"], old_ca=old_ca, new_ca=new_ca,
                  bundle=renewed[CA_CERT]["ca.crt"],
                  old_operator=planned[OPERATOR]["operator.key"]
                  + planned[OPERATOR]["operator.crt"])
    assert files["old_keystore"].read_bytes() != files["new_keystore"].read_bytes()
    # A node still serving its certificate from before the renewal, to clients trusting only
    # the new CA certificate; a node with the new one, to clients still trusting the old.
    for keystore, anchor in (("old_keystore", "new_ca"), ("new_keystore", "old_ca"),
                             ("new_keystore", "bundle")):
        context = server_context(files[keystore], client_ca=files[anchor])
        with tls_server(context) as server:
            client = client_context(files[anchor], files["old_operator"])
            assert talk(server.port, client, HOST) == b"ok:ping", (keystore, anchor)
