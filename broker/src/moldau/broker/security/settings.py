"""The security settings, with Kafka's names and defaults, and their per-listener overrides.

Kafka lets most of them be set for one listener with `listener.name.<listener>.<key>` (and
the JAAS config per mechanism: `listener.name.<listener>.<mechanism>.sasl.jaas.config`);
a listener-level value wins over the global one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from moldau.config import ConfigError, ConfigKey, ConfigType, at_least, one_of

T = ConfigType
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_PROTOCOL_MAP = ["SASL_SSL:SASL_SSL", "PLAINTEXT:PLAINTEXT", "SSL:SSL",
                        "SASL_PLAINTEXT:SASL_PLAINTEXT"]

SECURITY_KEYS = [
    ConfigKey("security.inter.broker.protocol", T.STRING, "PLAINTEXT", "Protocol between "
              "brokers, when inter.broker.listener.name is not set", one_of(*PROTOCOLS)),
    ConfigKey("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"], "SASL mechanisms of SASL "
              "listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ConfigKey("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", "SASL mechanism "
              "brokers use with each other"),
    ConfigKey("sasl.mechanism.controller.protocol", T.STRING, "GSSAPI", "SASL mechanism "
              "used towards the controllers"),
    ConfigKey("sasl.jaas.config", T.PASSWORD, None, "JAAS login module and options (PLAIN "
              "users as user_<name>=\"<password>\"; username/password this broker sends)",
              sensitive=True),
    ConfigKey("sasl.server.max.receive.size", T.INT, 524288, "Largest frame a client may "
              "send before it has authenticated; a larger one closes the connection",
              at_least(1)),
    ConfigKey("connections.max.reauth.ms", T.LONG, 0, "Longest SASL session before the "
              "client must re-authenticate (KIP-368); 0 for no limit", at_least(0)),
    ConfigKey("ssl.keystore.type", T.STRING, "JKS", "PKCS12 or PEM (JKS is not read)"),
    ConfigKey("ssl.keystore.location", T.STRING, None, "Keystore file; re-read when it "
              "changes on disk"),
    ConfigKey("ssl.keystore.password", T.PASSWORD, None, "Keystore password", sensitive=True),
    ConfigKey("ssl.key.password", T.PASSWORD, None, "Private key password", sensitive=True),
    ConfigKey("ssl.keystore.certificate.chain", T.PASSWORD, None, "PEM certificate chain "
              "given inline (KIP-651)", sensitive=True),
    ConfigKey("ssl.keystore.key", T.PASSWORD, None, "PEM private key given inline (KIP-651)",
              sensitive=True),
    ConfigKey("ssl.truststore.type", T.STRING, "JKS", "PKCS12 or PEM (JKS is not read)"),
    ConfigKey("ssl.truststore.location", T.STRING, None, "Truststore file"),
    ConfigKey("ssl.truststore.password", T.PASSWORD, None, "Truststore password",
              sensitive=True),
    ConfigKey("ssl.truststore.certificates", T.PASSWORD, None, "PEM trusted certificates "
              "given inline (KIP-651)", sensitive=True),
    ConfigKey("ssl.client.auth", T.STRING, "none", "Client certificates: required, "
              "requested or none", one_of("required", "requested", "none")),
    ConfigKey("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions "
              "accepted", one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.protocol", T.STRING, "TLSv1.3", "Accepted for compatibility; "
              "ssl.enabled.protocols decides", one_of("TLS", "TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.cipher.suites", T.LIST, [], "OpenSSL cipher list for TLSv1.2; empty "
              "for the defaults"),
    ConfigKey("ssl.principal.mapping.rules", T.STRING, "DEFAULT", "Rules turning a "
              "certificate's subject into a principal name"),
    ConfigKey("ssl.endpoint.identification.algorithm", T.STRING, "https", "https checks "
              "the host name of brokers this broker connects to; empty does not"),
]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _authorizer_class(name: str, value: Any) -> None:
    if value not in ("", STANDARD_AUTHORIZER):
        raise ConfigError(f"Invalid value {value} for configuration {name}: Moldau's "
                          f"authorizer is {STANDARD_AUTHORIZER} (ACLs kept in the metadata "
                          "log); leave it empty for no authorization")


def _principals(name: str, value: Any) -> None:
    for item in filter(None, (part.strip() for part in str(value).split(";"))):
        kind, colon, user = item.partition(":")
        if not (kind and colon and user):
            raise ConfigError(f"Invalid value {value} for configuration {name}: expected "
                              "principals in the format principalType:principalName "
                              f"separated by semicolons, but got {item}")


# Authorization (broker-wide; not per listener).
AUTHORIZATION_KEYS = [
    ConfigKey("authorizer.class.name", T.STRING, "", "The authorizer: "
              f"{STANDARD_AUTHORIZER} checks every request against the ACLs; empty lets "
              "every client do everything", _authorizer_class),
    ConfigKey("super.users", T.STRING, "", "Principals allowed everything whatever the "
              "ACLs, separated by semicolons (User:admin;User:broker)", _principals),
    ConfigKey("allow.everyone.if.no.acl.found", T.BOOLEAN, False, "Allow an operation on a "
              "resource that no ACL names (otherwise denied)"),
]

SECURITY_KEY_NAMES = frozenset(key.name for key in SECURITY_KEYS)
_PER_LISTENER = re.compile(r"^listener\.name\.(?P<listener>[A-Za-z0-9_]+)\.(?P<key>.+)$")
_MECHANISM_JAAS = re.compile(r"^(?P<mechanism>[a-z0-9-]+)\.sasl\.jaas\.config$")


def split_listener_overrides(raw: Mapping[str, Any]
                             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Separate `listener.name.<listener>.<key>` settings from the rest, by listener."""
    rest: dict[str, Any] = {}
    per_listener: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        match = _PER_LISTENER.match(name)
        if match is None:
            rest[name] = value
            continue
        key = match["key"]
        if key not in SECURITY_KEY_NAMES and not _MECHANISM_JAAS.match(key):
            raise ConfigError(f"Unknown broker configuration {name!r}: a listener may "
                              "override ssl.*, sasl.* and connections.max.reauth.ms "
                              "settings, or <mechanism>.sasl.jaas.config")
        per_listener.setdefault(match["listener"].upper(), {})[key] = value
    return rest, per_listener


def parse_protocol_map(entries: list[str]) -> dict[str, str]:
    protocols: dict[str, str] = {}
    for entry in entries:
        name, colon, protocol = entry.partition(":")
        if not colon or not name or protocol.upper() not in PROTOCOLS:
            raise ConfigError(f"Invalid value {entry} for configuration "
                              "listener.security.protocol.map: expected NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(PROTOCOLS)}")
        if name.upper() in protocols:
            raise ConfigError(f"Invalid value {entry} for configuration "
                              "listener.security.protocol.map: listener "
                              f"{name.upper()} appears twice")
        protocols[name.upper()] = protocol.upper()
    return protocols


def listener_value(values: Mapping[str, Any], per_listener: Mapping[str, Mapping[str, Any]],
                   listener: str, key: str) -> Any:
    """A security setting as it applies to `listener`: its override, else the global one."""
    override = per_listener.get(listener.upper(), {})
    if key in override:
        return override[key]
    return values.get(key)


def parse_listener_overrides(per_listener: Mapping[str, Mapping[str, Any]]
                             ) -> dict[str, dict[str, Any]]:
    """Type and check each override as its global key would be."""
    keys = {key.name: key for key in SECURITY_KEYS}
    parsed: dict[str, dict[str, Any]] = {}
    for listener, overrides in per_listener.items():
        parsed[listener] = {}
        for key, value in overrides.items():
            definition = keys.get(key)
            if definition is None:  # <mechanism>.sasl.jaas.config
                parsed[listener][key] = str(value)
                continue
            try:
                parsed[listener][key] = definition.parse(value)
            except ConfigError as exc:
                raise ConfigError(str(exc).replace(
                    f"configuration {key}",
                    f"configuration listener.name.{listener.lower()}.{key}")) from None
    return parsed
