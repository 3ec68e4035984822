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
from moldau.operator.properties import server_properties
from moldau.operator.resource import API_VERSION, KIND
from moldau.operator.spec import ClusterSpec, NodePool
from moldau.operator.workloads import statefulset

Manifest = dict[str, Any]


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def config_map(cluster: ClusterSpec, pool: NodePool, properties: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": naming.metadata(cluster, naming.config_map(cluster, pool), pool),
            "data": {naming.CONFIG_FILE: properties}}


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
                    owner: Mapping[str, Any] | None = None) -> list[Manifest]:
    """Every object of the cluster; `owner` is an owner reference to add to each."""
    objects: list[Manifest] = [service_account(cluster)]
    workloads = []
    for pool in cluster.pools:
        properties = server_properties(cluster, pool, bases)
        objects.append(config_map(cluster, pool, properties))
        workloads.append(statefulset(cluster, pool, bases[pool.name], config_hash(properties)))
    objects += [services.headless(cluster), services.bootstrap(cluster),
                *services.per_broker(cluster), disruption_budget(cluster), *workloads]
    if owner is not None:
        for manifest in objects:
            manifest["metadata"]["ownerReferences"] = [dict(owner)]
    return objects
