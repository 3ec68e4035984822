"""The Kubernetes side of day-2 operations: reading a cluster's StatefulSets, pods and claims
as they are, and the few writes beyond server-side apply that rolling, scaling and storage
growth need (delete a pod, annotate pods, resize and delete claims, re-create a StatefulSet
without touching its pods)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod
from lightkube.types import CascadeType, PatchType

from moldau.operator import naming
from moldau.operator.pools import LivePool
from moldau.operator.restarts import MANUAL_ROLLING_UPDATE
from moldau.operator.spec import ClusterSpec

NOT_FOUND = 404
RESIZE_PENDING = "FileSystemResizePending"
# How long a StatefulSet deleted with orphaned pods may take to go before it is re-created.
ORPHAN_DELETE_TIMEOUT = 60.0


@dataclass
class LiveCluster:
    statefulsets: dict[str, dict[str, Any]] = field(default_factory=dict)  # by pool
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name

    def pools(self) -> dict[str, LivePool]:
        out = {}
        for pool, sts in self.statefulsets.items():
            templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or []
            size = ((templates[0].get("spec") or {}).get("resources") or {}).get(
                "requests", {}).get("storage") if templates else None
            out[pool] = LivePool(int(sts["spec"].get("replicas") or 0), size)
        return out


def claim_name(cluster: ClusterSpec, pool: str, ordinal: int) -> str:
    return f"{naming.DATA_VOLUME}-{cluster.name}-{pool}-{ordinal}"


def claim_ordinal(cluster: ClusterSpec, pool: str, name: str) -> int | None:
    """The ordinal of a pool's claim by its name (None: not one of the pool's claims)."""
    prefix = claim_name(cluster, pool, 0)[:-1]
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def update_revision(sts: Mapping[str, Any] | None) -> str | None:
    """The revision the StatefulSet wants its pods at, once it has seen its latest spec."""
    if not sts:
        return None
    status = sts.get("status") or {}
    if status.get("observedGeneration", -1) < (sts.get("metadata") or {}).get("generation", 0):
        return None
    return status.get("updateRevision")


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Ready, and not on its way out (a pod being deleted may still say Ready)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pool_roles(sts: Mapping[str, Any]) -> frozenset[str]:
    """A StatefulSet's roles, by the ports its broker container opens."""
    containers = ((((sts.get("spec") or {}).get("template") or {}).get("spec") or {})
                  .get("containers") or [])
    ports = {port.get("name") for c in containers for port in c.get("ports") or []}
    return frozenset(role for role, port in (("controller", "controller"),
                                             ("broker", "replication")) if port in ports)


def _time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def unready_for(pod: Mapping[str, Any], now: datetime.datetime) -> float:
    """Seconds since the pod was last ready (since it was made, if never); 0 when ready."""
    if is_ready(pod):
        return 0.0
    ready = next((c for c in (pod.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), {})
    since = _time(ready.get("lastTransitionTime")) or \
        _time((pod.get("metadata") or {}).get("creationTimestamp"))
    return max((now - since).total_seconds(), 0.0) if since else 0.0


def host_ips(pods: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> the address of the node it runs on, where known."""
    return {name: (pod.get("status") or {}).get("hostIP") for name, pod in pods.items()
            if (pod.get("status") or {}).get("hostIP")}


def resize_pending(claim: Mapping[str, Any] | None) -> bool:
    return any(c.get("type") == RESIZE_PENDING and c.get("status") == "True"
               for c in ((claim or {}).get("status") or {}).get("conditions") or [])


def requested(claim: Mapping[str, Any]) -> str | None:
    return (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage")


async def read_live(client: AsyncClient, cluster: ClusterSpec) -> LiveCluster:
    labels = {naming.CLUSTER_LABEL: cluster.name}
    live = LiveCluster()
    async for sts in client.list(StatefulSet, namespace=cluster.namespace, labels=labels):
        data = sts.to_dict()
        pool = (data["metadata"].get("labels") or {}).get(naming.POOL_LABEL)
        if pool:
            live.statefulsets[pool] = data
    async for pod in client.list(Pod, namespace=cluster.namespace,
                                 labels=naming.selector(cluster)):
        live.pods[pod.metadata.name] = pod.to_dict()
    async for claim in client.list(PersistentVolumeClaim, namespace=cluster.namespace,
                                   labels=labels):
        live.claims[claim.metadata.name] = claim.to_dict()
    return live


async def delete_pod(client: AsyncClient, namespace: str, name: str) -> None:
    await client.delete(Pod, name, namespace=namespace)


async def mark_for_restart(client: AsyncClient, namespace: str, pods: Iterable[str]) -> None:
    """Put the manual rolling update annotation on each pod: the roll takes it from there,
    and it goes with the pod it restarts."""
    for name in pods:
        await client.patch(Pod, name, {"metadata": {"annotations": {
            MANUAL_ROLLING_UPDATE: "true"}}}, namespace=namespace, patch_type=PatchType.MERGE)


async def grow_claims(client: AsyncClient, namespace: str, names: Iterable[str],
                      size: str) -> None:
    """Ask for `size` on each claim; raises ApiError (e.g. a class that cannot expand)."""
    for name in names:
        await client.patch(PersistentVolumeClaim, name, {"spec": {"resources": {
            "requests": {"storage": size}}}}, namespace=namespace, patch_type=PatchType.MERGE)


async def delete_claims(client: AsyncClient, namespace: str, names: Iterable[str]) -> None:
    for name in names:
        try:
            await client.delete(PersistentVolumeClaim, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code != NOT_FOUND:
                raise


async def delete_keeping_pods(client: AsyncClient, namespace: str, name: str,
                              timeout: float = ORPHAN_DELETE_TIMEOUT) -> None:
    """Delete a StatefulSet but not its pods or claims (orphan cascade), and wait until it is
    gone, so that the next apply creates it anew; the new one adopts the pods."""
    try:
        await client.delete(StatefulSet, name, namespace=namespace,
                            cascade=CascadeType.ORPHAN)
    except ApiError as exc:
        if exc.status.code != NOT_FOUND:
            raise
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            await client.get(StatefulSet, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == NOT_FOUND:
                return
            raise
        await asyncio.sleep(0.5)
    raise TimeoutError(f"StatefulSet {name} was not deleted within {timeout:.0f} s")
