"""Checks of certificates by others' code: the `openssl` command, and real TLS handshakes
between Python's ssl server and client over loopback sockets."""

from __future__ import annotations

import socket
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


def openssl(*args: str, files: dict[str, bytes] | None = None) -> subprocess.CompletedProcess:
    """Run `openssl args...`; `{name}` in an argument is replaced by the path of a file
    holding files[name]."""
    with tempfile.TemporaryDirectory() as directory:
        paths = {}
        for name, data in (files or {}).items():
            paths[name] = Path(directory) / f"{name}.pem"
            paths[name].write_bytes(data)
        argv = ["openssl", *(arg.format(**{k: str(v) for k, v in paths.items()})
                             for arg in args)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def verify(ca_pem: bytes, cert_pem: bytes, at: datetime | None = None,
           purpose: str | None = None) -> tuple[bool, str]:
    """`openssl verify -CAfile`: whether `cert_pem` chains to a certificate of `ca_pem` (at
    the time `at`, now when None), and what openssl said."""
    args = ["verify", "-CAfile", "{ca}"]
    if at is not None:
        args += ["-attime", str(int(at.timestamp()))]
    if purpose:
        args += ["-purpose", purpose]
    done = openssl(*args, "{cert}", files={"ca": ca_pem, "cert": cert_pem})
    output = done.stdout + done.stderr
    return done.returncode == 0 and ": OK" in done.stdout, output


def text(cert_pem: bytes) -> str:
    """`openssl x509 -text` of a certificate."""
    done = openssl("x509", "-noout", "-text", "-in", "{cert}", files={"cert": cert_pem})
    assert done.returncode == 0, done.stderr
    return done.stdout


@dataclass
class TlsServer:
    port: int
    # Per connection: the peer's certificate (a dict, empty without one) or the error.
    seen: list[dict | Exception] = field(default_factory=list)


@contextmanager
def tls_server(context: ssl.SSLContext) -> Iterator[TlsServer]:
    """A TLS server on loopback that answers `ok:<what it read>` on each connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    server = TlsServer(listener.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    data = tls.recv(64)
                    tls.sendall(b"ok:" + data)
                    server.seen.append(tls.getpeercert() or {})
            except (ssl.SSLError, OSError) as exc:
                server.seen.append(exc)
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def talk(port: int, context: ssl.SSLContext, hostname: str) -> bytes:
    """Connect, handshake (the client checks `hostname`), send `ping`, return the answer;
    ConnectionError when the server closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            context.wrap_socket(sock, server_hostname=hostname) as tls:
        tls.sendall(b"ping")
        answer = tls.recv(64)
    if not answer:
        raise ConnectionError("closed by the server without an answer")
    return answer


def server_context(keystore: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server presenting the PEM keystore (key, then chain); requiring client
    certificates from `client_ca` when given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(keystore)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca)
    return context


def client_context(ca_bundle: Path, cert: Path | None = None,
                   key: Path | None = None) -> ssl.SSLContext:
    """A client trusting `ca_bundle` and checking host names; showing `cert` when given."""
    context = ssl.create_default_context(cafile=ca_bundle)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def subject_of(peer: dict) -> dict[str, str]:
    """getpeercert()'s subject as {attribute: value}."""
    return {name: value for rdn in peer["subject"] for name, value in rdn}
