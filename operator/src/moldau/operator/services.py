"""The Services of a cluster: the headless one that names every pod, the bootstrap one for
clients inside Kubernetes, and one per broker and external listener (NodePort or
LoadBalancer) so that each broker is reachable by its own address from outside."""

from __future__ import annotations

from typing import Any

from moldau.operator import external, naming
from moldau.operator.spec import CONTROLLER_PORT, HTTP_PORT, REPLICATION_PORT, ClusterSpec

EXTERNAL_TYPES = {"nodeport": "NodePort", "loadbalancer": "LoadBalancer"}


def _service(cluster: ClusterSpec, name: str, spec: dict[str, Any],
             component: str = "kafka") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": naming.metadata(cluster, name, component=component), "spec": spec}


def headless(cluster: ClusterSpec) -> dict[str, Any]:
    ports = [{"name": listener.name, "port": listener.port, "targetPort": listener.port}
             for listener in cluster.listeners]
    ports += [{"name": "replication", "port": REPLICATION_PORT},
              {"name": "controller", "port": CONTROLLER_PORT},
              {"name": "http", "port": HTTP_PORT}]
    # Pods are named in DNS before they are ready: the quorum forms from not-ready nodes.
    return _service(cluster, naming.headless_service(cluster), {
        "clusterIP": "None", "publishNotReadyAddresses": True,
        "selector": naming.selector(cluster), "ports": ports})


def bootstrap(cluster: ClusterSpec) -> dict[str, Any]:
    """A ClusterIP on each internal listener's port, in front of the brokers only; a secured
    cluster's also on the replication port, where the operator connects with its
    certificate."""
    ports = [{"name": listener.name, "port": listener.port, "targetPort": listener.port}
             for listener in cluster.listeners if not listener.external]
    if cluster.secured:
        ports.append({"name": "replication", "port": REPLICATION_PORT,
                      "targetPort": REPLICATION_PORT})
    return _service(cluster, naming.bootstrap_service(cluster), {
        "type": "ClusterIP", "selector": {**naming.selector(cluster), naming.BROKER_LABEL: "true"},
        "ports": ports}, component="bootstrap")


def per_broker(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """One Service per broker pod and external listener, selecting that pod alone."""
    services = []
    for listener in cluster.listeners:
        if not listener.external:
            continue
        for pool in cluster.broker_pools:
            for ordinal in range(pool.replicas):
                pod = naming.pod(cluster, pool, ordinal)
                name = external.service_name(cluster, pool, ordinal, listener)
                services.append(_service(cluster, name, {
                    "type": EXTERNAL_TYPES[listener.type],
                    "selector": {naming.POD_NAME_LABEL: pod},
                    "ports": [{"name": listener.name, "port": listener.port,
                               "targetPort": listener.port}]}, component="external"))
    return services
