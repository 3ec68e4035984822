"""The security of this broker's own connections: to other brokers' inter-broker listener
(replica fetchers) and to the controllers' listener (Raft, registration, heartbeats).

They speak the listener's protocol with the listener's ssl.* settings (its truststore to
check the peer, its keystore when the peer asks for a certificate) and, for SASL,
`sasl.mechanism.inter.broker.protocol` with the `username`/`password` of the listener's JAAS
config for that mechanism, as Kafka's brokers do.
"""

from __future__ import annotations

import ssl
from typing import Any

from moldau.broker.config import BrokerConfig
from moldau.broker.security.settings import TLS_PROTOCOLS
from moldau.client.security import ClientSecurity


def _accessors(config: BrokerConfig, listener: str) -> tuple[Any, Any]:
    def setting(key: str) -> Any:
        return config.listener_setting(listener, key)

    def name(key: str) -> str:
        return config.setting_name(listener, key)

    return setting, name


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    listener = config.inter_broker_listener
    protocol = config.protocol_of(listener)
    setting, name = _accessors(config, listener)
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    return ClientSecurity.from_settings(
        protocol, setting, name, mechanism=mechanism,
        jaas=config.jaas_config(listener, mechanism) if protocol.startswith("SASL") else None)


def controller_security(config: BrokerConfig) -> ClientSecurity:
    """Towards the controllers: TLS when the controller listener is SSL."""
    listener = config.controller_listener_name
    setting, name = _accessors(config, listener)
    return ClientSecurity.from_settings(config.controller_protocol, setting, name)


def controller_server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context this node's controller listener serves, if it is SSL."""
    if config.controller_protocol not in TLS_PROTOCOLS or config.controller_listener is None:
        return None
    from moldau.security.tls import build_context  # cryptography: only for TLS

    setting, name = _accessors(config, config.controller_listener_name)
    return build_context(setting, name, server=True)
