"""Topic objects as Kubernetes holds them, read into wanted topics and written back as a
status (pure): the cluster label, the managed annotation, spec.topicName defaulting to the
object's name, the Ready condition with its reason, and the Events a result is worth."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from moldau.operator.conditions import condition, now
from moldau.operator.resource import CLUSTER_LABEL, MANAGED_ANNOTATION
from moldau.operator.topics.model import DesiredTopic, TopicRef, TopicResult
from moldau.operator.topics.plan import CONFLICT

INVALID = "InvalidResource"
CLUSTER_NOT_FOUND = "ClusterNotFound"
# (Event type, reason, message)
Event = tuple[str, str, str]


def cluster_of(body: Mapping[str, Any]) -> str | None:
    """The KafkaCluster (same namespace) the Topic's moldau.io/cluster label names."""
    return (body["metadata"].get("labels") or {}).get(CLUSTER_LABEL) or None


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or ())


def desired_topic(body: Mapping[str, Any]) -> DesiredTopic:
    meta = body["metadata"]
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    managed = (meta.get("annotations") or {}).get(MANAGED_ANNOTATION, "").strip().lower() \
        != "false"
    ref = TopicRef(meta["namespace"], meta["name"], meta["uid"],
                   meta.get("creationTimestamp") or "")
    return DesiredTopic(
        ref, spec.get("topicName") or meta["name"], spec.get("partitions"),
        spec.get("replicas"),
        {str(key): str(value) for key, value in (spec.get("config") or {}).items()},
        managed=managed, ready=_ready(status), known_name=status.get("topicName"))


def missing_label() -> TopicResult:
    return TopicResult(False, INVALID, f"the label {CLUSTER_LABEL} is missing: it names the "
                                       "KafkaCluster the topic belongs to")


def cluster_not_found(cluster: str, namespace: str) -> TopicResult:
    return TopicResult(False, CLUSTER_NOT_FOUND,
                       f"KafkaCluster {cluster} not found in namespace {namespace}")


def topic_status(desired: DesiredTopic, result: TopicResult, generation: int,
                 previous: Mapping[str, Any]) -> dict[str, Any]:
    """The whole status. What the topic looks like is kept from before when this result
    could not see it (cluster unreachable); a resource in conflict shows none."""
    facts: dict[str, Any] = {"topicId": result.topic_id, "partitions": result.partitions,
                             "replicas": result.replicas}
    if result.topic_id is None and result.reason != CONFLICT:
        facts = {key: previous.get(key) for key in facts}
    change = result.replicas_change
    return {
        "observedGeneration": generation,
        "topicName": desired.topic_name,
        **facts,
        "replicasChange": None if change is None else {
            "targetReplicas": change.target, "state": change.state,
            "message": change.message},
        "conditions": [condition("Ready", result.ready, result.reason, result.message,
                                 previous.get("conditions") or [], now())],
    }


def _ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})


def topic_events(desired: DesiredTopic, result: TopicResult, previous: Mapping[str, Any]
                 ) -> Iterable[Event]:
    """A Normal Event per change made in Kafka, a Warning when the resource stops being
    Ready or fails for another reason than before, and one when a replicas change ends
    (which may be in the reconcile that started it)."""
    for reason, message in result.changes:
        yield "Normal", reason, message
    before = _ready_condition(previous)
    if not result.ready and (before.get("status") != "False"
                             or before.get("reason") != result.reason):
        yield "Warning", result.reason, result.message
    started = any(reason == "ReplicasChangeStarted" for reason, _ in result.changes)
    if (previous.get("replicasChange") or started) and result.replicas_change is None \
            and result.ready:
        yield "Normal", "ReplicasChanged", (f"topic '{desired.topic_name}' has "
                                            f"{result.replicas} replicas")
