"""SASL listeners: PLAIN users from the JAAS config, SCRAM users added with Kafka's own
kafka-configs, real clients over SASL_SSL, and Kafka's answers to wrong passwords and to
requests out of sequence, on the wire."""

from __future__ import annotations

import random
import struct
import time
from dataclasses import replace
from pathlib import Path

import pytest

from e2e.certs import CertAuthority
from e2e.conftest import _ACTIVE, Broker
from e2e.kafka_dist import (
    add_scram_user,
    ensure_artifacts,
    kafka_tool,
    sasl_client_settings,
    write_properties,
)
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
from e2e.test_client_cli import moldau, ok, one_line_error
from e2e.test_metrics import scrape, value
from e2e.wire import Closed, Conn, api_versions_request, nullable_bytes, request, string

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
REAUTH_MS = 1500
METADATA_V1_ALL_TOPICS = b"\xff\xff\xff\xff"


class SaslBed:
    def __init__(self, directory: Path, broker_factory) -> None:
        ca = CertAuthority()
        keystore = ca.write_pem_keystore(ca.issue("localhost", server=True),
                                         directory / "server.pem")
        self.ca_file = str(ca.write_ca(directory / "ca.pem"))
        self.dir = directory
        port, self.sasl_plaintext, self.plaintext = free_port(), free_port(), free_port()
        self.reauth = free_port()
        self.broker: Broker = broker_factory({
            "listeners": f"SASL_SSL://127.0.0.1:{port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_plaintext},"
                         f"PLAINTEXT://127.0.0.1:{self.plaintext},"
                         f"REAUTH://127.0.0.1:{self.reauth}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "REAUTH:SASL_PLAINTEXT",
            "listener.name.reauth.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.reauth.connections.max.reauth.ms": REAUTH_MS,
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}, port=port)
        self.bootstrap = self.broker.bootstrap

    def add_scram_user(self, user: str, password: str, mechanism: str) -> str:
        return add_scram_user(f"127.0.0.1:{self.plaintext}", user, password, mechanism)

    def kp(self, mechanism: str, user: str, password: str) -> dict[str, object]:
        return {"security_protocol": "SASL_SSL", "ssl_cafile": self.ca_file,
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}

    def ck(self, mechanism: str, user: str, password: str) -> dict[str, object]:
        return {"security.protocol": "SASL_SSL", "ssl.ca.location": self.ca_file,
                "sasl.mechanisms": mechanism, "sasl.username": user,
                "sasl.password": password}

    def failed(self, listener: str) -> float:
        return value(scrape(self.broker.http_port),
                     "kafka_server_socket_server_metrics_failed_authentication_total",
                     listener=listener, networkProcessor="0")


@pytest.fixture(scope="module")
def bed(tmp_path_factory, request) -> SaslBed:
    made: list[Broker] = []

    def make(overrides, port):
        instance = Broker(tmp_path_factory.mktemp("sasl-broker"), overrides, port=port)
        made.append(instance)
        _ACTIVE.append(instance)
        return instance.start()

    ensure_artifacts()
    bed = SaslBed(tmp_path_factory.mktemp("sasl"), make)
    request.addfinalizer(lambda: [instance.close() for instance in made])
    for user, password in (("scram256", "pw-256"), ("scram512", "pw-512")):
        mechanism = SCRAM[0] if user.endswith("256") else SCRAM[1]
        assert bed.add_scram_user(user, password, mechanism) == (
            f"Completed updating config for user {user}.")
    return bed


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", "scram256", "pw-256"),
    ("SCRAM-SHA-512", "scram512", "pw-512")])
def test_python_clients_over_sasl_ssl(bed: SaslBed, mechanism, user, password) -> None:
    from aiokafka.helpers import create_ssl_context

    topic = unique(f"sasl-{mechanism.lower()}")
    records = make_records(9)
    kp = bed.kp(mechanism, user, password)
    assert kp_produce(bed.bootstrap, topic, records[:3], **kp) == [0, 1, 2]
    assert ck_produce(bed.bootstrap, topic, records[3:6],
                      **bed.ck(mechanism, user, password)) == [3, 4, 5]
    assert run(aio_produce(bed.bootstrap, topic, records[6:], security_protocol="SASL_SSL",
                           ssl_context=create_ssl_context(cafile=bed.ca_file),
                           sasl_mechanism=mechanism, sasl_plain_username=user,
                           sasl_plain_password=password)) == [6, 7, 8]
    assert len(kp_consume_all(bed.bootstrap, topic, **kp)) == 9
    assert len(ck_consume_all(bed.bootstrap, topic,
                              **bed.ck(mechanism, user, password))) == 9


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java_client_over_sasl_ssl(bed: SaslBed, mechanism) -> None:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else (
        "scram512", "pw-512")
    config = write_properties(bed.dir / f"java-{mechanism}.properties", {
        "security.protocol": "SASL_SSL", **sasl_client_settings(mechanism, user, password),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": bed.ca_file})
    topic = unique("java-sasl")
    kafka_tool("kafka-topics", "--bootstrap-server", bed.bootstrap, "--command-config",
               str(config), "--create", "--topic", topic, "--partitions", "2")
    listed = kafka_tool("kafka-topics", "--bootstrap-server", bed.bootstrap,
                        "--command-config", str(config), "--list")
    assert topic in listed.lines


def test_wrong_passwords_are_refused_as_kafka_refuses_them(bed: SaslBed) -> None:
    before = bed.failed("SASL_PLAINTEXT")
    expected = {
        "PLAIN": "Authentication failed: Invalid username or password",
        "SCRAM-SHA-256": "Authentication failed during authentication due to invalid "
                         "credentials with SASL mechanism SCRAM-SHA-256",
    }
    for mechanism, message in expected.items():
        with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
            assert _handshake(conn, mechanism) == 0
            first = (b"\0alice\0wrong" if mechanism == "PLAIN"
                     else b"n,,n=scram256,r=abcdefghijklmnop")
            error, text, reply = _authenticate(conn, first)
            if mechanism != "PLAIN":  # the server's first message, then a wrong proof
                assert error == 0 and reply.startswith(b"r=abcdefghijklmnop")
                nonce = reply.split(b",")[0][2:]
                error, text, _ = _authenticate(conn, b"c=biws,r=" + nonce + b",p=AAAA")
            assert (error, text) == (58, message)
            assert conn.wait_closed()
    wait_until(lambda: bed.failed("SASL_PLAINTEXT") >= before + 2, 20, "failures counted")
    log = bed.broker.tail(300)
    assert "Failed authentication with /127.0.0.1" in log and "Traceback" not in log
    # Meanwhile a client with the right password goes on.
    assert kp_produce(bed.bootstrap, unique("after"), make_records(1),
                      **bed.kp("PLAIN", "alice", "alice-secret")) == [0]


def test_only_api_versions_and_handshake_before_authentication(bed: SaslBed) -> None:
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
        conn.send(api_versions_request(0, 1))
        assert conn.recv_frame()  # answered
        conn.send(request(3, 1, 2, b"\xff\xff\xff\xff", flexible=False))  # Metadata
        assert conn.wait_closed()
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
        assert _handshake(conn, "GSSAPI") == 33  # UNSUPPORTED_SASL_MECHANISM
        assert conn.wait_closed()
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:  # v0: bare tokens
        conn.send(request(SASL_HANDSHAKE, 0, 1, string("PLAIN"), flexible=False))
        conn.recv_frame()
        conn.send(nullable_bytes(b"\0admin\0admin-secret"))
        assert conn.recv_frame() == b""
        conn.send(request(3, 1, 2, b"\xff\xff\xff\xff", flexible=False))
        assert conn.recv_frame()  # authenticated: Metadata answered


def test_large_frames_before_authentication_close_the_connection(bed: SaslBed) -> None:
    """sasl.server.max.receive.size (Kafka's 524288): before it has authenticated a client
    cannot make the broker read a larger frame; afterwards socket.request.max.bytes applies."""
    limit = 524288
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
        conn.send(struct.pack(">i", limit + 1) + b"\0" * 1024)
        assert conn.wait_closed()
    wait_until(lambda: f"larger than sasl.server.max.receive.size ({limit})"
               in bed.broker.tail(200), 10, "the refusal logged")
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
        assert _handshake(conn, "PLAIN") == 0
        conn.send(struct.pack(">i", limit + 1) + b"\0" * 1024)  # also mid-exchange
        assert conn.wait_closed()
    # A token just under the limit is read, and refused for what it says.
    with Conn(f"127.0.0.1:{bed.sasl_plaintext}") as conn:
        assert _handshake(conn, "PLAIN") == 0
        error, _, _ = _authenticate(conn, b"\0" * (limit - 100))
        assert error == 58  # SASL_AUTHENTICATION_FAILED
    # Authenticated clients may send larger requests.
    big = [replace(make_records(1)[0], value=random.Random(3).randbytes(700_000))]
    assert kp_produce(f"127.0.0.1:{bed.sasl_plaintext}", unique("big"), big,
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username="alice", sasl_plain_password="alice-secret") == [0]


def test_garbage_sasl_frames_keep_the_broker_up(bed: SaslBed) -> None:
    rng = random.Random(19)
    for index in range(60):
        with Conn(f"127.0.0.1:{bed.sasl_plaintext}", timeout=5) as conn:
            try:
                if index % 2:
                    _handshake(conn, rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]))
                blob = rng.randbytes(rng.randrange(0, 300))
                kind = index % 3
                if kind == 0:
                    conn.send(request(SASL_AUTHENTICATE, 1, 3, nullable_bytes(blob),
                                      flexible=False))
                elif kind == 1:
                    conn.send(nullable_bytes(blob))
                else:
                    conn.send(blob)
                conn.wait_closed(timeout=2)
            except (Closed, TimeoutError, OSError):
                pass
    assert bed.broker.alive
    assert "Traceback" not in bed.broker.tail(2000)
    assert kp_produce(bed.bootstrap, unique("fuzzed"), make_records(1),
                      **bed.kp("SCRAM-SHA-256", "scram256", "pw-256")) == [0]


def test_sessions_expire_unless_the_client_reauthenticates(bed: SaslBed) -> None:
    """KIP-368: the session lifetime is announced; a request after it closes the connection,
    a re-authentication as the same user extends it, as another user is refused."""
    def metadata(conn: Conn) -> None:
        conn.send(request(3, 1, 9, METADATA_V1_ALL_TOPICS, flexible=False))

    def login(conn: Conn, user: str, password: str) -> tuple[int, str | None, int]:
        assert _handshake(conn, "PLAIN") == 0
        conn.send(request(SASL_AUTHENTICATE, 1, 2,
                          nullable_bytes(f"\0{user}\0{password}".encode()), flexible=False))
        _, reader = conn.recv_response(header_v1=False)
        error, message = reader.int16(), reader.string()
        reader.nullable_bytes()
        return error, message, reader.int64()

    address = f"127.0.0.1:{bed.reauth}"
    with Conn(address) as conn:
        assert login(conn, "alice", "alice-secret") == (0, None, REAUTH_MS)
        metadata(conn)
        assert conn.recv_frame()
        time.sleep(REAUTH_MS / 1000 + 0.5)
        metadata(conn)
        assert conn.wait_closed()
    with Conn(address) as conn:
        login(conn, "alice", "alice-secret")
        time.sleep(REAUTH_MS / 1000 + 0.5)
        assert login(conn, "alice", "alice-secret")[0] == 0
        metadata(conn)
        assert conn.recv_frame()
        error, message, _ = login(conn, "admin", "admin-secret")
        assert error == 58 and "Cannot change principals during re-authentication" in message
        assert conn.wait_closed()


def _handshake(conn: Conn, mechanism: str) -> int:
    conn.send(request(SASL_HANDSHAKE, 1, 1, string(mechanism), flexible=False))
    _, reader = conn.recv_response(header_v1=False)
    return reader.int16()


def _authenticate(conn: Conn, token: bytes) -> tuple[int, str | None, bytes]:
    conn.send(request(SASL_AUTHENTICATE, 1, 2, nullable_bytes(token), flexible=False))
    _, reader = conn.recv_response(header_v1=False)
    error, message = reader.int16(), reader.string()
    return error, message, reader.nullable_bytes() or b""



@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "scram512", "pw-512")])
def test_moldau_client_and_cli_over_sasl_ssl(bed: SaslBed, mechanism, user, password) -> None:
    from moldau.client import Consumer, Producer

    config = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_SSL",
              "ssl.ca.location": bed.ca_file, "sasl.mechanism": mechanism,
              "sasl.username": user, "sasl.password": password}
    topic = unique("moldau-sasl")
    with Producer(config) as producer:
        assert producer.send(topic, b"from the client").get(30).offset == 0
    properties = bed.dir / f"moldau-{mechanism}.properties"
    properties.write_text(
        f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={bed.ca_file}\nsasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=x.LoginModule required username=\"{user}\" "
        f"password=\"{password}\";\n")
    ok(moldau("produce", "--bootstrap-server", bed.bootstrap, "--topic", topic,
              "--producer.config", str(properties), stdin=b"from the cli\n"))
    with Consumer({**config, "group.id": unique("g"), "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        values: list[bytes] = []
        wait_until(lambda: values.extend(r.value for r in consumer.poll(0.5)) or len(values) >= 2,
                   30, "both records consumed")
    assert values == [b"from the client", b"from the cli"]


def test_moldau_cli_with_a_wrong_password_is_a_one_line_error(bed: SaslBed) -> None:
    properties = bed.dir / "wrong.properties"
    properties.write_text(
        f"security.protocol=SASL_SSL\nssl.ca.location={bed.ca_file}\n"
        "sasl.mechanism=SCRAM-SHA-256\nsasl.username=scram256\nsasl.password=nope\n")
    line = one_line_error(moldau("topics", "list", "--bootstrap-server", bed.bootstrap,
                                 "--command-config", str(properties)))
    assert "Authentication failed during authentication due to invalid credentials with " \
           "SASL mechanism SCRAM-SHA-256" in line
