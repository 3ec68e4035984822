"""A TLS handshake asyncio refuses ends with the alert that says why, on either side: a
listener refusing a client's certificate, and the broker's own connection refusing a
server's. The peer is a blocking `ssl` socket, which reports the alert it received."""

from __future__ import annotations

import asyncio
import socket
import ssl
from asyncio import sslproto
from pathlib import Path

import pytest

from e2e.certs import CertAuthority
from moldau.broker.network import tls_alerts

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@pytest.fixture
def alerts(monkeypatch: pytest.MonkeyPatch) -> None:
    # For this test only: afterwards pytest puts asyncio's own method back.
    monkeypatch.setattr(sslproto.SSLProtocol, "_fatal_error",
                        sslproto.SSLProtocol._fatal_error)
    tls_alerts.install()


class Certs:
    def __init__(self, directory: Path) -> None:
        self.ca = CertAuthority()
        self.ca_file = self.ca.write_ca(directory / "ca.pem")
        self.server = self.ca.write_pem_keystore(self.ca.issue("localhost", server=True),
                                                 directory / "server.pem")
        other = CertAuthority("Other CA")
        self.untrusted = other.write_pem_keystore(other.issue("mallory", server=True),
                                                  directory / "mallory.pem")

    def context(self, purpose: int, keystore: Path, version: ssl.TLSVersion
                ) -> ssl.SSLContext:
        """Trusts only this CA, requires the peer's certificate, shows `keystore`."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose == ssl.Purpose.CLIENT_AUTH
                                 else ssl.PROTOCOL_TLS_CLIENT)
        context.load_cert_chain(keystore)
        context.load_verify_locations(self.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
        context.maximum_version = version
        return context


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("tls-alerts"))


def _blocking_peer(sock: socket.socket, context: ssl.SSLContext, server_side: bool) -> str:
    """The peer's handshake and first read; what it was told, or 'no alert'."""
    try:
        with context.wrap_socket(sock, server_side=server_side,
                                 server_hostname=None if server_side else "localhost") as tls:
            tls.sendall(b"hello")
            tls.recv(16)  # TLS 1.3 delivers a refused client certificate's alert here
    except ssl.SSLError as exc:
        if "ALERT" in exc.reason:
            return exc.reason
        return f"no alert ({exc.reason})"
    except OSError as exc:
        return f"no alert ({type(exc).__name__})"
    return "no alert"


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_a_listener_refusing_a_client_certificate_sends_the_alert(
        alerts: None, certs: Certs, version: ssl.TLSVersion) -> None:
    refused: list[BaseException] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:  # as the broker's listeners do
            await writer.start_tls(certs.context(ssl.Purpose.CLIENT_AUTH, certs.server,
                                                 version))
        except ssl.SSLError as exc:
            refused.append(exc)
        writer.close()

    async def scenario() -> str:
        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        client = certs.context(ssl.Purpose.SERVER_AUTH, certs.untrusted, version)
        told = await asyncio.to_thread(_blocking_peer, sock, client, False)
        server.close()
        return told

    assert asyncio.run(scenario()) == "TLSV1_ALERT_UNKNOWN_CA"
    assert isinstance(refused[0], ssl.SSLCertVerificationError)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_an_outgoing_connection_refusing_a_server_certificate_sends_the_alert(
        alerts: None, certs: Certs, version: ssl.TLSVersion) -> None:
    async def scenario() -> str:
        listening = socket.create_server(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        server = certs.context(ssl.Purpose.CLIENT_AUTH, certs.untrusted, version)
        peer = asyncio.create_task(asyncio.to_thread(
            lambda: _blocking_peer(listening.accept()[0], server, True)))
        with pytest.raises(ssl.SSLCertVerificationError):
            # As the broker connects to controllers and other brokers.
            await asyncio.open_connection("127.0.0.1", port, server_hostname="localhost",
                                          ssl=certs.context(ssl.Purpose.SERVER_AUTH,
                                                            certs.server, version))
        told = await peer
        listening.close()
        return told

    assert asyncio.run(scenario()) == "TLSV1_ALERT_UNKNOWN_CA"


def test_installing_twice_wraps_once(alerts: None) -> None:
    installed = sslproto.SSLProtocol._fatal_error
    tls_alerts.install()
    assert sslproto.SSLProtocol._fatal_error is installed
