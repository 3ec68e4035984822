"""kopf handlers of Topic resources: create, update, resume and a resync timer submit the
resource's wanted topic to its cluster's batcher (one admin client per cluster, many
resources per request) and write the status it comes back with; deletion deletes the Kafka
topic, and the finalizer never outlives the cluster: a cluster that is gone releases it at
once, one that does not answer after `deletion_timeout` seconds too, with an Event each.

Two kopf indexes, filled before any handler runs, tell every handler the bootstrap address
of each KafkaCluster and every resource naming each topic (for ResourceConflict)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Hashable, Mapping
from typing import Any

import kopf

from moldau.operator import naming
from moldau.operator.conditions import status_changed
from moldau.operator.metrics import TOPIC_RECONCILE_SECONDS, TOPIC_RECONCILES
from moldau.operator.resource import GROUP, PLURAL, TOPIC_PLURAL, VERSION
from moldau.operator.spec import SpecError, parse_spec
from moldau.operator.topics.clients import ClusterClient, ClusterClients
from moldau.operator.topics.model import DesiredTopic, TopicResult
from moldau.operator.topics.reconciler import unmanaged
from moldau.operator.topics.resource import (
    cluster_not_found,
    cluster_of,
    desired_topic,
    missing_label,
    topic_events,
    topic_status,
)

TOPIC_RESYNC_SECONDS = 30.0
DEFAULT_DELETION_TIMEOUT = 60.0
# How soon a deletion that could not reach the cluster is tried again.
DELETION_RETRY_SECONDS = 5.0

# The admin client and batcher of each cluster, shared with the KafkaCluster handlers.
CLUSTER_CLIENTS = ClusterClients()


class Settings:
    deletion_timeout = DEFAULT_DELETION_TIMEOUT


def configure_topics(*, deletion_timeout: float) -> None:
    Settings.deletion_timeout = deletion_timeout


def admin_ports(name: str, namespace: str, spec: Mapping[str, Any]) -> list[int]:
    """Where the operator reaches the cluster (naming.admin_ports); a spec that does not
    parse gives its internal listeners, as far as they can be read."""
    try:
        return naming.admin_ports(parse_spec(name, namespace, spec, ""))
    except (SpecError, KeyError, TypeError, ValueError):
        return [int(listener["port"]) for listener in spec.get("listeners") or ()
                if listener.get("type", "internal") == "internal" and "port" in listener]


@kopf.index(GROUP, VERSION, PLURAL)
def kafka_clusters(name: str, namespace: str, spec: kopf.Spec, **_: Any
                   ) -> dict[Hashable, tuple[str, ...]]:
    """(namespace, cluster) -> the cluster's bootstrap addresses."""
    return {(namespace, name): tuple(naming.bootstrap_servers(
        name, namespace, admin_ports(name, namespace, spec)))}


@kopf.index(GROUP, VERSION, TOPIC_PLURAL)
def topic_claims(body: kopf.Body, namespace: str, **_: Any
                 ) -> dict[Hashable, DesiredTopic] | None:
    """(namespace, cluster, topic name) -> every resource naming that topic."""
    cluster = cluster_of(body)
    if cluster is None:
        return None
    desired = desired_topic(body)
    return {(namespace, cluster, desired.topic_name): desired}


def managed_topics(claims: kopf.Index, namespace: str, cluster: str) -> set[str]:
    """The topics of a cluster that a managed Topic resource names."""
    return {key[2] for key, found in claims.items()
            if key[:2] == (namespace, cluster) and any(d.managed for d in found)}


def _first(index: kopf.Index, key: Hashable) -> Any:
    return next(iter(index.get(key, ())), None)


async def cluster_client(namespace: str, cluster: str, clusters: kopf.Index
                          ) -> ClusterClient | None:
    bootstrap = _first(clusters, (namespace, cluster))
    if bootstrap is None:
        return None
    return await CLUSTER_CLIENTS.get((namespace, cluster), cluster, bootstrap)


async def _result(body: kopf.Body, desired: DesiredTopic, clusters: kopf.Index,
                  claims: kopf.Index) -> TopicResult:
    cluster = cluster_of(body)
    if cluster is None:
        return missing_label()
    if not desired.managed:
        return unmanaged(desired)
    namespace = desired.ref.namespace
    client = await cluster_client(namespace, cluster, clusters)
    if client is None:
        return cluster_not_found(cluster, namespace)
    claimants = list(claims.get((namespace, cluster, desired.topic_name), ()))
    return await client.apply(desired, claimants)


async def _reconcile(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
                     clusters: kopf.Index, claims: kopf.Index) -> None:
    started = time.monotonic()
    desired = desired_topic(body)
    previous = body.get("status") or {}
    try:
        result = await _result(body, desired, clusters, claims)
    except Exception:
        TOPIC_RECONCILES.labels("error").inc()
        raise
    finally:
        TOPIC_RECONCILE_SECONDS.observe(time.monotonic() - started)
    TOPIC_RECONCILES.labels("ready" if result.ready else "not_ready").inc()
    for kind, reason, message in topic_events(desired, result, previous):
        kopf.event(body, type=kind, reason=reason, message=message)
    if not result.ready:
        logger.info("topic %s: %s: %s", desired.topic_name, result.reason, result.message)
    status = topic_status(desired, result, body["metadata"].get("generation", 0), previous)
    if status_changed(status, previous):
        patch.status.update(status)


@kopf.on.resume(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.create(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.update(GROUP, VERSION, TOPIC_PLURAL)
async def topic_changed(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
                        kafka_clusters: kopf.Index, topic_claims: kopf.Index,
                        **_: Any) -> None:
    await _reconcile(body, patch, logger, kafka_clusters, topic_claims)


@kopf.timer(GROUP, VERSION, TOPIC_PLURAL, interval=TOPIC_RESYNC_SECONDS,
            initial_delay=TOPIC_RESYNC_SECONDS)
async def topic_resync(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger,
                       kafka_clusters: kopf.Index, topic_claims: kopf.Index,
                       **_: Any) -> None:
    await _reconcile(body, patch, logger, kafka_clusters, topic_claims)


def _deleting_for(body: kopf.Body) -> float:
    """Seconds since the resource was asked to go."""
    stamp = body["metadata"].get("deletionTimestamp")
    if not stamp:
        return 0.0
    since = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (datetime.datetime.now(datetime.UTC) - since).total_seconds()


def _release(body: kopf.Body, message: str, warning: bool) -> None:
    kopf.event(body, type="Warning" if warning else "Normal", reason="FinalizerReleased",
               message=message)


@kopf.on.delete(GROUP, VERSION, TOPIC_PLURAL)
async def topic_deleted(body: kopf.Body, logger: kopf.Logger, kafka_clusters: kopf.Index,
                        topic_claims: kopf.Index, **_: Any) -> None:
    """Returning lets kopf remove the finalizer; raising TemporaryError tries again."""
    desired = desired_topic(body)
    name, namespace = desired.topic_name, desired.ref.namespace
    cluster = cluster_of(body)
    if not desired.managed or cluster is None:
        return
    client = await cluster_client(namespace, cluster, kafka_clusters)
    if client is None:
        _release(body, f"KafkaCluster {cluster} is gone: topic '{name}' has nothing to be "
                       "deleted from", warning=False)
        return
    claimants = list(topic_claims.get((namespace, cluster, name), ()))
    result = await client.delete(desired, claimants)
    if result.done:
        warning = result.reason not in ("TopicDeleted", "TopicNotFound")
        kopf.event(body, type="Warning" if warning else "Normal", reason=result.reason,
                   message=result.message)
        return
    waited = _deleting_for(body)
    timeout = Settings.deletion_timeout
    if waited >= timeout:
        _release(body, f"KafkaCluster {cluster} did not delete topic '{name}' for "
                       f"{waited:.0f} s (limit {timeout:.0f} s); the topic may remain in "
                       f"Kafka: {result.message}", warning=True)
        return
    logger.info("topic %s not deleted yet (%s); trying again", name, result.message)
    raise kopf.TemporaryError(f"topic '{name}' not deleted yet: {result.message}",
                              delay=min(DELETION_RETRY_SECONDS, timeout - waited))


@kopf.on.event(GROUP, VERSION, PLURAL)
async def cluster_event(event: kopf.RawEvent, name: str, namespace: str, **_: Any) -> None:
    """A deleted KafkaCluster's admin client goes with it."""
    if event.get("type") == "DELETED":
        await CLUSTER_CLIENTS.drop((namespace, name))


@kopf.on.cleanup()
async def close_cluster_clients(**_: Any) -> None:
    await CLUSTER_CLIENTS.close()
