"""One reconcile of a KafkaCluster, top to bottom, each step safe to run again:

1. parse the spec (a spec that cannot run is reported, never raised);
2. read the cluster's StatefulSets, pods and claims, and decide what of the spec can be
   applied now (pools.py: controller pool changes and shrinking storage are refused, a
   broker pool shrinks only once drained, a pool removed with nodes blocks everything);
3. ask the cluster over the Kafka protocol (observe; and the partitions, ISRs and quorum
   when a roll, a drain or a rebalance needs them);
4. drain brokers that are to go (scaler.py), grow claims (re-creating StatefulSets whose
   claim template changes), apply every object;
5. clean up removed nodes (unregister, delete claims), rebalance after a pool grew;
6. apply the spec's dynamically updatable config keys to the running brokers
   (dynamic_config.py), then restart at most one pod that needs it, when safe
   (restarts.py, rolling.py);
7. compose the status.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Service

from moldau.client.admin import AsyncAdmin
from moldau.client.errors import KafkaError
from moldau.operator import live as kube
from moldau.operator import naming, scaler, services, status
from moldau.operator.apply import ApplyError, Change, apply_all
from moldau.operator.certificates import ensure_certificates, force_renew, security_switch
from moldau.operator.clusterstate import Expected, Observed, ObserveError, assess, observe
from moldau.operator.dynamic_config import apply_dynamic, dynamic_part
from moldau.operator.external import ExternalAddresses, resolve
from moldau.operator.kafkaview import KafkaView, read_view
from moldau.operator.objects import config_hash, desired_objects, owner_reference, with_owner
from moldau.operator.pki import PkiError
from moldau.operator.pools import (
    PoolPlan,
    Refusal,
    bytes_of,
    plan_pools,
    with_replicas,
    with_size,
)
from moldau.operator.properties import server_properties
from moldau.operator.resource import BROKER_IMAGE_ENV, DEFAULT_BROKER_IMAGE
from moldau.operator.restarts import MANUAL, Wanted, is_set, pod_facts, restart_reasons
from moldau.operator.rolling import RollPod, Step, next_step
from moldau.operator.spec import ClusterSpec, SpecError, parse_spec
from moldau.operator.topics.clients import API_TIMEOUT, ClusterClient, ClusterClients, admin_for
from moldau.operator.topics.reconciler import Inventory

# (reason, message, warning?) -> a Kubernetes Event on the KafkaCluster.
Report = Callable[[str, str, bool], None]
STORAGE_RESIZE_FAILED = "StorageResizeFailed"
DYNAMIC_CONFIG_REFUSED = "DynamicConfigRefused"


@dataclass(frozen=True)
class Outcome:
    status: dict[str, Any]
    ready: bool
    reason: str
    # The manual rolling update annotation was handed to the pods: remove it from the
    # KafkaCluster.
    clear_manual: bool = False
    # The CAs the force-renew annotation named were renewed: remove it.
    clear_force_renew: bool = False


@dataclass
class Day2:
    """What the day-2 steps of one reconcile found and did."""

    refusals: list[Refusal] = field(default_factory=list)
    operations: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    doing: list[str] = field(default_factory=list)  # for the Reconciling condition


def default_image() -> str:
    return os.environ.get(BROKER_IMAGE_ENV) or DEFAULT_BROKER_IMAGE


def known_bases(previous: Mapping[str, Any]) -> dict[str, int]:
    return {entry["name"]: int(entry["nodeIdBase"])
            for entry in previous.get("nodePools") or [] if "nodeIdBase" in entry}


def recorded_sizes(previous: Mapping[str, Any]) -> dict[str, int]:
    return {entry["name"]: int(entry["replicas"])
            for entry in previous.get("nodePools") or [] if "replicas" in entry}


def bootstrap_servers(cluster: ClusterSpec) -> list[str]:
    """Where the operator reaches the cluster: a secured cluster's replication listener
    (mutual TLS with the operator's certificate), else its internal listeners."""
    return naming.bootstrap_servers(cluster.name, cluster.namespace,
                                    naming.admin_ports(cluster))


async def external_addresses(client: AsyncClient, cluster: ClusterSpec,
                             pods: Mapping[str, Mapping[str, Any]]) -> ExternalAddresses:
    """The external listeners' addresses, from the live per-broker Services and the nodes
    the broker pods run on."""
    live = {svc.metadata.name: svc.to_dict() async for svc in client.list(
        Service, namespace=cluster.namespace, labels={naming.CLUSTER_LABEL: cluster.name})}
    return resolve(cluster, live, kube.host_ips(pods))


def _known_roles(previous: Mapping[str, Any], found: kube.LiveCluster
                 ) -> dict[str, frozenset[str]]:
    roles = {pool: kube.pool_roles(sts) for pool, sts in found.statefulsets.items()}
    for entry in previous.get("nodePools") or []:
        if entry.get("roles"):
            roles[entry["name"]] = frozenset(entry["roles"])
    return roles


def roll_pods(cluster: ClusterSpec, bases: Mapping[str, int], found: kube.LiveCluster,
              manual_all: bool) -> list[RollPod]:
    """Every pod of the cluster's pools with why it needs a restart."""
    now = datetime.datetime.now(datetime.UTC)
    pods = []
    for pool in cluster.pools:
        wanted = Wanted(config_hash(server_properties(cluster, pool, bases)), cluster.image,
                        kube.update_revision(found.statefulsets.get(pool.name)))
        for ordinal in range(pool.replicas):
            name = naming.pod(cluster, pool, ordinal)
            pod = found.pods.get(name)
            if pod is None:
                continue
            claim = found.claims.get(kube.claim_name(cluster, pool.name, ordinal))
            reasons = restart_reasons(pod_facts(pod, kube.resize_pending(claim)), wanted)
            if manual_all and MANUAL not in reasons:
                reasons += (MANUAL,)
            pods.append(RollPod(name, bases[pool.name] + ordinal, pool.is_broker,
                                pool.is_controller, kube.is_ready(pod), reasons,
                                kube.unready_for(pod, now)))
    return pods


def roll_status(step: Step) -> dict[str, Any] | None:
    if not step.pending:
        return None
    return {"pending": [{"pod": pod.name, "nodeId": pod.node_id, "reasons": list(pod.reasons)}
                        for pod in step.pending],
            "message": step.message}


async def _grow_storage(client: AsyncClient, cluster: ClusterSpec, plan: PoolPlan,
                        found: kube.LiveCluster, report: Report, day2: Day2) -> ClusterSpec:
    """Resize each claim of a pool whose storage grew, then re-create its StatefulSet
    (orphaning its pods) so that the apply gives it the new claim template. A class that
    cannot expand is reported and the pool keeps its template."""
    for growth in plan.growths:
        pool = cluster.pool(growth.pool)
        names = [name for name, claim in sorted(found.claims.items())
                 if kube.claim_ordinal(cluster, growth.pool, name) is not None
                 and bytes_of(kube.requested(claim) or "0") < bytes_of(growth.size)]
        try:
            await kube.grow_claims(client, cluster.namespace, names, growth.size)
            await kube.delete_keeping_pods(client, cluster.namespace,
                                           naming.statefulset(cluster, pool))
        except ApiError as exc:
            day2.refusals.append(Refusal(STORAGE_RESIZE_FAILED, (
                f"node pool '{growth.pool}' keeps its {growth.was} volumes: "
                f"{exc.status.message}")))
            cluster = with_size(cluster, growth.pool, growth.was)
            continue
        except TimeoutError as exc:
            day2.doing.append(str(exc))
            cluster = with_size(cluster, growth.pool, growth.was)
            continue
        report("StorageResized", f"node pool '{growth.pool}': claims {', '.join(names) or '-'} "
                                 f"grown from {growth.was} to {growth.size}", False)
    return cluster


async def _clean_up(client: AsyncClient, admin: AsyncAdmin, cluster: ClusterSpec,
                    plan: PoolPlan, found: kube.LiveCluster, report: Report,
                    day2: Day2) -> None:
    """Removed nodes whose pods are gone: unregistered, their claims deleted if asked. Until
    then the status accounts for them in their pool's size."""
    for cleanup in plan.cleanups:
        day2.sizes[cleanup.pool] = max(cleanup.ordinals) + 1
        pods = [f"{naming.statefulset(cluster, cluster.pool(cleanup.pool))}-{o}"
                for o in cleanup.ordinals]
        entry = {"pool": cleanup.pool, "from": day2.sizes[cleanup.pool],
                 "to": cleanup.replicas, "nodeIds": list(cleanup.node_ids),
                 "phase": "Removing"}
        still = [name for name in pods if name in found.pods]
        if still:
            entry["message"] = f"waiting for {', '.join(still)} to stop"
            day2.operations.setdefault("scaleDown", []).append(entry)
            continue
        try:
            await scaler.unregister(admin, cleanup.node_ids, API_TIMEOUT)
        except (KafkaError, OSError) as exc:
            entry["message"] = f"unregistering brokers: {exc}"
            day2.operations.setdefault("scaleDown", []).append(entry)
            continue
        claims = [kube.claim_name(cluster, cleanup.pool, o) for o in cleanup.ordinals]
        if cleanup.delete_claims:
            await kube.delete_claims(client, cluster.namespace, claims)
        day2.sizes[cleanup.pool] = cleanup.replicas
        ids = ", ".join(map(str, cleanup.node_ids))
        report("BrokersRemoved", f"brokers {ids} of node pool '{cleanup.pool}' unregistered; "
                                 f"claims {'deleted' if cleanup.delete_claims else 'kept'}: "
                                 f"{', '.join(claims)}", False)


def _rebalance_request(cluster: ClusterSpec, plan: PoolPlan, previous: Mapping[str, Any]
                       ) -> dict[str, Any] | None:
    """The rebalance in the status, a new one when broker pools grew."""
    if plan.added and cluster.rebalance_on_scale and previous.get("clusterId"):
        return scaler.scale_up_request(plan.added)
    current = previous.get("rebalance")
    return dict(current) if current else None


async def _inventory(topics: ClusterClient, managed: Collection[str]) -> Inventory | None:
    try:
        return await topics.reconciler.inventory(managed)
    except (KafkaError, OSError):
        return None


async def _view(admin: AsyncAdmin, wanted: bool, day2: Day2) -> KafkaView | None:
    if not wanted:
        return None
    try:
        return await read_view(admin, API_TIMEOUT)
    except ObserveError as exc:
        day2.doing.append(f"the cluster did not answer: {exc}")
        return None


async def reconcile(client: AsyncClient, *, name: str, namespace: str, uid: str,
                    generation: int, spec: Mapping[str, Any], previous: Mapping[str, Any],
                    report: Report, clients: ClusterClients | None = None,
                    managed_topics: Collection[str] = (),
                    annotations: Mapping[str, Any] | None = None) -> Outcome:
    """`clients` gives the cluster's shared admin client (else one is made for this
    reconcile), and with it the status lists the topics no Topic resource
    (`managed_topics`) manages. `annotations`: the KafkaCluster's own."""
    try:
        requested = parse_spec(name, namespace, spec, default_image())
    except SpecError as exc:
        return Outcome(status.invalid(generation, "InvalidSpec", str(exc), previous),
                       False, "InvalidSpec")
    found = await kube.read_live(client, requested)
    bases = naming.assign_node_id_bases([pool.name for pool in requested.pools],
                                        known_bases(previous))
    plan = plan_pools(requested, bases, found.pools(), recorded_sizes(previous),
                      _known_roles(previous, found))
    if plan.blocked is not None:
        _report_refusals([plan.blocked], previous, report)
        return Outcome(status.invalid(generation, plan.blocked.reason, plan.blocked.message,
                                      previous), False, plan.blocked.reason)
    refusal = security_switch(plan.cluster, found.statefulsets)
    if refusal is not None:
        _report_refusals([refusal], previous, report)
        return Outcome(status.invalid(generation, refusal.reason, refusal.message, previous),
                       False, refusal.reason)
    security: dict[str, str] = {}
    certificate_changes: list[Change] = []
    if plan.cluster.secured:
        try:
            security, certificate_changes = await ensure_certificates(
                client, plan.cluster, owner_reference(name, uid), annotations,
                await external_addresses(client, plan.cluster, found.pods),
                kube.host_ips(found.pods))
        except (PkiError, ApplyError) as exc:
            return Outcome(status.invalid(generation, "CertificatesFailed", str(exc), previous),
                           False, "CertificatesFailed")
    for change in certificate_changes:
        report(change.action, f"{change.action} {change.kind} {change.name}", False)
    bootstrap = bootstrap_servers(plan.cluster)
    topics = (await clients.get((namespace, name), name, bootstrap, security)
              if clients else None)
    admin = topics.admin if topics is not None else admin_for(bootstrap, security=security)
    try:
        outcome = await _reconcile(client, plan, bases, found, admin, topics, uid, generation,
                                   previous, report, managed_topics, annotations)
        if plan.cluster.secured and force_renew(annotations):
            outcome = dataclasses.replace(outcome, clear_force_renew=True)
        return outcome
    finally:
        if topics is None:
            await admin.close()


async def _reconcile(client: AsyncClient, plan: PoolPlan, bases: dict[str, int],
                     found: kube.LiveCluster, admin: AsyncAdmin, topics: ClusterClient | None,
                     uid: str, generation: int, previous: Mapping[str, Any], report: Report,
                     managed_topics: Collection[str], annotations: Mapping[str, Any] | None
                     ) -> Outcome:
    cluster = plan.cluster
    namespace = cluster.namespace
    day2 = Day2(refusals=list(plan.refusals))
    observed: Observed | None = None
    error = None
    try:
        observed = await observe(bootstrap_servers(cluster), admin=admin)
    except ObserveError as exc:
        error = str(exc)
    inventory = None
    if observed is not None and topics is not None:
        inventory = await _inventory(topics, managed_topics)
    expected = Expected(status.node_ids(cluster, bases, broker=True),
                        status.node_ids(cluster, bases, broker=False))
    verdict = assess(expected, observed, error)

    if observed is not None:
        await _apply_dynamic(admin, cluster, report, day2)

    manual_all = is_set(annotations)
    pods = roll_pods(cluster, bases, found, manual_all)
    rebalance = _rebalance_request(cluster, plan, previous)
    busy = rebalance is not None and rebalance.get("state") in (scaler.PENDING, scaler.MOVING)
    view = await _view(admin, observed is not None and (
        busy or bool(plan.scale_downs) or any(pod.stale for pod in pods)), day2)

    # Drains first: a pool shrinks only once its leaving brokers hold nothing.
    try:
        drains = await scaler.drain_step(admin, view, plan.scale_downs, expected.brokers,
                                         API_TIMEOUT, cluster.replication_throttle)
    except (KafkaError, OSError) as exc:
        drains = scaler.Drains()
        day2.doing.append(f"draining: the cluster did not answer: {exc}")
    day2.refusals += drains.refusals
    for reason, message, warning in drains.events:
        report(reason, message, warning)
    if drains.status:
        day2.operations["scaleDown"] = list(drains.status)
    for pool, replicas in drains.shrink.items():
        cluster = with_replicas(cluster, pool, replicas)
        day2.sizes.setdefault(pool, plan.cluster.pool(pool).replicas)
    cluster = await _grow_storage(client, cluster, plan, found, report, day2)

    owner = owner_reference(cluster.name, uid)
    changes: list[Change] = []
    try:
        external = None
        if any(listener.external for listener in cluster.listeners):
            # The brokers' own Services first: their addresses go into the brokers' config.
            changes += await apply_all(client, with_owner(services.per_broker(cluster), owner))
            external = await external_addresses(client, cluster, found.pods)
        changes += await apply_all(client, desired_objects(cluster, bases, owner, external))
    except ApplyError as exc:
        return Outcome(status.invalid(generation, "ApplyFailed", str(exc), previous),
                       False, "ApplyFailed")
    for change in changes:
        report(change.action, f"{change.action} {change.kind} {change.name}", False)

    await _clean_up(client, admin, cluster, plan, found, report, day2)

    clear_manual = False
    if manual_all:
        await kube.mark_for_restart(client, namespace, [pod.name for pod in pods])
        report("ManualRollingUpdate", f"{len(pods)} pods marked for a rolling restart", False)
        clear_manual = True

    if rebalance is not None:
        if busy and not any(pod.stale for pod in pods):
            brokers = sorted(expected.brokers)
            try:
                rebalance, events = await scaler.rebalance_step(
                    admin, view, rebalance, brokers, API_TIMEOUT,
                    cluster.replication_throttle)
            except (KafkaError, OSError) as exc:
                rebalance["message"] = f"the cluster did not answer: {exc}"
                events = []
            for reason, message, warning in events:
                report(reason, message, warning)
        day2.operations["rebalance"] = rebalance
        if rebalance.get("state") in (scaler.PENDING, scaler.MOVING):
            day2.doing.append(f"rebalancing: {rebalance.get('message')}")

    step = next_step(pods, cluster_ready=verdict.ready, view=view,
                     leader_id=observed.leader_id if observed else -1)
    if step.restart is not None:
        try:
            await kube.delete_pod(client, namespace, step.restart.name)
            report("RestartPod", step.message or step.restart.name, False)
        except ApiError as exc:
            report("RestartFailed", f"{step.restart.name}: {exc.status.message}", True)
    day2.operations["roll"] = roll_status(step)

    _report_refusals(day2.refusals, previous, report)
    rolling = step.message
    for entry in day2.operations.get("scaleDown") or []:
        day2.doing.insert(0, f"scaling down node pool '{entry['pool']}': {entry['message']}")
    if rolling is None and day2.doing:
        rolling = "; ".join(day2.doing)
    if changes and rolling is None:
        rolling = "; ".join(f"{c.action.lower()} {c.kind} {c.name}" for c in changes)
    if external is not None and external.waiting and rolling is None:
        rolling = "waiting for the addresses of Services " + ", ".join(external.waiting)
    pod_states = {pod_name: status.PodState(pod_name, kube.is_ready(pod))
                  for pod_name, pod in found.pods.items()}
    composed = status.compose(cluster, generation, bases, pod_states, observed, verdict,
                              rolling, previous, inventory,
                              external.bootstrap if external else {},
                              day2.refusals, day2.operations, day2.sizes)
    return Outcome(composed, verdict.ready, verdict.reason, clear_manual)


async def _apply_dynamic(admin: AsyncAdmin, cluster: ClusterSpec, report: Report,
                         day2: Day2) -> None:
    """The spec's dynamically updatable keys, applied to the running brokers at once (one
    IncrementalAlterConfigs on the cluster default) rather than by rolling pods."""
    wanted = dynamic_part(cluster.config)
    try:
        applied = await apply_dynamic(admin, cluster.config, API_TIMEOUT)
    except (KafkaError, OSError) as exc:
        message = f"dynamic broker configs not applied: {exc}"
        if isinstance(exc, KafkaError) and exc.retriable is False:
            day2.refusals.append(Refusal(DYNAMIC_CONFIG_REFUSED, message))
        else:
            day2.doing.append(message)
        day2.operations["dynamicConfig"] = {"clusterDefault": wanted, "message": message}
        return
    day2.operations["dynamicConfig"] = {"clusterDefault": wanted}
    if applied is not None:
        report("DynamicConfigApplied", "applied to every broker without a restart: "
                                       f"{applied.describe()}", False)


def _report_refusals(refusals: list[Refusal], previous: Mapping[str, Any],
                     report: Report) -> None:
    """A Warning Event when what is refused changes (not at every reconcile)."""
    old = next((c for c in previous.get("conditions") or []
                if c.get("type") == "SpecApplied"), {})
    message = "; ".join(refusal.message for refusal in refusals)
    if refusals and old.get("message") != message:
        report(refusals[0].reason, message, True)
