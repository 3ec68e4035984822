"""One reconcile of a KafkaCluster, top to bottom: parse the spec (a spec that cannot run is
reported, never raised), apply every object, read the pods and the cluster, roll one pod if
its config changed, and compose the status. Each step is safe to run again."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod, Service

from moldau.client.errors import KafkaError
from moldau.operator import naming, services, status
from moldau.operator.apply import ApplyError, Change, apply_all
from moldau.operator.clusterstate import Expected, Observed, ObserveError, assess, observe
from moldau.operator.external import ExternalAddresses, resolve
from moldau.operator.objects import desired_objects, owner_reference, with_owner
from moldau.operator.resource import BROKER_IMAGE_ENV, DEFAULT_BROKER_IMAGE
from moldau.operator.rolling import RunningPod, next_step
from moldau.operator.spec import ClusterSpec, SpecError, parse_spec
from moldau.operator.topics.clients import ClusterClient, ClusterClients
from moldau.operator.topics.reconciler import Inventory
from moldau.operator.workloads import CONFIG_HASH_ANNOTATION

# (reason, message, warning?) -> a Kubernetes Event on the KafkaCluster.
Report = Callable[[str, str, bool], None]


@dataclass(frozen=True)
class Outcome:
    status: dict[str, Any]
    ready: bool
    reason: str


def default_image() -> str:
    return os.environ.get(BROKER_IMAGE_ENV) or DEFAULT_BROKER_IMAGE


def known_bases(previous: Mapping[str, Any]) -> dict[str, int]:
    return {entry["name"]: int(entry["nodeIdBase"])
            for entry in previous.get("nodePools") or [] if "nodeIdBase" in entry}


def bootstrap_servers(cluster: ClusterSpec) -> list[str]:
    return naming.bootstrap_servers(cluster.name, cluster.namespace,
                                    [listener.port for listener in cluster.listeners
                                     if not listener.external])


def _is_ready(pod: Pod) -> bool:
    conditions = (pod.status and pod.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


async def external_addresses(client: AsyncClient, cluster: ClusterSpec) -> ExternalAddresses:
    """The external listeners' addresses, from the live per-broker Services and the nodes
    the broker pods run on."""
    live = {svc.metadata.name: svc.to_dict() async for svc in client.list(
        Service, namespace=cluster.namespace, labels={naming.CLUSTER_LABEL: cluster.name})}
    host_ips = {name: pod.status.hostIP for name, pod in (await _pods(client, cluster)).items()
                if pod.status and pod.status.hostIP}
    return resolve(cluster, live, host_ips)


async def _pods(client: AsyncClient, cluster: ClusterSpec) -> dict[str, Pod]:
    return {pod.metadata.name: pod async for pod in client.list(
        Pod, namespace=cluster.namespace, labels=naming.selector(cluster))}


def _running(cluster: ClusterSpec, bases: Mapping[str, int], pods: Mapping[str, Pod],
             hashes: Mapping[str, str]) -> list[RunningPod]:
    running = []
    for pool in cluster.pools:
        for ordinal in range(pool.replicas):
            pod = pods.get(naming.pod(cluster, pool, ordinal))
            if pod is None:
                continue
            annotations = pod.metadata.annotations or {}
            running.append(RunningPod(pod.metadata.name, bases[pool.name] + ordinal,
                                      pool.is_controller, _is_ready(pod),
                                      annotations.get(CONFIG_HASH_ANNOTATION),
                                      hashes[pool.name]))
    return running


async def _inventory(topics: ClusterClient, managed: Collection[str]) -> Inventory | None:
    try:
        return await topics.reconciler.inventory(managed)
    except (KafkaError, OSError):
        return None


async def reconcile(client: AsyncClient, *, name: str, namespace: str, uid: str,
                    generation: int, spec: Mapping[str, Any], previous: Mapping[str, Any],
                    report: Report, clients: ClusterClients | None = None,
                    managed_topics: Collection[str] = ()) -> Outcome:
    """`clients` gives the cluster's shared admin client (else one is made per read), and
    with it the status lists the topics no Topic resource (`managed_topics`) manages."""
    try:
        cluster = parse_spec(name, namespace, spec, default_image())
    except SpecError as exc:
        return Outcome(status.invalid(generation, "InvalidSpec", str(exc), previous),
                       False, "InvalidSpec")
    bases = naming.assign_node_id_bases([pool.name for pool in cluster.pools],
                                        known_bases(previous))
    owner = owner_reference(name, uid)
    changes: list[Change] = []
    try:
        external = None
        if any(listener.external for listener in cluster.listeners):
            # The brokers' own Services first: their addresses go into the brokers' config.
            changes += await apply_all(client, with_owner(services.per_broker(cluster), owner))
            external = await external_addresses(client, cluster)
        manifests = desired_objects(cluster, bases, owner, external)
        changes += await apply_all(client, manifests)
    except ApplyError as exc:
        return Outcome(status.invalid(generation, "ApplyFailed", str(exc), previous),
                       False, "ApplyFailed")
    for change in changes:
        report(change.action, f"{change.action} {change.kind} {change.name}", False)

    observed: Observed | None = None
    error = None
    bootstrap = bootstrap_servers(cluster)
    topics = await clients.get((namespace, name), name, bootstrap) if clients else None
    try:
        observed = await observe(bootstrap, admin=topics.admin if topics else None)
    except ObserveError as exc:
        error = str(exc)
    inventory = None
    if observed is not None and topics is not None:
        inventory = await _inventory(topics, managed_topics)
    expected = Expected(status.node_ids(cluster, bases, broker=True),
                        status.node_ids(cluster, bases, broker=False))
    verdict = assess(expected, observed, error)

    pods = await _pods(client, cluster)
    hashes = {m["metadata"]["labels"][naming.POOL_LABEL]:
              m["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
              for m in manifests if m["kind"] == "StatefulSet"}
    step = next_step(_running(cluster, bases, pods, hashes), verdict.ready,
                     observed.leader_id if observed else -1)
    if step.restart is not None:
        try:
            await client.delete(Pod, step.restart, namespace=namespace)
            report("RestartPod", step.message or step.restart, False)
        except ApiError as exc:
            report("RestartFailed", f"{step.restart}: {exc.status.message}", True)
    rolling = step.message
    if changes and rolling is None:
        rolling = "; ".join(f"{c.action.lower()} {c.kind} {c.name}" for c in changes)
    if external is not None and external.waiting and rolling is None:
        rolling = "waiting for the addresses of Services " + ", ".join(external.waiting)
    pod_states = {pod_name: status.PodState(pod_name, _is_ready(pod))
                  for pod_name, pod in pods.items()}
    composed = status.compose(cluster, generation, bases, pod_states, observed, verdict,
                              rolling, previous, inventory,
                              external.bootstrap if external else {})
    return Outcome(composed, verdict.ready, verdict.reason)
