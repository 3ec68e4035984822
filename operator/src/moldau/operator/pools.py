"""What of a node pool change can be applied now, and what must wait or is refused: pure,
from the spec, the pools' live StatefulSets and what the status recorded.

- Controller pools: the voter set is static (`controller.quorum.voters`), so a controller
  pool keeps the replicas it runs with; a change of them, a controller pool added to a
  running cluster, or one removed is refused with a reason instead of being half-applied.
- Broker pools grow at once (the new brokers register; rebalancing is the scaler's). A
  smaller `replicas` first drains the brokers that go (the scaler decides when); until then
  the StatefulSet keeps its size. Once it is smaller, the removed nodes are cleaned up:
  unregistered, and their claims deleted when `deleteClaim` says so.
- Storage grows by resizing each claim and re-creating the StatefulSet (its claim template
  cannot change); it never shrinks.
- A pool removed from the spec while it still has nodes is refused: scale it to 0 first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from lightkube.utils.quantity import parse_quantity

from moldau.operator.spec import ClusterSpec, NodePool

CONTROLLER_POOL_CHANGE = "ControllerPoolChange"
POOL_REMOVED = "NodePoolRemoved"
STORAGE_SHRINK = "StorageShrink"


@dataclass(frozen=True)
class LivePool:
    """A pool's StatefulSet as it is: its replicas and its claim template's size."""

    replicas: int
    claim_size: str | None = None


@dataclass(frozen=True)
class Refusal:
    reason: str  # CamelCase, for the condition and the Event
    message: str


@dataclass(frozen=True)
class ScaleDown:
    """A broker pool asked to shrink: its nodes `leaving` must be drained first."""

    pool: str
    replicas: int  # what the spec asks
    live: int  # what runs
    leaving: tuple[int, ...]  # node ids


@dataclass(frozen=True)
class Cleanup:
    """Nodes a pool no longer runs that are still registered or have claims."""

    pool: str
    replicas: int  # the pool's size once they are cleaned up
    ordinals: tuple[int, ...]
    node_ids: tuple[int, ...]
    delete_claims: bool


@dataclass(frozen=True)
class StorageGrowth:
    pool: str
    size: str
    was: str


@dataclass
class PoolPlan:
    cluster: ClusterSpec  # the spec as far as it can be applied now
    refusals: list[Refusal] = field(default_factory=list)
    blocked: Refusal | None = None  # nothing may be applied
    scale_downs: list[ScaleDown] = field(default_factory=list)
    cleanups: list[Cleanup] = field(default_factory=list)
    growths: list[StorageGrowth] = field(default_factory=list)
    added: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pool -> new broker ids


def _ids(ids: list[int] | tuple[int, ...]) -> str:
    return ", ".join(map(str, ids))


def bytes_of(size: str) -> float:
    value = parse_quantity(size)
    return float(value) if value is not None else 0.0


def with_replicas(cluster: ClusterSpec, pool: str, replicas: int) -> ClusterSpec:
    return replace(cluster, pools=tuple(replace(p, replicas=replicas) if p.name == pool else p
                                        for p in cluster.pools))


def with_size(cluster: ClusterSpec, pool: str, size: str) -> ClusterSpec:
    return replace(cluster, pools=tuple(
        replace(p, storage=replace(p.storage, size=size)) if p.name == pool else p
        for p in cluster.pools))


def without_pool(cluster: ClusterSpec, pool: str) -> ClusterSpec:
    return replace(cluster, pools=tuple(p for p in cluster.pools if p.name != pool))


def _controller_pool(plan: PoolPlan, pool: NodePool, running: int | None,
                     cluster_exists: bool) -> None:
    if running is None:
        if cluster_exists:
            plan.refusals.append(Refusal(CONTROLLER_POOL_CHANGE, (
                f"node pool '{pool.name}' adds controllers to a running cluster: the quorum's "
                "voters are static (controller.quorum.voters), so it is not created")))
            plan.cluster = without_pool(plan.cluster, pool.name)
        return
    if pool.replicas != running:
        plan.refusals.append(Refusal(CONTROLLER_POOL_CHANGE, (
            f"node pool '{pool.name}' keeps {running} controllers, not {pool.replicas}: the "
            "quorum's voters are static (controller.quorum.voters)")))
        plan.cluster = with_replicas(plan.cluster, pool.name, running)


def _broker_pool(plan: PoolPlan, pool: NodePool, base: int, live: LivePool | None,
                 recorded: int | None, cluster_exists: bool) -> None:
    running = live.replicas if live is not None else None
    if running is None and recorded is None:
        if cluster_exists and pool.replicas:  # a pool added to a running cluster
            plan.added[pool.name] = tuple(base + o for o in range(pool.replicas))
        return
    if running is not None and pool.replicas < running:
        plan.scale_downs.append(ScaleDown(pool.name, pool.replicas, running, tuple(
            base + ordinal for ordinal in range(pool.replicas, running))))
        plan.cluster = with_replicas(plan.cluster, pool.name, running)
        return
    if recorded is not None and pool.replicas > recorded:
        plan.added[pool.name] = tuple(base + o for o in range(recorded, pool.replicas))
    gone = range(max(pool.replicas, running or 0), recorded or 0)
    if running is not None and gone:
        plan.cleanups.append(Cleanup(pool.name, pool.replicas, tuple(gone),
                                     tuple(base + o for o in gone), pool.storage.delete_claim))


def _storage(plan: PoolPlan, pool: NodePool, live: LivePool | None) -> None:
    if live is None or live.claim_size is None:
        return
    wanted, running = bytes_of(pool.storage.size), bytes_of(live.claim_size)
    if wanted < running:
        plan.refusals.append(Refusal(STORAGE_SHRINK, (
            f"node pool '{pool.name}' keeps its {live.claim_size} volumes: a claim cannot "
            f"shrink to {pool.storage.size}")))
        plan.cluster = with_size(plan.cluster, pool.name, live.claim_size)
    elif wanted > running:
        plan.growths.append(StorageGrowth(pool.name, pool.storage.size, live.claim_size))


def plan_pools(cluster: ClusterSpec, bases: Mapping[str, int], live: Mapping[str, LivePool],
               recorded: Mapping[str, int], known_roles: Mapping[str, frozenset[str]]
               ) -> PoolPlan:
    """`live`: the pools' StatefulSets; `recorded`: each pool's size as the status last
    accounted for it (nodes not cleaned up yet included); `known_roles`: the roles of pools
    the status knows, to tell what a removed pool was."""
    plan = PoolPlan(cluster)
    cluster_exists = bool(live) or bool(recorded)
    names = {pool.name for pool in cluster.pools}
    for name in sorted((set(live) | set(recorded)) - names):
        nodes = live[name].replicas if name in live else recorded.get(name, 0)
        if "controller" in known_roles.get(name, frozenset()):
            plan.blocked = Refusal(CONTROLLER_POOL_CHANGE, (
                f"node pool '{name}' has the controller role and cannot be removed: the "
                "quorum's voters are static (controller.quorum.voters)"))
            return plan
        if nodes > 0:
            plan.blocked = Refusal(POOL_REMOVED, (
                f"node pool '{name}' still has {nodes} node{'s' if nodes != 1 else ''}: "
                "scale it to 0 replicas (its brokers are drained first) before removing it"))
            return plan
    for pool in cluster.pools:
        running = live[pool.name].replicas if pool.name in live else recorded.get(pool.name)
        if pool.is_controller:
            _controller_pool(plan, pool, running, cluster_exists)
        else:
            _broker_pool(plan, pool, bases[pool.name], live.get(pool.name),
                         recorded.get(pool.name), cluster_exists)
        _storage(plan, pool, live.get(pool.name))
    return plan
