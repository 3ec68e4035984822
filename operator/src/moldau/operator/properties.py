"""server.properties of a node pool: roles, the controller quorum, listeners, storage, and
the user's `config` but for the keys applied without a restart (dynamic_config.py). What
differs per pod (node.id, advertised addresses) comes from the pod itself at start: the
ordinal plus MOLDAU_NODE_ID_OFFSET, and KAFKA_ADVERTISED_LISTENERS built from the pod's
name (see workloads.py)."""

from __future__ import annotations

from collections.abc import Mapping

from moldau.operator import naming, pki
from moldau.operator.dynamic_config import static_part
from moldau.operator.spec import (
    CONTROLLER_PORT,
    HTTP_PORT,
    REPLICATION_PORT,
    SCRAM,
    TLS_AUTH,
    ClusterSpec,
    NodePool,
)

CONTROLLER_LISTENER = "CONTROLLER"
REPLICATION_LISTENER = "REPLICATION"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def controller_voters(cluster: ClusterSpec, bases: Mapping[str, int]) -> list[str]:
    """`id@host:port` of every controller pod, by its DNS name."""
    return [f"{bases[pool.name] + ordinal}@{naming.pod_dns(cluster, pool, ordinal)}:"
            f"{CONTROLLER_PORT}"
            for pool in cluster.controller_pools for ordinal in range(pool.replicas)]


def pool_listeners(cluster: ClusterSpec, pool: NodePool) -> list[tuple[str, int]]:
    """(Kafka listener name, port) a pool's nodes listen on."""
    result: list[tuple[str, int]] = []
    if pool.is_broker:
        result += [(listener.kafka_name, listener.port) for listener in cluster.listeners]
        result.append((REPLICATION_LISTENER, REPLICATION_PORT))
    if pool.is_controller:
        result.append((CONTROLLER_LISTENER, CONTROLLER_PORT))
    return result


def advertised_listeners(cluster: ClusterSpec, pool: NodePool, host: str,
                         external: Mapping[str, str] | None = None) -> str:
    """advertised.listeners of a node of `pool` whose DNS name is `host`: every listener it
    has, by that name; `external` maps an external listener's name to the host:port clients
    outside reach it by, once known."""
    external = external or {}
    entries = []
    for name, port in pool_listeners(cluster, pool):
        listener = next((item for item in cluster.listeners if item.kafka_name == name), None)
        address = (external.get(listener.name) if listener else None) or f"{host}:{port}"
        entries.append(f"{name}://{address}")
    return ",".join(entries)


def security_protocols(cluster: ClusterSpec) -> dict[str, str]:
    """Kafka listener name -> security protocol; the nodes' own listeners are mutual TLS
    with the cluster CA once the cluster is secured."""
    internal = "SSL" if cluster.secured else "PLAINTEXT"
    protocols = {CONTROLLER_LISTENER: internal, REPLICATION_LISTENER: internal}
    protocols.update({listener.kafka_name: listener.security_protocol
                      for listener in cluster.listeners})
    return protocols


def security_settings(cluster: ClusterSpec) -> dict[str, str]:
    """TLS, SASL and authorization settings of a secured cluster. Each node's keystore
    (`<pod>.pem`, its key and certificate chain) is named per pod in the StatefulSet's
    environment (workloads.py); the truststores are the CA bundles in the same Secret."""
    if not cluster.secured:
        return {}
    settings = {"ssl.keystore.type": "PEM"}
    for name in (CONTROLLER_LISTENER, REPLICATION_LISTENER):
        settings.update(_mutual_tls(name, naming.cluster_ca_file()))
    for listener in cluster.listeners:
        if listener.authentication == TLS_AUTH:
            settings.update(_mutual_tls(listener.kafka_name, naming.clients_ca_file()))
        elif listener.authentication == SCRAM:
            settings[f"listener.name.{listener.kafka_name.lower()}.sasl.enabled.mechanisms"] = \
                "SCRAM-SHA-512"
    if cluster.authorization is not None:
        settings["authorizer.class.name"] = STANDARD_AUTHORIZER
        settings["super.users"] = ";".join(
            [pki.broker_principal(cluster.name), pki.operator_principal(cluster.name),
             *cluster.authorization.super_users])
    return settings


def _mutual_tls(listener: str, truststore: str) -> dict[str, str]:
    prefix = f"listener.name.{listener.lower()}."
    return {f"{prefix}ssl.client.auth": "required",
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": truststore}


def server_properties(cluster: ClusterSpec, pool: NodePool, bases: Mapping[str, int]) -> str:
    listeners = pool_listeners(cluster, pool)
    protocols = security_protocols(cluster)
    settings: dict[str, str] = {
        "process.roles": ",".join(sorted(pool.roles)),  # broker,controller
        "controller.quorum.voters": ",".join(controller_voters(cluster, bases)),
        "controller.listener.names": CONTROLLER_LISTENER,
        "listeners": ",".join(f"{name}://0.0.0.0:{port}" for name, port in listeners),
        "listener.security.protocol.map": ",".join(
            f"{name}:{protocols[name]}" for name, _ in
            [*listeners, *([(CONTROLLER_LISTENER, 0)] if not pool.is_controller else [])]),
        "log.dirs": naming.DATA_DIR,
        "http.listener": f"http://0.0.0.0:{HTTP_PORT}",
    }
    if pool.is_broker:
        settings["inter.broker.listener.name"] = REPLICATION_LISTENER
    settings.update(security_settings(cluster))
    lines = ["# Written by the Moldau operator from the KafkaCluster; edits are overwritten.",
             *(_line(key, value) for key, value in settings.items()),
             *(_line(key, value) for key, value in sorted(static_part(cluster.config).items()))]
    return "\n".join(lines) + "\n"


def _line(key: str, value: str) -> str:
    """One `key=value` line in the properties format: backslashes and line breaks escaped."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return f"{key}={escaped}"
