"""The broker's side of SASL (Kafka's SaslServerAuthenticator): one session per connection.

Until a client has authenticated, only ApiVersions, SaslHandshake and then SaslAuthenticate
are accepted; anything else closes the connection, as Kafka does. SaslHandshake v1 is
followed by SaslAuthenticate requests carrying the tokens; after a v0 handshake the tokens
come as bare size-prefixed frames (`raw_tokens`). A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed.

PLAIN checks the listener's JAAS users (`user_<name>="<password>"`); SCRAM checks the
credentials in the metadata log. With `connections.max.reauth.ms` (KIP-368) a session lasts
that long: the client re-authenticates on the same connection, as the same principal, or the
connection is closed at its first request after the session expired.
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from moldau.broker.security.principal import USER
from moldau.security.jaas import single_module
from moldau.security.scram import (
    ScramCredential,
    ScramError,
    attributes,
    nonce,
    saslname_decode,
    server_signature,
    verify_client_proof,
)

if TYPE_CHECKING:
    from moldau.broker.config import BrokerConfig

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# (user, mechanism) -> the stored credential, or None.
CredentialLookup = Callable[[str, str], ScramCredential | None]


class AuthenticationFailed(Exception):
    """The client's credentials were refused; the message is sent to it."""


class IllegalSaslState(Exception):
    """A request out of the SASL sequence."""


class PlainServer:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: Invalid SASL/PLAIN response: "
                                       "expected 3 tokens")
        authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        expected = self.users.get(user)
        if expected is None or not _same(expected, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.user = user
        return b""


def _same(left: str, right: str) -> bool:
    return hmac.compare_digest(left.encode(), right.encode())


class ScramServer:
    """Two steps: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.user: str | None = None
        self._pending: str | None = None
        self._first_state: tuple[str, str, str, ScramCredential] | None = None

    def _invalid(self) -> AuthenticationFailed:
        return AuthenticationFailed("Authentication failed during authentication due to "
                                    "invalid credentials with SASL mechanism "
                                    f"{self.mechanism}")

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
            if self._first_state is None:
                return self._first(text)
            return self._final(text)
        except (ScramError, UnicodeDecodeError, ValueError):
            raise self._invalid() from None

    def _first(self, text: str) -> bytes:
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if gs2 not in ("n", "y") or not sep or not sep2:
            raise ScramError("Invalid SCRAM client first message")
        fields = attributes(bare)
        user = saslname_decode(fields.get("n", ""))
        if authzid and authzid != f"a={user}":
            raise ScramError("Authorization id differs from the user name")
        credential = self.lookup(user, self.mechanism)
        if credential is None or not fields.get("r"):
            raise ScramError("Unknown user")
        combined = fields["r"] + nonce()
        server_first = (f"r={combined},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._first_state = (user, bare, server_first, credential)
        self._pending = combined
        return server_first.encode()

    def _final(self, text: str) -> bytes:
        assert self._first_state is not None
        user, first_bare, server_first, credential = self._first_state
        without_proof, _, proof_part = text.rpartition(",p=")
        fields = attributes(without_proof)
        if fields.get("r") != self._pending or not proof_part:
            raise ScramError("Invalid nonce")
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        if not verify_client_proof(self.mechanism, credential, auth_message,
                                   base64.b64decode(proof_part)):
            raise ScramError("Invalid client proof")
        self.user = user
        signature = server_signature(self.mechanism, credential.server_key, auth_message)
        return f"v={base64.b64encode(signature).decode()}".encode()


class Stage(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    DONE = "done"


class SaslSession:
    def __init__(self, mechanisms: list[str], plain_users: dict[str, str],
                 lookup: CredentialLookup, reauth_ms: int,
                 max_receive_bytes: int = 524288) -> None:
        self.mechanisms = mechanisms
        # sasl.server.max.receive.size: the largest frame a client may send before it has
        # authenticated (a bound on what an unauthenticated client makes the broker read).
        self.max_receive_bytes = max_receive_bytes
        self.plain_users = plain_users
        self.lookup = lookup
        self.reauth_ms = reauth_ms
        self.stage = Stage.HANDSHAKE
        self.raw_tokens = False
        self.principal: str | None = None  # set once authenticated
        self.expires_at: float | None = None
        self._server: PlainServer | ScramServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def permits(self, api_key: int) -> bool:
        """Whether a request may come now (re-authentication starts with a handshake)."""
        if self.stage is Stage.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE
        if self.authenticated:
            return not self.expired() or api_key == SASL_HANDSHAKE
        return api_key in (API_VERSIONS, SASL_HANDSHAKE)

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange; False when the mechanism is not enabled on this listener."""
        if self.stage is not Stage.HANDSHAKE and self.stage is not Stage.DONE:
            raise IllegalSaslState("Unexpected handshake request with client mechanism "
                                   f"{mechanism}")
        if mechanism not in self.mechanisms:
            return False
        self._server = (PlainServer(self.plain_users) if mechanism == "PLAIN"
                        else ScramServer(mechanism, self.lookup))
        self.stage = Stage.AUTHENTICATE
        self.raw_tokens = version == 0
        return True

    def authenticate(self, token: bytes) -> bytes:
        """One token of the exchange; the reply. Raises AuthenticationFailed."""
        if self.stage is not Stage.AUTHENTICATE or self._server is None:
            raise IllegalSaslState("Unexpected SaslAuthenticate request before a handshake")
        reply = self._server.step(token)
        user = self._server.user
        if user is not None:
            principal = f"{USER}:{user}"
            if self.principal is not None and principal != self.principal:
                raise AuthenticationFailed("Cannot change principals during "
                                           f"re-authentication from {self.principal}: "
                                           f"{principal}")
            self.principal = principal
            self.stage = Stage.DONE
            self.raw_tokens = False
            self.expires_at = (time.monotonic() + self.reauth_ms / 1000
                               if self.reauth_ms > 0 else None)
        return reply


def plain_users(jaas: str | None, key: str) -> dict[str, str]:
    """PLAIN's users from a listener's JAAS config: the `user_<name>` options."""
    if not jaas:
        return {}
    module = single_module(jaas, key)
    return {name[len("user_"):]: value for name, value in module.options.items()
            if name.startswith("user_")}


def sasl_sessions(config: BrokerConfig, listener: str,
                  lookup: CredentialLookup) -> Callable[[], SaslSession]:
    """A maker of sessions for one listener, with its mechanisms and users read once."""
    mechanisms = list(config.listener_setting(listener, "sasl.enabled.mechanisms"))
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = (f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
               if config.listener_overrides.get(listener, {}).get("plain.sasl.jaas.config")
               else config.setting_name(listener, "sasl.jaas.config"))
        users = plain_users(config.jaas_config(listener, "PLAIN"), key)
    reauth_ms = int(config.listener_setting(listener, "connections.max.reauth.ms"))
    max_receive = int(config.listener_setting(listener, "sasl.server.max.receive.size"))
    return lambda: SaslSession(mechanisms, users, lookup, reauth_ms, max_receive)
