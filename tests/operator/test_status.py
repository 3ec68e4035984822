"""The status composed from what was observed: phase, conditions that keep their transition
time while settled, bootstrap addresses, per-node state."""

from __future__ import annotations

from moldau.operator.clusterstate import Assessment, Observed
from moldau.operator.spec import parse_spec
from moldau.operator.status import PodState, compose, invalid
from moldau.operator.topics.reconciler import inventory

SPEC = {"nodePools": [{"name": "dual", "roles": ["controller", "broker"], "replicas": 2,
                       "storage": {"size": "1Gi"}}],
        "listeners": [{"name": "ext", "port": 9094, "type": "nodeport"},
                      {"name": "plain", "port": 9092}]}
CLUSTER = parse_spec("kc", "ns", SPEC, "img")
BASES = {"dual": 0}
PODS = {"kc-dual-0": PodState("kc-dual-0", True), "kc-dual-1": PodState("kc-dual-1", True)}
SEEN = Observed("cid", frozenset({0, 1}), 1, 4, frozenset({0, 1}), frozenset())
READY = Assessment(True, "Ready", "2 brokers registered; quorum leader 1 in epoch 4")


def test_a_ready_cluster() -> None:
    status = compose(CLUSTER, 3, BASES, PODS, SEEN, READY, None, {})
    assert status["phase"] == "Ready"
    assert status["observedGeneration"] == 3
    assert status["readyBrokers"] == "2/2"
    assert status["controllers"] == 2
    assert status["clusterId"] == "cid"
    assert status["quorum"] == {"leaderId": 1, "leaderEpoch": 4, "voters": [0, 1]}
    # The internal listener first: the Bootstrap printer column shows it.
    assert status["listeners"][0] == {"name": "plain", "type": "internal",
                                      "bootstrapServers": "kc-bootstrap.ns.svc:9092"}
    assert status["nodes"][1] == {"nodeId": 1, "pod": "kc-dual-1", "pool": "dual",
                                  "roles": ["broker", "controller"], "podReady": True,
                                  "registered": True, "voter": True, "quorumLeader": True}
    ready = status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Ready")


def test_a_settled_status_is_the_same_status() -> None:
    first = compose(CLUSTER, 3, BASES, PODS, SEEN, READY, None, {})
    again = compose(CLUSTER, 3, BASES, PODS, SEEN, READY, None, first)
    assert again == first


def test_a_broker_gone_is_degraded_with_the_reason() -> None:
    seen = Observed("cid", frozenset({0}), 1, 4, frozenset({0, 1}), frozenset())
    verdict = Assessment(False, "BrokersNotRegistered", "brokers 1 are not registered")
    status = compose(CLUSTER, 3, BASES, PODS, seen, verdict, None, {})
    assert status["phase"] == "Degraded"
    degraded = status["conditions"][2]
    assert (degraded["status"], degraded["reason"]) == ("True", "BrokersNotRegistered")


def test_an_invalid_spec_is_failed_with_the_reason() -> None:
    status = invalid(5, "InvalidSpec", "no node pool has the broker role", {})
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["reason"] == "InvalidSpec"
    assert status["conditions"][0]["message"] == "no node pool has the broker role"


def test_the_topics_no_topic_resource_manages_are_counted_and_named() -> None:
    found = inventory(["orders", "audit", "legacy-b", "legacy-a"], ["orders", "gone"], limit=2)
    status = compose(CLUSTER, 3, BASES, PODS, SEEN, READY, None, {}, found)
    assert status["topics"] == {"managed": 1, "unmanaged": 3,
                                "unmanagedNames": ["audit", "legacy-a"]}
    # Not read this time: the status does not say (the last one written stays).
    assert "topics" not in compose(CLUSTER, 3, BASES, PODS, SEEN, READY, None, {})
