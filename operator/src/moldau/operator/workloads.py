"""The StatefulSet of a node pool: the broker image's `moldau broker --container` entrypoint
reading the pool's ConfigMap, a volume claim per pod, probes on the broker's HTTP listener,
and what the spec adds (resources, affinity, tolerations, template overrides, rack)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moldau.operator import naming, pki
from moldau.operator.external import ADDRESSES_FILE
from moldau.operator.properties import advertised_listeners
from moldau.operator.spec import (
    CONTROLLER_PORT,
    HTTP_PORT,
    REPLICATION_PORT,
    ClusterSpec,
    NodePool,
)

# The broker image's user (Dockerfile): volumes are given to its group.
BROKER_UID = 1001
# Read by the broker's container mode (moldau.broker.container): the node id offset, the
# file of external addresses, and the address of the pod's node.
NODE_ID_OFFSET_ENV = "MOLDAU_NODE_ID_OFFSET"
EXTERNAL_ADDRESSES_ENV = "MOLDAU_EXTERNAL_ADDRESSES"
NODE_ADDRESS_ENV = "MOLDAU_NODE_ADDRESS"
CONFIG_HASH_ANNOTATION = "moldau.io/config-hash"
TERMINATION_GRACE_SECONDS = 60


def _env(cluster: ClusterSpec, pool: NodePool, base: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": NODE_ID_OFFSET_ENV, "value": str(base)},
    ]
    # Kubernetes expands $(POD_NAME): each node advertises its own DNS name.
    host = f"$(POD_NAME).{naming.pod_dns_suffix(cluster)}"
    env.append({"name": "KAFKA_ADVERTISED_LISTENERS",
                "value": advertised_listeners(cluster, pool, host)})
    if cluster.secured:
        # Each node serves its own certificate (pki.py) on every TLS listener.
        env.append({"name": "KAFKA_SSL_KEYSTORE_LOCATION",
                    "value": f"{naming.CERTS_DIR}/$(POD_NAME).pem"})
    if pool.is_broker and any(listener.external for listener in cluster.listeners):
        # The external addresses of the pool's pods (moldau.operator.external); a NodePort's
        # host is the node this pod runs on.
        env += [{"name": NODE_ADDRESS_ENV,
                 "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": EXTERNAL_ADDRESSES_ENV,
                 "value": f"{naming.CONFIG_DIR}/{ADDRESSES_FILE}"}]
    if pool.is_broker and cluster.rack_topology_key:
        # Kubernetes copies the node's topology labels onto the pod it binds.
        env.append({"name": "KAFKA_BROKER_RACK", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{cluster.rack_topology_key}']"}}})
    env.extend(pool.template.get("env") or [])
    return env


def _ports(cluster: ClusterSpec, pool: NodePool) -> list[dict[str, Any]]:
    ports = []
    if pool.is_broker:
        ports += [{"name": listener.name, "containerPort": listener.port}
                  for listener in cluster.listeners]
        ports.append({"name": "replication", "containerPort": REPLICATION_PORT})
    if pool.is_controller:
        ports.append({"name": "controller", "containerPort": CONTROLLER_PORT})
    ports.append({"name": "metrics" if cluster.metrics else "http", "containerPort": HTTP_PORT})
    return ports


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": HTTP_PORT}, "periodSeconds": period,
            "failureThreshold": failures, "timeoutSeconds": 3}


def _claim(pool: NodePool) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": pool.storage.size}}}
    if pool.storage.storage_class:
        spec["storageClassName"] = pool.storage.storage_class
    return {"metadata": {"name": naming.DATA_VOLUME}, "spec": spec}


def _pod_metadata(cluster: ClusterSpec, pool: NodePool, config_hash: str) -> dict[str, Any]:
    annotations = {CONFIG_HASH_ANNOTATION: config_hash}
    if cluster.metrics:
        annotations.update({"prometheus.io/scrape": "true",
                            "prometheus.io/port": str(HTTP_PORT)})
    annotations.update(pool.template.get("annotations") or {})
    # The operator's labels last: a template cannot take a pod out of its selector.
    pod_labels = {**(pool.template.get("labels") or {}), **naming.labels(cluster, pool)}
    if pool.is_broker:
        pod_labels[naming.BROKER_LABEL] = "true"
    return {"labels": pod_labels, "annotations": annotations}


def statefulset(cluster: ClusterSpec, pool: NodePool, base: int,
                config_hash: str) -> dict[str, Any]:
    """`config_hash` (of the pool's server.properties) goes on the pod template, so a config
    change is visible on each pod that still runs the old one."""
    container: dict[str, Any] = {
        "name": "kafka", "image": cluster.image, "imagePullPolicy": "IfNotPresent",
        "args": ["--config", f"{naming.CONFIG_DIR}/{naming.CONFIG_FILE}"],
        "env": _env(cluster, pool, base),
        "ports": _ports(cluster, pool),
        "readinessProbe": _probe("/readyz", 2, 3),
        "livenessProbe": {**_probe("/livez", 10, 6), "initialDelaySeconds": 10},
        "volumeMounts": [{"name": naming.DATA_VOLUME, "mountPath": "/var/lib/moldau"},
                         {"name": "config", "mountPath": naming.CONFIG_DIR, "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if pool.resources:
        container["resources"] = dict(pool.resources)
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": naming.config_map(cluster, pool)}}]
    if cluster.secured:
        # Updated in place by the kubelet when certificates are renewed; the broker reloads
        # changed keystores, so a renewal restarts no pod.
        container["volumeMounts"].append(
            {"name": naming.CERTS_VOLUME, "mountPath": naming.CERTS_DIR, "readOnly": True})
        volumes.append({"name": naming.CERTS_VOLUME, "secret": {
            "secretName": pki.broker_secret(cluster.name), "defaultMode": 0o440}})
    pod_spec: dict[str, Any] = {
        "serviceAccountName": naming.service_account(cluster),
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": {"runAsUser": BROKER_UID, "runAsGroup": BROKER_UID,
                            "fsGroup": BROKER_UID, "runAsNonRoot": True},
        "containers": [container],
        "volumes": volumes,
    }
    if pool.affinity:
        pod_spec["affinity"] = dict(pool.affinity)
    if pool.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in pool.tolerations]
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": naming.metadata(cluster, naming.statefulset(cluster, pool), pool),
        "spec": {
            "serviceName": naming.headless_service(cluster),
            "replicas": pool.replicas,
            # Nodes start together: a controller quorum needs a majority to come up at all.
            "podManagementPolicy": "Parallel",
            # The operator decides when each pod restarts.
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": _retention(pool),
            "selector": {"matchLabels": naming.selector(cluster, pool)},
            "template": {"metadata": _pod_metadata(cluster, pool, config_hash),
                         "spec": pod_spec},
            "volumeClaimTemplates": [_claim(pool)],
        },
    }


def _retention(pool: NodePool) -> Mapping[str, str]:
    """Claims outlive the cluster unless deleteClaim says otherwise; scaling down keeps
    them, so a pool scaled back up finds its data."""
    when_deleted = "Delete" if pool.storage.delete_claim else "Retain"
    return {"whenDeleted": when_deleted, "whenScaled": "Retain"}
