"""TLS listeners with real clients: kafka-python, confluent-kafka, aiokafka, Kafka's Java
console tools and Moldau's client over SSL, with and without client certificates; refused
handshakes leave the broker serving others."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path

import pytest

from e2e.certs import PASSWORD, CertAuthority, Issued
from e2e.conftest import Broker
from e2e.kafka_dist import ToolResult, kafka_tool, write_properties
from e2e.support import (
    aio_produce,
    ck_consume_all,
    ck_produce,
    free_port,
    kp_consume_all,
    kp_produce,
    make_records,
    run,
    unique,
    wait_until,
)
from e2e.test_metrics import scrape, value

FAILED_AUTH = "kafka_server_socket_server_metrics_failed_authentication_total"


class TlsBed:
    """A CA, a broker with one SSL listener (PKCS12 keystore, PEM truststore) and client
    credentials."""

    def __init__(self, directory: Path, broker_factory, client_auth: str) -> None:
        self.dir = directory
        self.ca = CertAuthority()
        self.ca_file = str(self.ca.write_ca(directory / "ca.pem"))
        self.keystore = directory / "server.p12"
        self.ca.write_pkcs12(self.ca.issue("localhost", server=True), self.keystore)
        port = free_port()
        self.broker: Broker = broker_factory({
            "listeners": f"SSL://127.0.0.1:{port}",
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ca_file, "ssl.client.auth": client_auth,
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L"}, port=port)

    def client_files(self, name: str, *, expired: bool = False,
                     ca: CertAuthority | None = None) -> dict[str, str]:
        issued = (ca or self.ca).issue(name, expired=expired)
        return self.ca.write_client_files(issued, self.dir, name)

    def kp(self, files: dict[str, str] | None = None) -> dict[str, object]:
        config: dict[str, object] = {"security_protocol": "SSL", "ssl_cafile": self.ca_file}
        if files:
            config |= {"ssl_certfile": files["cert"], "ssl_keyfile": files["key"]}
        return config

    def ck(self, files: dict[str, str] | None = None) -> dict[str, object]:
        config: dict[str, object] = {"security.protocol": "SSL",
                                     "ssl.ca.location": self.ca_file}
        if files:
            config |= {"ssl.certificate.location": files["cert"],
                       "ssl.key.location": files["key"]}
        return config

    def java_settings(self, keystore: Path | None = None) -> dict[str, object]:
        """Kafka's client settings (the Java client's, and Moldau's): a PEM truststore, and a
        PEM keystore (KIP-651) when the client shows a certificate."""
        settings: dict[str, object] = {"security.protocol": "SSL",
                                       "ssl.truststore.type": "PEM",
                                       "ssl.truststore.location": self.ca_file}
        if keystore:
            settings |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
        return settings

    def java_config(self, name: str, issued: Issued | None = None,
                    ca: CertAuthority | None = None,
                    extra: dict[str, object] | None = None) -> Path:
        """A --command-config file for Kafka's tools; with `issued`, its PEM keystore (the
        chain ends in `ca`, this bed's CA unless given)."""
        keystore = None if issued is None else (ca or self.ca).write_pem_keystore(
            issued, self.dir / f"{name}.keystore.pem")
        return write_properties(self.dir / f"{name}.properties",
                                self.java_settings(keystore) | (extra or {}))

    def client_context(self, files: dict[str, str] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if files:
            context.load_cert_chain(files["cert"], files["key"])
        return context

    def failed_authentications(self) -> float:
        return value(scrape(self.broker.http_port), FAILED_AUTH, listener="SSL",
                     networkProcessor="0")


@pytest.fixture
def requested(tmp_path, broker_factory) -> TlsBed:
    return TlsBed(tmp_path, broker_factory, "requested")


@pytest.fixture
def required(tmp_path, broker_factory) -> TlsBed:
    return TlsBed(tmp_path, broker_factory, "required")


def test_every_client_produces_and_consumes_over_tls(requested: TlsBed) -> None:
    from aiokafka.helpers import create_ssl_context

    bootstrap = requested.broker.bootstrap
    topic = unique("tls")
    records = make_records(30)
    assert kp_produce(bootstrap, topic, records[:10], **requested.kp()) == list(range(10))
    assert ck_produce(bootstrap, topic, records[10:20], **requested.ck()) == list(range(10, 20))
    offsets = run(aio_produce(bootstrap, topic, records[20:], security_protocol="SSL",
                              ssl_context=create_ssl_context(cafile=requested.ca_file)))
    assert offsets == list(range(20, 30))
    # A fetch over TLS is read from the log and written through the TLS transport.
    assert [r.value for r in kp_consume_all(bootstrap, topic, **requested.kp())] == [
        r.value for r in records]
    assert len(ck_consume_all(bootstrap, topic, **requested.ck())) == 30


def test_client_certificates_and_refused_handshakes(requested: TlsBed) -> None:
    bootstrap = requested.broker.bootstrap
    topic = unique("mtls")
    alice = requested.client_files("Alice")
    assert kp_produce(bootstrap, topic, make_records(5), **requested.kp(alice)) == list(range(5))
    before = requested.failed_authentications()
    # The broker tells each refused client why, in the TLS alert it sends before closing.
    refused = {"certificate expired": requested.client_files("old", expired=True),
               "unknown ca": requested.client_files("mallory", ca=CertAuthority("Other CA"))}
    for alert, files in refused.items():
        with pytest.raises(ssl.SSLError, match=f"alert {alert}"):
            _handshake(requested.broker, requested.client_context(files), then_read=True)
    # Plaintext Kafka spoken to the TLS port: the connection is closed, nothing answered.
    with socket.create_connection(("127.0.0.1", requested.broker.port), timeout=10) as sock:
        sock.sendall(_api_versions_frame())
        assert _read_until_closed(sock) == b""
    wait_until(lambda: requested.failed_authentications() >= before + 3, 20,
               "three failed authentications counted")
    log = requested.broker.tail(400)
    assert log.count("Failed authentication with /127.0.0.1") >= 3
    assert "certificate has expired" in log
    assert "Traceback" not in log
    # Others were never held up: the trusted client goes on.
    assert kp_consume_all(bootstrap, topic, **requested.kp(alice))[-1].offset == 4


def test_required_client_auth_refuses_a_client_without_certificate(required: TlsBed) -> None:
    bed = required
    with pytest.raises(ssl.SSLError, match="alert certificate required"):
        # TLS 1.3 reports the missing certificate on the first read.
        _handshake(bed.broker, bed.client_context(), then_read=True)
    files = bed.client_files("bob")
    assert ck_produce(bed.broker.bootstrap, unique("req"), make_records(3),
                      **bed.ck(files)) == [0, 1, 2]


def test_a_replaced_keystore_is_served_to_the_next_connection(requested: TlsBed) -> None:
    first = _server_certificate(requested)
    renewed = requested.ca.issue("localhost", server=True)
    staging = requested.dir / "renewed.p12"
    requested.ca.write_pkcs12(renewed, staging)
    staging.replace(requested.keystore)
    wait_until(lambda: _server_certificate(requested) != first, 20,
               "the renewed certificate served")
    assert _server_certificate(requested) == renewed.cert.serial_number
    assert kp_produce(requested.broker.bootstrap, unique("renewed"), make_records(2),
                      **requested.kp()) == [0, 1]


def _server_certificate(bed: TlsBed) -> int:
    from cryptography import x509

    with _handshake(bed.broker, bed.client_context()) as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def _handshake(broker: Broker, context: ssl.SSLContext, then_read: bool = False
               ) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    tls = context.wrap_socket(sock, server_hostname="localhost")
    if then_read:
        tls.sendall(_api_versions_frame())
        if not _read_until_closed(tls):
            raise ConnectionError("closed by the broker")
    return tls


def _api_versions_frame() -> bytes:
    client_id = b"probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
        if len(data) >= 4 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
            return data
    raise AssertionError("the connection neither answered nor closed")


def test_moldau_client_with_a_client_certificate(requested: TlsBed) -> None:
    from moldau.client import Admin, Producer

    issued = requested.ca.issue("carol")
    keystore = requested.ca.write_pem_keystore(issued, requested.dir / "carol.pem")
    config = {"bootstrap.servers": requested.broker.bootstrap,
              **requested.java_settings(keystore)}
    topic = unique("moldau-tls")
    with Producer(config) as producer:
        assert producer.send(topic, b"over tls").get(30).offset == 0
    with Admin(config) as admin:
        assert topic in admin.list_topics(timeout=30)


def _client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a real TLS client."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def test_a_client_gone_during_the_handshake_is_no_failed_authentication(
        requested: TlsBed) -> None:
    """A connection closed before or during the handshake is a disconnect, as in Kafka: no
    `Failed authentication` line, nothing counted. Plaintext to the port still is one."""
    broker = requested.broker
    log_lines = lambda: broker.stderr_path.read_text().count("Failed authentication")  # noqa: E731
    before = log_lines()
    hello = _client_hello(requested.client_context())
    for payload in (b"", hello[:40], hello):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.sendall(payload)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(_api_versions_frame())
        _read_until_closed(sock)
    # The plaintext probe came last: once its line is there, the others were handled.
    wait_until(lambda: log_lines() > before, 20, "the plaintext probe's refusal")
    assert log_lines() == before + 1
    _handshake(broker, requested.client_context(), then_read=True).close()


def _java_round_trip(bootstrap: str, topic: str, config: Path, lines: list[str]) -> None:
    """Kafka's console producer writes `lines`, its console consumer reads them back."""
    produced = kafka_tool("kafka-console-producer", "--bootstrap-server", bootstrap,
                          "--topic", topic, "--producer.config", str(config),
                          stdin="".join(f"{line}\n" for line in lines))
    assert "ERROR" not in produced.stdout + produced.stderr, produced.describe()
    consumed = kafka_tool("kafka-console-consumer", "--bootstrap-server", bootstrap,
                          "--topic", topic, "--from-beginning", "--max-messages",
                          str(len(lines)), "--timeout-ms", "30000",
                          "--consumer.config", str(config))
    assert consumed.lines == lines, consumed.describe()


def test_java_console_tools_over_tls(requested: TlsBed) -> None:
    """The Java client trusts the broker through a PEM truststore; what it wrote is what any
    other client reads."""
    topic = unique("java-tls")
    lines = [f"java over tls {i}" for i in range(5)]
    _java_round_trip(requested.broker.bootstrap, topic, requested.java_config("java"), lines)
    assert [r.value.decode() for r in kp_consume_all(requested.broker.bootstrap, topic,
                                                     **requested.kp())] == lines


def test_java_console_tools_with_a_client_certificate(required: TlsBed) -> None:
    """ssl.client.auth=required: the Java client shows a certificate from a PEM keystore."""
    config = required.java_config("dave", required.ca.issue("dave"))
    lines = [f"mutual tls {i}" for i in range(5)]
    _java_round_trip(required.broker.bootstrap, unique("java-mtls"), config, lines)


def _java_with_untrusted_certificate(bed: TlsBed, **settings: object) -> ToolResult:
    """kafka-topics --list with a certificate from a CA the broker does not trust."""
    other = CertAuthority("Other CA")
    untrusted = bed.java_config("mallory", other.issue("mallory"), ca=other,
                                extra={"default.api.timeout.ms": 15000,
                                       "request.timeout.ms": 5000, **settings})
    return kafka_tool("kafka-topics", "--bootstrap-server", bed.broker.bootstrap,
                      "--command-config", str(untrusted), "--list", check=False,
                      timeout=120)


def test_java_client_with_an_untrusted_certificate_is_refused(required: TlsBed) -> None:
    bootstrap = required.broker.bootstrap
    trusted = required.java_config("erin", required.ca.issue("erin"))
    topic = unique("java-refused")
    kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--command-config",
               str(trusted), "--create", "--topic", topic, "--partitions", "1")
    before = required.failed_authentications()
    refused = _java_with_untrusted_certificate(required)
    assert refused.returncode != 0 and topic not in refused.lines, refused.describe()
    wait_until(lambda: required.failed_authentications() > before, 20,
               "the refused handshake counted")
    log = required.broker.tail(400)
    assert "Failed authentication with /127.0.0.1" in log
    assert "SSL handshake failed: self-signed certificate in certificate chain" in log
    assert "Traceback" not in log
    # The broker goes on serving a client it trusts.
    listed = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--command-config",
                        str(trusted), "--list")
    assert topic in listed.lines


@pytest.mark.parametrize(("protocol", "failure"), [
    pytest.param("TLSv1.2", "SslAuthenticationException: SSL handshake failed", id="TLSv1.2"),
    # In TLS 1.3 the client's side of the handshake is over before the broker checks its
    # certificate: Kafka's client reports the alert as a failed post-handshake message, as it
    # does from Apache Kafka's broker.
    pytest.param("TLSv1.3",
                 "SslAuthenticationException: Failed to process post-handshake messages",
                 id="TLSv1.3")])
def test_java_client_is_told_why_its_certificate_was_refused(
        required: TlsBed, protocol: str, failure: str) -> None:
    """The broker sends the TLS alert before closing: the Java client fails at once with
    SslAuthenticationException instead of taking the closed connection for a network fault
    and retrying until its timeout."""
    refused = _java_with_untrusted_certificate(required, **{"ssl.enabled.protocols": protocol})
    assert failure in refused.stderr, refused.describe()
    assert "Received fatal alert: unknown_ca" in refused.stderr, refused.describe()
    assert "terminated during authentication" not in refused.stderr, refused.describe()
