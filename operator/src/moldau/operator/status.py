"""The KafkaCluster status, composed from what was observed (pure): phase, conditions with
reasons, observedGeneration, listener bootstrap addresses, cluster id, quorum, per-node
state, and each pool's node id range (which keeps node ids stable)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moldau.operator import naming
from moldau.operator.clusterstate import Assessment, Observed
from moldau.operator.conditions import condition, now
from moldau.operator.pools import Refusal
from moldau.operator.spec import ClusterSpec
from moldau.operator.topics.reconciler import Inventory

CONDITION_TYPES = ("Ready", "Reconciling", "Degraded", "SpecApplied")


@dataclass(frozen=True)
class PodState:
    name: str
    ready: bool


def bootstrap_addresses(cluster: ClusterSpec, external: Mapping[str, Sequence[str]]
                        ) -> list[dict[str, Any]]:
    """Internal listeners first: the printer column shows the first. An external listener's
    are its brokers' external addresses known so far (`external`, by listener name)."""
    service = f"{naming.bootstrap_service(cluster)}.{cluster.namespace}.svc"
    result = []
    for listener in sorted(cluster.listeners, key=lambda item: item.external):
        entry: dict[str, Any] = {"name": listener.name, "type": listener.type}
        if not listener.external:
            entry["bootstrapServers"] = f"{service}:{listener.port}"
        elif external.get(listener.name):
            entry["bootstrapServers"] = ",".join(external[listener.name])
        result.append(entry)
    return result


def node_ids(cluster: ClusterSpec, bases: Mapping[str, int], broker: bool) -> frozenset[int]:
    pools = cluster.broker_pools if broker else cluster.controller_pools
    return frozenset(bases[pool.name] + i for pool in pools for i in range(pool.replicas))


def nodes(cluster: ClusterSpec, bases: Mapping[str, int], pods: Mapping[str, PodState],
          observed: Observed | None) -> list[dict[str, Any]]:
    result = []
    for pool in cluster.pools:
        for ordinal in range(pool.replicas):
            node_id = bases[pool.name] + ordinal
            name = naming.pod(cluster, pool, ordinal)
            pod = pods.get(name)
            entry: dict[str, Any] = {"nodeId": node_id, "pod": name, "pool": pool.name,
                                     "roles": sorted(pool.roles),
                                     "podReady": bool(pod and pod.ready)}
            if observed is not None:
                if pool.is_broker:
                    entry["registered"] = node_id in observed.brokers
                if pool.is_controller:
                    entry["voter"] = node_id in observed.voters
                    entry["quorumLeader"] = node_id == observed.leader_id
            result.append(entry)
    return result


def _pools(cluster: ClusterSpec, bases: Mapping[str, int], sizes: Mapping[str, int],
           previous: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each pool's node id base, roles and size, by base; pools no longer in the spec keep
    what the status knew of them."""
    known = {entry["name"]: entry for entry in previous.get("nodePools") or []}
    specified = {pool.name: pool for pool in cluster.pools}
    result = []
    for name, base in sorted(bases.items(), key=lambda item: item[1]):
        entry: dict[str, Any] = {"name": name, "nodeIdBase": base}
        pool = specified.get(name)
        roles = sorted(pool.roles) if pool else known.get(name, {}).get("roles")
        if roles:
            entry["roles"] = roles
        size = sizes.get(name, pool.replicas if pool else known.get(name, {}).get("replicas"))
        if size is not None:
            entry["replicas"] = size
        result.append(entry)
    return result


def topics(found: Inventory) -> dict[str, Any]:
    """The cluster's topics: how many Topic resources manage, and those made elsewhere."""
    return {"managed": found.managed, "unmanaged": found.unmanaged,
            "unmanagedNames": list(found.unmanaged_names)}


def spec_applied(refusals: Sequence[Refusal], previous: Sequence[Mapping[str, Any]],
                 at: str) -> dict[str, Any]:
    """True when the whole spec is applied (or being applied); False naming every change
    refused, the first one's reason as the condition's."""
    if not refusals:
        return condition("SpecApplied", True, "Applied", "every change of the spec is applied",
                         previous, at)
    return condition("SpecApplied", False, refusals[0].reason,
                     "; ".join(refusal.message for refusal in refusals), previous, at)


def compose(cluster: ClusterSpec, generation: int, bases: Mapping[str, int],
            pods: Mapping[str, PodState], observed: Observed | None, verdict: Assessment,
            rolling: str | None, previous: Mapping[str, Any],
            inventory: Inventory | None = None,
            external: Mapping[str, Sequence[str]] | None = None,
            refusals: Sequence[Refusal] = (), operations: Mapping[str, Any] | None = None,
            pool_sizes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The whole status. `rolling` names what the operator is still changing, if anything;
    `inventory` the cluster's topics, when read; `external` the external listeners'
    addresses known so far; `refusals` the changes of the spec not applied and why;
    `operations` the day-2 operations under way (roll, rebalance, scaleDown: None when there
    is none) and the dynamic broker configs applied (dynamicConfig); `pool_sizes` each
    pool's size as the operator accounts for it (nodes removed but not cleaned up yet
    count)."""
    at = now()
    old = previous.get("conditions") or []
    brokers = node_ids(cluster, bases, broker=True)
    ready_brokers = sum(1 for node in nodes(cluster, bases, pods, observed)
                        if node.get("registered") and node["podReady"])
    degraded = observed is not None and not verdict.ready and ready_brokers > 0
    if verdict.ready:
        phase = "Ready"
    elif degraded:
        phase = "Degraded"
    else:
        phase = "Pending"
    status: dict[str, Any] = {
        "phase": phase, "observedGeneration": generation,
        "readyBrokers": f"{ready_brokers}/{len(brokers)}",
        "controllers": len(node_ids(cluster, bases, broker=False)),
        "listeners": bootstrap_addresses(cluster, external or {}),
        "nodes": nodes(cluster, bases, pods, observed),
        "nodePools": _pools(cluster, bases, pool_sizes or {}, previous),
        "conditions": [
            condition("Ready", verdict.ready, verdict.reason, verdict.message, old, at),
            condition("Reconciling", rolling is not None,
                       "Rolling" if rolling else "Settled", rolling or "nothing to change",
                       old, at),
            condition("Degraded", degraded, verdict.reason if degraded else "AsDesired",
                       verdict.message if degraded else "every node as desired", old, at),
            spec_applied(refusals, old, at),
        ],
    }
    for key in ("roll", "rebalance", "scaleDown", "dynamicConfig"):
        value = (operations or {}).get(key)
        if value is not None or key in previous:
            status[key] = value
    if observed is not None:
        status["clusterId"] = observed.cluster_id
        status["quorum"] = {"leaderId": observed.leader_id, "leaderEpoch": observed.leader_epoch,
                            "voters": sorted(observed.voters)}
    elif previous.get("clusterId"):
        status["clusterId"] = previous["clusterId"]
    if inventory is not None:
        status["topics"] = topics(inventory)
    elif previous.get("topics"):
        # Not read this time (the cluster did not answer): the last count stands, so a
        # passing failure does not rewrite the status twice.
        status["topics"] = previous["topics"]
    return status


def invalid(generation: int, reason: str, message: str, previous: Mapping[str, Any]
            ) -> dict[str, Any]:
    """The status of a spec that cannot run: Ready False with the reason, nothing applied."""
    at = now()
    old = previous.get("conditions") or []
    return {"phase": "Failed", "observedGeneration": generation, "conditions": [
        condition("Ready", False, reason, message, old, at),
        condition("Reconciling", False, reason, "waiting for a spec that can run", old, at),
        condition("Degraded", False, reason, message, old, at),
        condition("SpecApplied", False, reason, message, old, at)]}
