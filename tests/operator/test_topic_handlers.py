"""The kopf handlers of Topic resources called as kopf calls them (a body, a patch, the two
indexes), against a three-node LocalCluster and without a Kubernetes API: the status they
patch, the Events they post, and when deletion releases the finalizer."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import pytest
from kopf._core.engines import posting

from e2e.support import unique
from moldau.client import Admin
from moldau.cluster import LocalCluster, free_base_port
from moldau.operator import topic_handlers
from moldau.operator.topic_handlers import (
    CLUSTER_CLIENTS,
    configure_topics,
    topic_changed,
    topic_deleted,
)
from moldau.operator.topics.clients import API_TIMEOUT
from moldau.operator.topics.resource import desired_topic

pytestmark = pytest.mark.timeout(300)
LOG = logging.getLogger("test")


def topic_body(name: str, spec: dict, *, deleting_since: float | None = None,
               status: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"uid-{name}",
                            "creationTimestamp": "2025-01-01T00:00:00Z", "generation": 1,
                            "labels": {"moldau.io/cluster": "kc"}}
    if deleting_since is not None:
        stamp = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=deleting_since)
        meta["deletionTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "moldau.io/v1alpha1", "kind": "Topic", "metadata": meta,
            "spec": spec, "status": status or {}}


class Events:
    """kopf's Events of the handlers called so far, as (type, reason, message)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.seen: list[tuple[str, str, str]] = []

    def __call__(self) -> list[tuple[str, str, str]]:
        while not self.queue.empty():
            event = self.queue.get_nowait()
            self.seen.append((event.type, event.reason, event.message))
        return self.seen


def with_events(scenario: Callable[[Events], Awaitable[None]]) -> None:
    """Run `scenario` with kopf's event posting collected."""
    async def main() -> None:
        events = Events()
        posting.settings_var.set(kopf.OperatorSettings())
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(events.queue)
        try:
            await scenario(events)
        finally:
            await CLUSTER_CLIENTS.close()
    asyncio.run(main())


def indexes(bootstrap: str | None, *bodies: dict) -> dict[str, dict]:
    clusters = {("team", "kc"): [tuple(bootstrap.split(","))]} if bootstrap else {}
    claims: dict = {}
    for body in bodies:
        desired = desired_topic(body)
        claims.setdefault(("team", "kc", desired.topic_name), []).append(desired)
    return {"kafka_clusters": clusters, "topic_claims": claims}


async def changed(body: dict, index: dict[str, dict]) -> dict:
    patch = kopf.Patch()
    await topic_changed(body=kopf.Body(body), patch=patch, logger=LOG, **index)
    return dict(patch.get("status") or {})


def test_a_topic_is_created_then_deleted_with_its_status_and_events(cluster: LocalCluster
                                                                     ) -> None:
    name = unique("handled")
    body = topic_body(name, {"partitions": 2, "replicas": 3,
                             "config": {"retention.ms": 3600000}})

    async def scenario(events: Events) -> None:
        status = await changed(body, indexes(cluster.bootstrap_servers, body))
        ready = status["conditions"][0]
        assert (ready["status"], ready["reason"]) == ("True", "Ready")
        assert (status["topicName"], status["partitions"], status["replicas"]) == (name, 2, 3)
        assert status["topicId"] and status["observedGeneration"] == 1
        assert events() == [("Normal", "TopicCreated", f"created topic '{name}'")]
        # Reconciled again with that status: nothing to write, nothing to say.
        body["status"] = status
        assert await changed(body, indexes(cluster.bootstrap_servers, body)) == {}
        assert len(events()) == 1

        going = topic_body(name, body["spec"], deleting_since=1, status=status)
        await topic_deleted(body=kopf.Body(going), logger=LOG,
                            **indexes(cluster.bootstrap_servers, going))
        assert events()[-1] == ("Normal", "TopicDeleted", f"deleted topic '{name}'")

    with_events(scenario)
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        assert name not in admin.list_topics()


def test_refusals_warn_once_with_kafkas_reason(cluster: LocalCluster) -> None:
    name = unique("refused")
    body = topic_body(name, {"partitions": 1, "config": {"cleanup.policy": "sometimes"}})

    async def scenario(events: Events) -> None:
        status = await changed(body, indexes(cluster.bootstrap_servers, body))
        assert status["conditions"][0]["reason"] == "INVALID_CONFIG"
        assert [e[:2] for e in events()] == [("Warning", "INVALID_CONFIG")]
        body["status"] = status
        await changed(body, indexes(cluster.bootstrap_servers, body))
        assert len(events()) == 1

        unlabelled = topic_body(name, {})
        unlabelled["metadata"]["labels"] = {}
        status = await changed(unlabelled, indexes(cluster.bootstrap_servers))
        assert status["conditions"][0]["reason"] == "InvalidResource"
        status = await changed(body, indexes(None, body))
        assert status["conditions"][0]["message"] == "KafkaCluster kc not found in namespace team"

    with_events(scenario)


def test_the_finalizer_never_outlives_the_cluster(cluster: LocalCluster) -> None:
    name = unique("orphan")
    dead = f"127.0.0.1:{free_base_port(1)}"
    configure_topics(deletion_timeout=30)
    CLUSTER_CLIENTS.timeout = 1.0

    async def scenario(events: Events) -> None:
        # The KafkaCluster is gone: released at once.
        gone = topic_body(name, {}, deleting_since=0)
        await topic_deleted(body=kopf.Body(gone), logger=LOG, **indexes(None, gone))
        assert events()[-1] == ("Normal", "FinalizerReleased",
                              f"KafkaCluster kc is gone: topic '{name}' has nothing to be "
                              "deleted from")
        # Unreachable: tried again until the limit...
        early = topic_body(name, {}, deleting_since=5)
        with pytest.raises(kopf.TemporaryError, match="not deleted yet: KafkaCluster kc did "
                                                      "not answer"):
            await topic_deleted(body=kopf.Body(early), logger=LOG, **indexes(dead, early))
        # ... then released with a Warning saying the topic may remain.
        late = topic_body(name, {}, deleting_since=31)
        await topic_deleted(body=kopf.Body(late), logger=LOG, **indexes(dead, late))
        kind, reason, message = events()[-1]
        assert (kind, reason) == ("Warning", "FinalizerReleased")
        assert message.startswith(f"KafkaCluster kc did not delete topic '{name}' for 3")
        assert "(limit 30 s); the topic may remain in Kafka: KafkaCluster kc did not " \
               "answer" in message
        # Unmanaged: released without asking Kafka anything.
        kept = topic_body(name, {}, deleting_since=0)
        kept["metadata"]["annotations"] = {"moldau.io/managed": "false"}
        count = len(events())
        await topic_deleted(body=kopf.Body(kept), logger=LOG, **indexes(dead, kept))
        assert len(events()) == count

    try:
        with_events(scenario)
    finally:
        configure_topics(deletion_timeout=topic_handlers.DEFAULT_DELETION_TIMEOUT)
        CLUSTER_CLIENTS.timeout = API_TIMEOUT
