"""Reading pods, StatefulSets and claims as the roller and scaler need them."""

from __future__ import annotations

import datetime

from moldau.operator.live import (
    LiveCluster,
    claim_name,
    claim_ordinal,
    is_ready,
    pool_roles,
    resize_pending,
    unready_for,
    update_revision,
)
from moldau.operator.pools import LivePool
from moldau.operator.spec import parse_spec
from moldau.operator.workloads import statefulset

CLUSTER = parse_spec("kc", "ns", {
    "nodePools": [{"name": "controllers", "roles": ["controller"], "replicas": 1,
                   "storage": {"size": "1Gi"}},
                  {"name": "brokers", "roles": ["broker"], "replicas": 3,
                   "storage": {"size": "2Gi"}}],
    "listeners": [{"name": "plain", "port": 9092}]}, "img")
NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.UTC)


def pod(ready: str | None, since: str = "2025-01-01T00:08:00Z", deleting: bool = False
        ) -> dict:
    meta: dict = {"creationTimestamp": "2025-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:09:00Z"
    conditions = [] if ready is None else [
        {"type": "Ready", "status": ready, "lastTransitionTime": since}]
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_readiness_and_how_long_a_pod_has_not_been_ready() -> None:
    assert is_ready(pod("True")) and unready_for(pod("True"), NOW) == 0
    assert not is_ready(pod("False")) and unready_for(pod("False"), NOW) == 120
    # Never ready: since it was made. Being deleted: not ready, whatever it says.
    assert unready_for(pod(None), NOW) == 600
    assert not is_ready(pod("True", deleting=True))


def test_a_statefulsets_wanted_revision_once_it_saw_its_spec() -> None:
    sts = {"metadata": {"generation": 3},
           "status": {"observedGeneration": 3, "updateRevision": "kc-brokers-abc"}}
    assert update_revision(sts) == "kc-brokers-abc"
    assert update_revision({**sts, "metadata": {"generation": 4}}) is None
    assert update_revision(None) is None


def test_roles_sizes_and_claims_of_the_pools_statefulsets() -> None:
    controllers = statefulset(CLUSTER, CLUSTER.pool("controllers"), 0, "h")
    brokers = statefulset(CLUSTER, CLUSTER.pool("brokers"), 100, "h")
    assert pool_roles(controllers) == {"controller"}
    assert pool_roles(brokers) == {"broker"}
    found = LiveCluster(statefulsets={"controllers": controllers, "brokers": brokers})
    assert found.pools() == {"controllers": LivePool(1, "1Gi"), "brokers": LivePool(3, "2Gi")}
    assert claim_name(CLUSTER, "brokers", 2) == "data-kc-brokers-2"
    assert claim_ordinal(CLUSTER, "brokers", "data-kc-brokers-12") == 12
    assert claim_ordinal(CLUSTER, "brokers", "data-kc-brokers-big-1") is None
    assert claim_ordinal(CLUSTER, "controllers", "data-kc-brokers-1") is None


def test_a_claim_waiting_for_its_file_system_to_grow() -> None:
    waiting = {"status": {"conditions": [{"type": "FileSystemResizePending",
                                          "status": "True"}]}}
    assert resize_pending(waiting)
    assert not resize_pending({"status": {"conditions": [{"type": "Resizing",
                                                          "status": "True"}]}})
    assert not resize_pending(None)
