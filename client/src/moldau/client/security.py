"""How a connection to a broker is secured: TLS from Kafka's ssl.* settings, then SASL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with SaslHandshake v1 and SaslAuthenticate.

The credentials come from `sasl.username`/`sasl.password` or, as Kafka's clients take them,
from `sasl.jaas.config` (`username="..." password="..."`). The broker's own connections to
other brokers use the same code with the inter-broker listener's settings.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from moldau.client.errors import error_for
from moldau.config import ConfigError
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import request_class
from moldau.security.jaas import single_module
from moldau.security.scram import MECHANISMS, ScramClient, ScramError

if TYPE_CHECKING:
    from moldau.security.keystores import Setting, SettingName

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISM_NAMES = ("PLAIN", *MECHANISMS)
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_AUTHENTICATE_VERSION = 1


class Sender(Protocol):
    def send(self, api_key: int, version: int, body: Any) -> Any: ...


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    @classmethod
    def from_settings(cls, protocol: str, setting: Setting, name: SettingName, *,
                      mechanism: str | None = None, jaas: str | None = None
                      ) -> ClientSecurity:
        """From Kafka's settings: `protocol`, ssl.* through `setting`, and for SASL the
        mechanism and a JAAS config (or sasl.username/sasl.password)."""
        protocol = protocol.upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"Invalid value {protocol} for configuration security.protocol: "
                              f"String must be one of: {', '.join(PROTOCOLS)}")
        context = None
        if "SSL" in protocol:
            # Imported here: cryptography is slow to load and only TLS needs it.
            from moldau.security.tls import build_context
            context = build_context(setting, name, server=False)
        if not protocol.startswith("SASL"):
            return cls(protocol, context)
        if mechanism not in MECHANISM_NAMES:
            raise ConfigError(f"Invalid value {mechanism} for configuration "
                              f"{name('sasl.mechanism')}: the SASL mechanisms supported are "
                              f"{', '.join(MECHANISM_NAMES)}")
        username, password = setting("sasl.username"), setting("sasl.password")
        if jaas:
            options = single_module(jaas, name("sasl.jaas.config")).options
            username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise ConfigError(f"Missing configuration {name('sasl.jaas.config')}: SASL needs "
                              "a username and password (or sasl.username and sasl.password)")
        return cls(protocol, context, mechanism, str(username), str(password))

    @property
    def sasl(self) -> bool:
        return self.mechanism is not None

    async def authenticate(self, conn: Sender, node: str) -> None:
        """The SASL exchange on a fresh connection; raises KafkaError when refused."""
        assert self.mechanism is not None
        handshake = await conn.send(SASL_HANDSHAKE, 1, build(
            request_class(SASL_HANDSHAKE, 1), {"mechanism": self.mechanism}))
        if handshake.error_code != ErrorCode.none:
            raise error_for(handshake.error_code, f"{node} does not accept SASL mechanism "
                             f"{self.mechanism}; it accepts "
                             f"{', '.join(handshake.mechanisms) or 'none'}")
        if self.mechanism == "PLAIN":
            await self._step(conn, f"\0{self.username}\0{self.password}".encode())
            return
        scram = ScramClient(self.mechanism, self.username, self.password)
        try:
            server_first = await self._step(conn, scram.first_message())
            server_final = await self._step(conn, scram.final_message(server_first))
            scram.verify_server_final(server_final)
        except ScramError as exc:
            raise error_for(ErrorCode.sasl_authentication_failed,
                             f"SCRAM authentication with {node} failed: {exc}") from None

    async def _step(self, conn: Sender, token: bytes) -> bytes:
        response = await conn.send(SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, build(
            request_class(SASL_AUTHENTICATE, _AUTHENTICATE_VERSION), {"auth_bytes": token}))
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, response.error_message
                             or response.error_code.name)
        return bytes(response.auth_bytes)
