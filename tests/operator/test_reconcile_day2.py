"""The whole reconcile pipeline, round after round, with pods that are real broker processes
(kube_double.KubeDouble over a LocalCluster of three broker+controller nodes 1-3, pool
`nodes`, and broker-only node 4, pool `brokers`): a config change rolls every pod once, in
order, under acks=all produce with no partition under min.insync.replicas, and carries on
after an operator restart; a manual rolling update; controller pool changes, shrinking
storage and an impossible drain are refused; storage grows by re-creating the StatefulSet;
the broker pool shrinks to 0 (drained, unregistered, claim deleted) and grows back
(rebalanced)."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.conftest import FAST_FAILOVER
from e2e.kube.load import IsrWatch
from e2e.support import ck_consume_all, ck_producer, unique, wait_until
from moldau.client import Admin
from moldau.client.admin import ConfigResource, ConfigSource, NewTopic
from moldau.cluster import LocalCluster, free_base_port
from moldau.operator.balance import is_balanced
from moldau.operator.reconcile import Outcome, reconcile
from moldau.operator.topics.clients import ClusterClients
from tests.operator.kube_double import KubeDouble

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "ns"
# A change that needs a restart (dynamically updatable keys are applied without one).
RESTART_CONFIG = {"offsets.retention.minutes": "20160"}


def node_of(pod: str) -> int:
    pool, ordinal = pod.rsplit("-", 1)
    return (1 if pool == "kc-nodes" else 4) + int(ordinal)


def spec(*, brokers: int = 1, nodes: int = 3, size: str = "1Gi", config: dict | None = None
         ) -> dict:
    return {"nodePools": [
        {"name": "nodes", "roles": ["controller", "broker"], "replicas": nodes,
         "storage": {"size": "1Gi"}},
        {"name": "brokers", "roles": ["broker"], "replicas": brokers,
         "storage": {"size": size, "deleteClaim": True}}],
        "listeners": [{"name": "plain", "port": 9092}], "config": config or {}}


class LocalClients(ClusterClients):
    """The cluster's admin client, pointed at the LocalCluster whatever the bootstrap
    Service's name."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(timeout=10)
        self.local = bootstrap.split(",")

    async def get(self, key: Any, name: str, bootstrap: Any, security: Any = None) -> Any:
        return await super().get(key, name, self.local, security)


class Operator:
    """reconcile() as the handlers call it, with the status kept as Kubernetes keeps it."""

    def __init__(self, kube: KubeDouble, bootstrap: str, status: dict) -> None:
        self.kube = kube
        self.clients = LocalClients(bootstrap)
        self.status = status
        self.events: list[tuple[str, str, bool]] = []
        self.annotations: dict[str, str] = {}
        self.phases: set[str] = set()  # the scale-down phases the status went through

    async def once(self, raw: dict) -> Outcome:
        outcome = await reconcile(
            self.kube, name="kc", namespace=NAMESPACE, uid="uid-kc", generation=1, spec=raw,
            previous=copy.deepcopy(self.status),
            report=lambda *event: self.events.append(event), clients=self.clients,
            annotations=self.annotations)
        self.phases |= {entry["phase"] for entry in outcome.status.get("scaleDown") or []}
        for key, value in outcome.status.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        if outcome.clear_manual:
            self.annotations.pop("moldau.io/manual-rolling-update", None)
        return outcome

    def until(self, raw: dict, done: Callable[[dict], object], timeout: float, what: str,
              rounds: int | None = None) -> dict:
        """Reconcile and let the double settle, round after round, until done(status)."""
        async def main() -> dict:
            deadline = time.monotonic() + timeout
            count = 0
            try:
                while True:
                    await self.once(raw)
                    await asyncio.to_thread(self.kube.settle)
                    count += 1
                    if done(self.status) or (rounds is not None and count >= rounds):
                        return self.status
                    if time.monotonic() > deadline:
                        raise AssertionError(f"no {what} within {timeout:.0f} s; status "
                                             f"{self.status}; events {self.events[-5:]}")
                    await asyncio.sleep(1)
            finally:
                await self.clients.close()
        return asyncio.run(main())


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def settled(status: dict) -> bool:
    return status.get("phase") == "Ready" and not status.get("roll") and \
        condition(status, "Reconciling").get("status") == "False"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("day2") / "cluster", brokers=4, voters=3,
                      base_port=free_base_port(4), overrides=FAST_FAILOVER) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(local: LocalCluster) -> KubeDouble:
    return KubeDouble(local, node_of, NAMESPACE)


@pytest.fixture(scope="module")
def status(kube: KubeDouble, local: LocalCluster) -> dict:
    """The status of a first reconcile round that made every object."""
    found: dict = {"nodePools": [{"name": "nodes", "nodeIdBase": 1},
                                 {"name": "brokers", "nodeIdBase": 4}]}
    Operator(kube, local.bootstrap_servers, found).until(spec(), settled, 120, "Ready")
    return found


class Producing:
    """acks=all, idempotent, numbered records in a thread; what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._producer = ck_producer(bootstrap, acks="all")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            def done(err: Any, msg: Any, n: int = n) -> None:
                (self.errors.append(str(err)) if err else self.acked.append(n))
            self._producer.produce(self.topic, str(n).encode(), on_delivery=done)
            self._producer.poll(0.02)
            n += 1
        self._producer.flush(60)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def test_a_config_change_rolls_every_pod_once_in_order_and_resumes(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    topic = unique("roll")
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, replica_assignment={
            p: [1 + (p + i) % 4 for i in range(3)] for p in range(4)},
            configs={"min.insync.replicas": "2"})])
    leader = local.quorum().leader_id
    watch = IsrWatch(local.bootstrap_servers, [topic], interval=0.2)
    producing = Producing(local.bootstrap_servers, topic)
    changed = spec(config=RESTART_CONFIG)
    try:
        first = Operator(kube, local.bootstrap_servers, status)
        first.until(changed, lambda s: len(kube.restarted) >= 2, 300, "two restarts")
        assert status["roll"]["pending"][0]["reasons"] == ["ConfigChanged"]
        # A new operator, with nothing but what Kubernetes keeps.
        second = Operator(kube, local.bootstrap_servers, status)
        second.until(changed, settled, 600, "the roll to finish")
    finally:
        producing.stop()
        watch.stop()
    print("restarts:", kube.restarted, "ISR samples", watch.samples, "smallest",
          watch.smallest, "acked", len(producing.acked))
    followers = sorted({1, 2, 3} - {leader})
    assert kube.restarted == ["kc-brokers-0", *(f"kc-nodes-{n - 1}" for n in followers),
                              f"kc-nodes-{leader - 1}"]
    assert watch.samples > 20 and watch.smallest[topic] >= 2 and watch.under == [], (
        watch.samples, watch.smallest, watch.under)
    assert producing.errors == []
    read = ck_consume_all(local.bootstrap_servers, topic, range(4))
    values = sorted(int(r.value) for r in read)
    assert set(producing.acked) <= set(values) and len(values) == len(set(values))
    events = [message for reason, message, _ in first.events + second.events
              if reason == "RestartPod"]
    assert events[0] == "restarting kc-brokers-0: its config changed (3 more pods to go)"
    assert len(events) == 4


def test_a_manual_rolling_update_restarts_every_pod_once(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    before = len(kube.restarted)
    operator = Operator(kube, local.bootstrap_servers, status)
    operator.annotations = {"moldau.io/manual-rolling-update": "true"}
    operator.until(spec(config=RESTART_CONFIG), settled, 600, "the manual roll")
    assert sorted(kube.restarted[before:]) == ["kc-brokers-0", "kc-nodes-0", "kc-nodes-1",
                                               "kc-nodes-2"]
    assert operator.annotations == {}
    assert ("ManualRollingUpdate", "4 pods marked for a rolling restart", False) in \
        operator.events


def test_a_dynamic_config_change_is_applied_without_a_restart(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    before = len(kube.restarted)
    operator = Operator(kube, local.bootstrap_servers, status)
    live = {"log.retention.ms": "3600000", "min.insync.replicas": "2"}
    operator.until(spec(config={**RESTART_CONFIG, **live}), lambda s: settled(s) and (
        s.get("dynamicConfig") or {}).get("clusterDefault") == live, 120,
        "the dynamic config applied")
    assert kube.restarted[before:] == []
    assert [message for reason, message, _ in operator.events
            if reason == "DynamicConfigApplied"] == [
        "applied to every broker without a restart: log.retention.ms=3600000, "
        "min.insync.replicas=2"]
    resources = [ConfigResource.broker(node) for node in (1, 2, 3, 4)]
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        def everywhere() -> bool:
            found = admin.describe_configs(resources)
            return all((found[r]["log.retention.ms"].value, found[r]["log.retention.ms"].source)
                       == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                       for r in resources)
        wait_until(everywhere, 30, "every broker to apply the cluster default")
    # Keys gone from the spec are deleted from the cluster default (and the next tests start
    # from Kafka's defaults again, min.insync.replicas 1 among them).
    operator.until(spec(config=RESTART_CONFIG), lambda s: settled(s) and (
        s.get("dynamicConfig") or {}).get("clusterDefault") == {}, 120,
        "the dynamic config removed")
    assert kube.restarted[before:] == []
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        found = admin.describe_configs([ConfigResource.broker("")])
        assert found[ConfigResource.broker("")] == {}


def test_controller_changes_and_shrinking_storage_are_refused(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    operator = Operator(kube, local.bootstrap_servers, status)
    found = operator.until(spec(nodes=5, size="500Mi", config=RESTART_CONFIG),
                           lambda s: condition(s, "SpecApplied").get("status") == "False",
                           60, "a refusal", rounds=2)
    applied = condition(found, "SpecApplied")
    assert applied["reason"] == "ControllerPoolChange"
    assert applied["message"] == (
        "node pool 'nodes' keeps 3 controllers, not 5: the quorum's voters are static "
        "(controller.quorum.voters); node pool 'brokers' keeps its 1Gi volumes: a claim "
        "cannot shrink to 500Mi")
    assert kube.objects[("StatefulSet", "kc-nodes")]["spec"]["replicas"] == 3
    assert found["phase"] == "Ready"
    assert [e for e in operator.events if e[0] == "ControllerPoolChange"] == [
        ("ControllerPoolChange", applied["message"], True)]


def test_storage_grows_by_resizing_claims_and_recreating_the_statefulset(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    before = len(kube.restarted)
    operator = Operator(kube, local.bootstrap_servers, status)
    grown = spec(size="2Gi", config=RESTART_CONFIG)
    operator.until(grown, settled, 120, "grown storage")
    claim = kube.objects[("PersistentVolumeClaim", "data-kc-brokers-0")]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    template = kube.objects[("StatefulSet", "kc-brokers")]["spec"]["volumeClaimTemplates"][0]
    assert template["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert len(kube.restarted) == before  # no pod restarted for it
    assert condition(status, "SpecApplied")["status"] == "True"
    assert any(e[0] == "StorageResized" for e in operator.events)


def test_an_impossible_drain_is_refused_and_nothing_is_removed(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    topic = unique("wide")
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, replica_assignment={0: [1, 2, 3, 4]})])
    try:
        operator = Operator(kube, local.bootstrap_servers, status)
        found = operator.until(spec(brokers=0, size="2Gi", config=RESTART_CONFIG),
                               lambda s: condition(s, "SpecApplied").get("status") == "False",
                               60, "a refused drain")
        applied = condition(found, "SpecApplied")
        assert applied["reason"] == "DrainNotPossible"
        assert applied["message"].startswith(
            f"cannot remove brokers 4: topic '{topic}' has replication factor 4, and only 3 "
            "brokers would remain (1, 2, 3)")
        assert found["scaleDown"][0]["phase"] == "Refused"
        assert kube.objects[("StatefulSet", "kc-brokers")]["spec"]["replicas"] == 1
        assert local.node(4).alive
    finally:
        with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
            admin.delete_topics([topic])


def test_a_broker_pool_drains_to_zero_and_grows_back_balanced(
        kube: KubeDouble, local: LocalCluster, status: dict) -> None:
    topic = unique("scale")
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, replica_assignment={
            p: [4, 1 + p % 3] for p in range(6)})])
    producer = ck_producer(local.bootstrap_servers, acks="all")
    for n in range(600):
        producer.produce(topic, str(n).encode(), partition=n % 6)
    assert producer.flush(60) == 0
    operator = Operator(kube, local.bootstrap_servers, status)
    config = RESTART_CONFIG
    gone = operator.until(spec(brokers=0, size="2Gi", config=config),
                          lambda s: s["nodePools"][1].get("replicas") == 0, 600, "node 4 gone")
    assert not local.node(4).alive
    assert ("PersistentVolumeClaim", "data-kc-brokers-0") not in kube.objects
    reasons = [e[0] for e in operator.events]
    assert reasons.index("DrainStarted") < reasons.index("Drained") < \
        reasons.index("BrokersRemoved")
    assert {"Draining", "Removing"} <= operator.phases
    assert "scaleDown" not in gone
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        assert sorted(n.node_id for n in admin.describe_cluster(
            include_fenced_brokers=True).nodes) == [1, 2, 3]
    assert gone["readyBrokers"] == "3/3"
    assert sorted(int(r.value) for r in ck_consume_all(
        local.bootstrap_servers, topic, range(6))) == list(range(600))

    back = operator.until(spec(brokers=1, size="2Gi", config=config),
                          lambda s: (s.get("rebalance") or {}).get("state") == "Complete",
                          600, "a rebalance")
    assert back["rebalance"]["brokers"] == [4]
    with Admin({"bootstrap.servers": local.bootstrap_servers}) as admin:
        described = admin.describe_topics()
    assignment = {(t, p.partition): p.replicas for t, d in described.items()
                  for p in d.partitions}
    assert is_balanced(assignment, [1, 2, 3, 4])
