"""KafkaCluster spec -> every object the cluster needs, as plain manifests (no API calls).

The order is the order of applying: what pods need (service account, config, Services)
before the StatefulSets. Every object carries the cluster's labels and an owner reference to
the KafkaCluster, so that deleting it deletes them (claims follow deleteClaim).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from moldau.operator import naming, services
from moldau.operator.external import ADDRESSES_FILE, ExternalAddresses
from moldau.operator.properties import server_properties
from moldau.operator.resource import API_VERSION, KIND
from moldau.operator.spec import ClusterSpec, NodePool
from moldau.operator.workloads import statefulset

Manifest = dict[str, Any]


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def config_map(cluster: ClusterSpec, pool: NodePool, properties: str,
               external: ExternalAddresses | None = None) -> Manifest:
    """server.properties, and for a broker pool with external listeners the file of its pods'
    external addresses (outside the config hash: a new broker's address restarts no one)."""
    data = {naming.CONFIG_FILE: properties}
    if pool.is_broker and any(listener.external for listener in cluster.listeners):
        lines = (external.files.get(pool.name) if external else None) or []
        data[ADDRESSES_FILE] = "".join(f"{line}\n" for line in lines)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": naming.metadata(cluster, naming.config_map(cluster, pool), pool),
            "data": data}


def service_account(cluster: ClusterSpec) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": naming.metadata(cluster, naming.service_account(cluster)),
            # Brokers never call the Kubernetes API.
            "automountServiceAccountToken": False}


def disruption_budget(cluster: ClusterSpec) -> Manifest:
    """At most one node of the cluster down at a time for voluntary disruptions (drains)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": naming.metadata(cluster, cluster.name),
            "spec": {"maxUnavailable": 1,
                     "selector": {"matchLabels": naming.selector(cluster)}}}


def config_hash(properties: str) -> str:
    return hashlib.sha256(properties.encode()).hexdigest()[:16]


def desired_objects(cluster: ClusterSpec, bases: Mapping[str, int],
                    owner: Mapping[str, Any] | None = None,
                    external: ExternalAddresses | None = None) -> list[Manifest]:
    """Every object of the cluster; `owner` is an owner reference to add to each. With
    `external` (the external listeners' addresses as far as known), a pool whose brokers'
    addresses are not all known has no StatefulSet yet."""
    objects: list[Manifest] = [service_account(cluster)]
    workloads = []
    for pool in cluster.pools:
        properties = server_properties(cluster, pool, bases)
        objects.append(config_map(cluster, pool, properties, external))
        if external is None or external.pool_ready(cluster, pool):
            workloads.append(statefulset(cluster, pool, bases[pool.name],
                                         config_hash(properties)))
    objects += [services.headless(cluster), services.bootstrap(cluster),
                *services.per_broker(cluster), disruption_budget(cluster), *workloads]
    return with_owner(objects, owner) if owner is not None else objects


def with_owner(manifests: list[Manifest], owner: Mapping[str, Any]) -> list[Manifest]:
    for manifest in manifests:
        manifest["metadata"]["ownerReferences"] = [dict(owner)]
    return manifests
