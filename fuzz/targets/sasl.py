"""Target `sasl`: the tokens a client sends while authenticating, through the broker's SASL
session (security/sasl.py) as a connection drives it: a handshake naming a mechanism, then
SaslAuthenticate tokens (or, after a v0 handshake, bare frames) one after another.

An input is one mode byte, then up to four tokens, each a 16-bit big-endian length and that
many bytes:

    bits 0-1  the mechanism named in the handshake: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or
              one the listener does not enable
    bit 2     a v0 handshake (bare tokens) rather than v1

The listener enables PLAIN and both SCRAM mechanisms for the users `alice` and `bob` (whose
SCRAM credentials are stored), the users of the capture's clients. The server's SCRAM nonce
is fixed (SERVER_NONCE) while an input runs, so an input replays the same way and stored
client-final messages can carry the nonce the exchange expects.

Contract: a session raises nothing but AuthenticationFailed (answered with
SASL_AUTHENTICATION_FAILED, then the connection closes) or IllegalSaslState (the same, for a
token out of sequence).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

from moldau.broker.security import sasl as broker_sasl
from moldau.broker.security.sasl import AuthenticationFailed, IllegalSaslState, SaslSession
from moldau.security.scram import (
    MECHANISMS,
    ScramCredential,
    credential_from_salted,
    salted_password,
)

MECHANISM_NAMES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
RAW_TOKENS = 0x04
MAX_TOKENS = 4
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SERVER_NONCE = "fuzzservernonce"
_SALT = b"fuzz-salt-0123456789abcdef"
_ITERATIONS = 4096
_LENGTH = struct.Struct(">H")

_CREDENTIALS = {
    (user, mechanism): credential_from_salted(
        mechanism, salted_password(mechanism, password, _SALT, _ITERATIONS), _SALT,
        _ITERATIONS)
    for user, password in USERS.items() for mechanism in MECHANISMS}


def _lookup(user: str, mechanism: str) -> ScramCredential | None:
    return _CREDENTIALS.get((user, mechanism))


def tokens(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    pos = 0
    while pos + _LENGTH.size <= len(data) and len(out) < MAX_TOKENS:
        (size,) = _LENGTH.unpack_from(data, pos)
        pos += _LENGTH.size
        out.append(data[pos:pos + size])
        pos += size
    return out


def encode(mode: int, parts: list[bytes]) -> bytes:
    """An input for this target (the corpus writer builds seeds with it)."""
    return bytes([mode]) + b"".join(_LENGTH.pack(len(part)) + part for part in parts)


@contextmanager
def _fixed_server_nonce() -> Iterator[None]:
    real = broker_sasl.nonce
    broker_sasl.nonce = lambda: SERVER_NONCE
    try:
        yield
    finally:
        broker_sasl.nonce = real


def check(data: bytes) -> None:
    if not data:
        return
    mode = data[0]
    session = SaslSession(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], USERS,
                          _lookup, reauth_ms=0)
    with _fixed_server_nonce():
        try:
            mechanism = MECHANISM_NAMES[mode & 0x03]
            if not session.handshake(mechanism, 0 if mode & RAW_TOKENS else 1):
                return  # UNSUPPORTED_SASL_MECHANISM is answered; the exchange never starts
            for token in tokens(data[1:]):
                session.authenticate(token)
        except (AuthenticationFailed, IllegalSaslState):
            return
