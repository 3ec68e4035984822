"""Send the TLS alert that says why a handshake failed before asyncio closes the connection.

When OpenSSL fails a handshake (an untrusted or expired certificate, no certificate where one
is required) it writes a fatal alert (`unknown_ca`, `certificate_expired`, ...) into the
outgoing memory BIO of asyncio's SSLProtocol, which then force-closes the socket without
writing that BIO out (CPython gh-98078: so in 3.11.7, 3.12.1 and 3.13.0, and in every
release before the upstream fix). The peer only sees the connection closed: Kafka's Java
client takes that for a network fault and retries until its timeout, where with the alert it
fails at once with SslAuthenticationException, as it does against Kafka's brokers.

`install()` wraps SSLProtocol's private `_fatal_error` so that on an `ssl.SSLError` what is
left in the BIO goes out first. Only that error path changes, never the data path. Where
CPython flushes the BIO itself before `_fatal_error` (its fix), nothing is left by then and
the wrapper writes nothing; where SSLProtocol has no `_fatal_error`, asyncio is left alone.
"""

from __future__ import annotations

import ssl
from asyncio import sslproto
from typing import Any

_MARK = "_moldau_sends_alerts"


def install() -> None:
    """Every asyncio TLS connection of this process sends its fatal alert (idempotent)."""
    protocol_class: Any = sslproto.SSLProtocol
    fatal_error = getattr(protocol_class, "_fatal_error", None)
    if fatal_error is None or getattr(fatal_error, _MARK, False):
        return

    def _fatal_error(self: Any, exc: BaseException, *args: Any, **kwargs: Any) -> None:
        if isinstance(exc, ssl.SSLError):
            _write_pending(self)
        fatal_error(self, exc, *args, **kwargs)

    setattr(_fatal_error, _MARK, True)
    protocol_class._fatal_error = _fatal_error


def _write_pending(protocol: Any) -> None:
    """What OpenSSL left for the peer in the protocol's outgoing BIO, to the socket (a few
    bytes: the socket takes them at once, before the force-close drops what it buffers)."""
    outgoing = getattr(protocol, "_outgoing", None)
    transport = getattr(protocol, "_transport", None)
    if not isinstance(outgoing, ssl.MemoryBIO) or transport is None \
            or transport.is_closing():
        return
    data = outgoing.read()
    if data:
        transport.write(data)
