"""Where clients outside Kubernetes reach each broker of an external listener (pure).

Every broker has a Service of its own per external listener (services.per_broker). A NodePort
broker is reached at its node's address and its Service's node port; a LoadBalancer broker at
its Service's load-balancer address and the listener's port. The operator writes these into
the pool's ConfigMap (`<ordinal>.<LISTENER>=<host>:<port>`, an empty host standing for the
node's address, which only the pod knows), and the broker's container mode advertises them
(moldau.broker.container). A load balancer's address comes some time after its Service: a pool
whose brokers' addresses are not all known yet is not scaled to them (status says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moldau.operator import naming
from moldau.operator.spec import ClusterSpec, Listener, NodePool

# Where the broker finds the file (mounted from the pool's ConfigMap).
ADDRESSES_FILE = "external-addresses.properties"


def service_name(cluster: ClusterSpec, pool: NodePool, ordinal: int, listener: Listener) -> str:
    return f"{naming.pod(cluster, pool, ordinal)}-{listener.name}"


@dataclass
class ExternalAddresses:
    # pool name -> the lines of its file, in order
    files: dict[str, list[str]] = field(default_factory=dict)
    # Services whose address is not known yet
    waiting: list[str] = field(default_factory=list)
    # listener name -> "host:port" of each broker clients can bootstrap from
    bootstrap: dict[str, list[str]] = field(default_factory=dict)

    def pool_ready(self, cluster: ClusterSpec, pool: NodePool) -> bool:
        prefix = f"{naming.statefulset(cluster, pool)}-"
        return not any(name.startswith(prefix) for name in self.waiting)


def _service_address(listener: Listener, service: Mapping[str, Any] | None) -> str | None:
    """`:<node port>` or `<load balancer>:<port>`; None while Kubernetes has not given one."""
    if service is None:
        return None
    if listener.type == "nodeport":
        ports = (service.get("spec") or {}).get("ports") or []
        node_port = ports[0].get("nodePort") if ports else None
        return f":{node_port}" if node_port else None
    ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
               or [])
    host = ingress[0].get("hostname") or ingress[0].get("ip") if ingress else None
    return f"{host}:{listener.port}" if host else None


def resolve(cluster: ClusterSpec, services: Mapping[str, Mapping[str, Any]],
            host_ips: Mapping[str, str]) -> ExternalAddresses:
    """`services`: the live per-broker Services by name; `host_ips`: pod name -> the address
    of the node it runs on (for the bootstrap addresses in the status)."""
    found = ExternalAddresses()
    for listener in cluster.listeners:
        if not listener.external:
            continue
        found.bootstrap[listener.name] = []
        for pool in cluster.broker_pools:
            lines = found.files.setdefault(pool.name, [])
            for ordinal in range(pool.replicas):
                name = service_name(cluster, pool, ordinal, listener)
                address = _service_address(listener, services.get(name))
                if address is None:
                    found.waiting.append(name)
                    continue
                lines.append(f"{ordinal}.{listener.kafka_name}={address}")
                host = host_ips.get(naming.pod(cluster, pool, ordinal)) \
                    if address.startswith(":") else ""
                if host is not None:
                    found.bootstrap[listener.name].append(f"{host}{address}")
    return found
