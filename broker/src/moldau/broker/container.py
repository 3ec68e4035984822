"""Settings of a broker in a container: Kafka's image convention for environment variables,
and defaults that make the broker reachable from outside its container or pod.

`KAFKA_<NAME>` sets a property the way Apache Kafka's own image reads it: in NAME, `___` is
`-`, `__` is `_` and `_` is `.`, lower-cased (KAFKA_ADVERTISED_LISTENERS is
advertised.listeners, KAFKA_ABC__DEF is abc_def, KAFKA_ABC___DEF is abc-def).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping

ENV_PREFIX = "KAFKA_"
# Variables Kafka's start scripts read for the JVM, never properties: a manifest written for
# Kafka's image may carry them.
SCRIPT_VARIABLES = frozenset({
    "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS",
    "KAFKA_JMX_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_DEBUG", "KAFKA_LOG_DIR",
})
CLIENT_PORT = 9092
DATA_DIR = "/var/lib/moldau"
# Added to the StatefulSet ordinal: the first node id of the pod's node pool, so pools of one
# cluster (each a StatefulSet counting from 0) never share an id.
NODE_ID_OFFSET_ENV = "MOLDAU_NODE_ID_OFFSET"
# A StatefulSet names its pods <set>-<ordinal>.
_ORDINAL = re.compile(r"-(\d+)$")
# Addresses clients outside Kubernetes reach each pod of a StatefulSet by, per listener: a
# properties file of `<ordinal>.<LISTENER>=<host>:<port>` lines (the operator writes it for
# NodePort and LoadBalancer listeners); an empty host is the node's address, given in
# MOLDAU_NODE_ADDRESS (the pod's status.hostIP).
EXTERNAL_ADDRESSES_ENV = "MOLDAU_EXTERNAL_ADDRESSES"
NODE_ADDRESS_ENV = "MOLDAU_NODE_ADDRESS"


def property_name(variable: str) -> str:
    """KAFKA_ADVERTISED_LISTENERS -> advertised.listeners (Kafka's image convention)."""
    name = variable[len(ENV_PREFIX):].lower()
    # Placeholders keep the longer runs apart from the single underscores.
    name = name.replace("___", "\0").replace("__", "\1").replace("_", ".")
    return name.replace("\0", "-").replace("\1", "_")


def properties_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {property_name(key): value for key, value in environ.items()
            if key.startswith(ENV_PREFIX) and key not in SCRIPT_VARIABLES
            and len(key) > len(ENV_PREFIX)}


def ordinal(hostname: str) -> int | None:
    """The StatefulSet ordinal in a pod's hostname (`moldau-2` -> 2), if it has one."""
    match = _ORDINAL.search(hostname.split(".")[0])
    return int(match[1]) if match else None


def container_defaults(hostname: str, fqdn: str, node_id_offset: int = 0) -> dict[str, str]:
    """Listen on every interface, advertise the name others resolve (a pod's DNS name),
    keep data in the volume, and take node.id from a StatefulSet ordinal (plus an offset)."""
    defaults = {
        "listeners": f"PLAINTEXT://0.0.0.0:{CLIENT_PORT}",
        "advertised.listeners": f"PLAINTEXT://{fqdn}:{CLIENT_PORT}",
        "log.dirs": DATA_DIR,
        "http.listener": "http://0.0.0.0:9404",
    }
    node = ordinal(hostname)
    if node is not None:
        defaults["node.id"] = str(node + node_id_offset)
    return defaults


def node_id_offset(environ: Mapping[str, str]) -> int:
    text = environ.get(NODE_ID_OFFSET_ENV, "0").strip() or "0"
    if not text.isdigit():
        raise ValueError(f"{NODE_ID_OFFSET_ENV} must be a whole number, not {text!r}")
    return int(text)


def external_addresses(environ: Mapping[str, str], node: int | None) -> dict[str, str]:
    """Listener name -> host:port for the pod of StatefulSet ordinal `node`, from the file
    MOLDAU_EXTERNAL_ADDRESSES names (none when unset)."""
    path = environ.get(EXTERNAL_ADDRESSES_ENV)
    if not path or node is None:
        return {}
    from moldau.properties import load_properties

    found = {}
    for key, address in load_properties(path).items():
        index, _, listener = key.partition(".")
        if index == str(node) and listener:
            host, sep, port = address.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"{path}: {key}={address} is not host:port")
            if not host:
                host = environ.get(NODE_ADDRESS_ENV, "")
                if not host:
                    raise ValueError(f"{path}: {key} has no host and {NODE_ADDRESS_ENV} "
                                     "is not set")
            found[listener] = f"{host}:{port}"
    return found


def with_external_addresses(advertised: str, external: Mapping[str, str]) -> str:
    """advertised.listeners with each listener of `external` at its external address."""
    entries = []
    for entry in advertised.split(","):
        name, sep, _address = entry.strip().partition("://")
        entries.append(f"{name}://{external[name]}" if sep and name in external
                       else entry.strip())
    return ",".join(entries)


def container_settings(environ: Mapping[str, str],
                       configured: Iterable[str] = ()) -> dict[str, str]:
    """The defaults for what the config file (`configured`: its keys) leaves unset,
    overridden by KAFKA_* variables; external listeners advertise their external address."""
    hostname = socket.gethostname()
    defaults = container_defaults(hostname, socket.getfqdn(), node_id_offset(environ))
    settings = {key: value for key, value in defaults.items() if key not in set(configured)}
    settings.update(properties_from_env(environ))
    external = external_addresses(environ, ordinal(hostname))
    if external and "advertised.listeners" in settings:
        settings["advertised.listeners"] = with_external_addresses(
            settings["advertised.listeners"], external)
    return settings
