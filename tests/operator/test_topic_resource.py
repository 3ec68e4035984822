"""Topic objects read into wanted topics and their status and Events written back, without
a cluster."""

from __future__ import annotations

from moldau.operator.conditions import status_changed
from moldau.operator.topics.model import ReplicasChange, TopicResult
from moldau.operator.topics.resource import (
    cluster_of,
    desired_topic,
    topic_events,
    topic_status,
)


def body(**extra: object) -> dict:
    meta = {"name": "orders", "namespace": "team", "uid": "u-1",
            "creationTimestamp": "2025-03-01T10:00:00Z",
            "labels": {"moldau.io/cluster": "kc"}, "generation": 4}
    meta.update(extra.pop("metadata", {}))  # type: ignore[arg-type]
    return {"metadata": meta, **extra}


def test_the_topic_name_defaults_to_the_object_name_and_config_values_become_strings() -> None:
    found = desired_topic(body(spec={"partitions": 3, "config": {"retention.ms": 3600000}}))
    assert (found.topic_name, found.partitions, found.replicas) == ("orders", 3, None)
    assert found.config == {"retention.ms": "3600000"}
    assert (found.managed, found.ready, found.known_name) == (True, False, None)
    assert (str(found.ref), found.ref.created) == ("team/orders", "2025-03-01T10:00:00Z")
    assert cluster_of(body()) == "kc"
    assert cluster_of(body(metadata={"labels": {}})) is None

    named = desired_topic(body(spec={"topicName": "Orders_V2"}, status={
        "topicName": "Orders_V2", "conditions": [{"type": "Ready", "status": "True"}]}))
    assert (named.topic_name, named.known_name, named.ready) == ("Orders_V2", "Orders_V2", True)


def test_the_managed_annotation_false_in_any_case_unmanages() -> None:
    for value, managed in (("false", False), ("False", False), ("true", True), ("no", True)):
        found = desired_topic(body(metadata={"annotations": {"moldau.io/managed": value}}))
        assert found.managed is managed


def test_status_and_events_of_a_result() -> None:
    desired = desired_topic(body(spec={"replicas": 3}))
    moving = TopicResult(True, "ReplicasChanging", "1 of 2 partitions moving", "id-1", 2, 1,
                         ReplicasChange(3, "ongoing", "1 of 2 partitions moving"),
                         (("ReplicasChangeStarted", "moving 2 partitions"),))
    status = topic_status(desired, moving, 4, {})
    assert status["replicasChange"] == {"targetReplicas": 3, "state": "ongoing",
                                        "message": "1 of 2 partitions moving"}
    assert (status["topicName"], status["topicId"], status["observedGeneration"]) == (
        "orders", "id-1", 4)
    [ready] = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True",
                                                                 "ReplicasChanging")
    assert list(topic_events(desired, moving, {})) == [
        ("Normal", "ReplicasChangeStarted", "moving 2 partitions")]

    done = TopicResult(True, "Ready", "as wanted", "id-1", 2, 3)
    after = topic_status(desired, done, 4, status)
    assert after["replicasChange"] is None and status_changed(after, status)
    assert list(topic_events(desired, done, status)) == [
        ("Normal", "ReplicasChanged", "topic 'orders' has 3 replicas")]
    # A move that ended within the reconcile that started it.
    quick = TopicResult(True, "Ready", "as wanted", "id-1", 2, 3,
                        changes=(("ReplicasChangeStarted", "moving 2 partitions"),))
    assert [e[1] for e in topic_events(desired, quick, {})] == [
        "ReplicasChangeStarted", "ReplicasChanged"]
    # Settled: the same status again is no change (lastTransitionTime kept).
    settled = {**after, "replicasChange": None}
    assert not status_changed(topic_status(desired, done, 4, settled), settled)


def test_a_failure_warns_once_and_an_unreachable_cluster_keeps_what_was_known() -> None:
    desired = desired_topic(body())
    known = topic_status(desired, TopicResult(True, "Ready", "ok", "id-1", 3, 1), 4, {})
    lost = TopicResult(False, "ClusterUnreachable", "KafkaCluster kc did not answer: x")
    status = topic_status(desired, lost, 4, known)
    assert (status["topicId"], status["partitions"], status["replicas"]) == ("id-1", 3, 1)
    assert list(topic_events(desired, lost, known)) == [
        ("Warning", "ClusterUnreachable", "KafkaCluster kc did not answer: x")]
    assert list(topic_events(desired, lost, status)) == []
    conflict = TopicResult(False, "ResourceConflict", "Managed by team/first")
    assert topic_status(desired, conflict, 4, known)["topicId"] is None
