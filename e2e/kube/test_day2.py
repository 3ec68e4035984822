"""Day-2 operations on a real Kubernetes, by the operator (a process on this host), on a
KafkaCluster of one controller and three brokers: a rolling config change under acks=all
produce and a consuming group (nothing lost or read twice, no partition under
min.insync.replicas at any ISR sample, brokers first and the controller last); the manual
rolling update annotation on a pod and on the cluster; 3 -> 5 brokers rebalanced within one
replica and leadership per broker; 5 -> 3 drained first under load, the removed brokers
unregistered and their claims deleted; a drain that cannot complete refused; storage grown
without a restart and refused to shrink; a controller pool change refused. Then three
controllers and three brokers: controller followers after the brokers and the active
controller last, in a roll that carries on across an operator restart."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from e2e.chaos.checker import check
from e2e.kube.cluster_names import install
from e2e.kube.load import GroupLoad, IsrWatch
from e2e.kube.operator_bed import (
    TESTBED_DNS,
    OperatorProcess,
    cluster_manifest,
    condition,
    local_volumes,
    status,
    wait_ready,
)
from e2e.kube.testbed import Cluster, KubectlError, poll
from e2e.support import kp_consume_all, kp_produce, make_records, unique
from moldau.client import Admin
from moldau.client.admin import NewTopic
from moldau.operator.balance import leader_counts, replica_counts, spread

pytestmark = [pytest.mark.kube, pytest.mark.timeout(3600)]

CLUSTER = "kc"
CONFIG = {"default.replication.factor": "3", "min.insync.replicas": "2",
          "offsets.topic.replication.factor": "3", "num.partitions": "3"}
# A change brokers take only at start (log.retention.* would apply without a restart).
ROLL_CONFIG = {"offsets.retention.minutes": "10081"}
ROLL_TIMEOUT = 900.0
MANUAL = "moldau.io/manual-rolling-update"


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("day2-local")
    with local_volumes(kube, name, count=14):
        # Claims of this class may grow (the volumes are larger than asked).
        kube.kubectl("patch", "storageclass", name, "-p", '{"allowVolumeExpansion": true}')
        yield name


@pytest.fixture(scope="module")
def namespace(kube: Cluster, crd: None, storage_class: str) -> Iterator[str]:
    with kube.namespace(unique("day2")) as name:
        yield name


def manifest(storage_class: str, *, name: str = CLUSTER, brokers: int = 3,
             controllers: int = 1, size: str = "100Mi", delete_claim: bool = False,
             config: dict | None = None) -> str:
    found = cluster_manifest(name, storage_class, brokers=brokers, controllers=controllers,
                             config={**CONFIG, **(config or {})})
    storage = found["spec"]["nodePools"][1]["storage"]
    storage.update(size=size, deleteClaim=delete_claim)
    return json.dumps(found)


@pytest.fixture(scope="module")
def bootstrap(kube: Cluster, namespace: str, storage_class: str,
              operator: OperatorProcess) -> str:
    kube.apply(manifest(storage_class), namespace)
    wait_ready(kube, namespace, CLUSTER, brokers="3/3")
    install(TESTBED_DNS)
    return f"{CLUSTER}-bootstrap.{namespace}.svc:9092"


def generation(kube: Cluster, namespace: str, name: str = CLUSTER) -> int:
    return kube.get_json("-n", namespace, "kafkacluster", name)["metadata"]["generation"]


def pods(kube: Cluster, namespace: str, name: str = CLUSTER) -> dict[str, dict]:
    found = kube.get_json("-n", namespace, "pods", "-l", f"moldau.io/cluster={name}")["items"]
    return {p["metadata"]["name"]: p for p in found}


def uids(kube: Cluster, namespace: str, name: str = CLUSTER) -> dict[str, str]:
    return {pod: p["metadata"]["uid"] for pod, p in pods(kube, namespace, name).items()}


def restarted_in_order(kube: Cluster, namespace: str, before: dict[str, str],
                       name: str = CLUSTER) -> list[str]:
    """The pods replaced since `before`, oldest replacement first (restarts are a reconcile
    round or more apart, so creation times order them)."""
    now = pods(kube, namespace, name)
    changed = [pod for pod, p in now.items() if before.get(pod) != p["metadata"]["uid"]]
    return sorted(changed, key=lambda pod: now[pod]["metadata"]["creationTimestamp"])


def events(kube: Cluster, namespace: str, name: str = CLUSTER) -> str:
    return kube.kubectl("-n", namespace, "get", "events", "--field-selector",
                        f"involvedObject.kind=KafkaCluster,involvedObject.name={name}",
                        "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")


def wait_roll(kube: Cluster, namespace: str, before: dict[str, str], count: int,
              brokers: str = "3/3", name: str = CLUSTER) -> list[str]:
    """Until `count` pods were replaced and the cluster is settled again."""
    poll(lambda: len(restarted_in_order(kube, namespace, before, name)) >= count,
         ROLL_TIMEOUT, f"{count} pods restarted",
         lambda: json.dumps(status(kube, namespace, name).get("roll"), indent=1))
    wait_ready(kube, namespace, name, brokers=brokers)
    assert not status(kube, namespace, name).get("roll")
    return restarted_in_order(kube, namespace, before, name)


def create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    with Admin({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 30000}) as admin:
        admin.create_topics([NewTopic(name, partitions, 3)])


def under_load(bootstrap: str, topic: str) -> tuple[GroupLoad, IsrWatch]:
    create_topic(bootstrap, topic)
    load = GroupLoad(bootstrap, topic).start()
    poll(lambda: len(load.acknowledged()) > 50 and load.consumed(), 120, "load running")
    return load, IsrWatch(bootstrap, [topic, "__consumer_offsets"])


def assert_nothing_lost(load: GroupLoad, watch: IsrWatch) -> None:
    load.stop()
    watch.stop()
    load.final_read()
    acked = len(load.acknowledged())
    print(f"load: {acked} acknowledged, {len(load.history.polls)} polls, ISR samples "
          f"{watch.samples}, smallest ISR {watch.smallest}")
    assert [str(a) for a in check(load.history)] == []
    assert load.group_anomalies() == []
    assert load.errors == []
    assert watch.samples > 30 and watch.under == [], watch.under[:5]


def test_a_config_change_rolls_every_pod_under_load_losing_and_duplicating_nothing(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    load, watch = under_load(bootstrap, unique("roll"))
    before = uids(kube, namespace)
    started = time.monotonic()
    kube.apply(manifest(storage_class, config=ROLL_CONFIG), namespace)
    order = wait_roll(kube, namespace, before, 4)
    print(f"rolling 4 pods under load: {time.monotonic() - started:.0f} s, order {order}")
    assert_nothing_lost(load, watch)
    # Broker-only nodes first, the (only, so leading) controller last.
    assert set(order[:3]) == {"kc-brokers-0", "kc-brokers-1", "kc-brokers-2"}
    assert order[3] == "kc-controllers-0"
    assert "restarting kc-brokers-0: its config changed" in events(kube, namespace)


def test_the_manual_rolling_update_annotation_restarts_what_it_names(
        kube: Cluster, namespace: str, bootstrap: str) -> None:
    before = uids(kube, namespace)
    kube.kubectl("-n", namespace, "annotate", "pod", "kc-brokers-1", f"{MANUAL}=true")
    assert wait_roll(kube, namespace, before, 1) == ["kc-brokers-1"]
    assert "the moldau.io/manual-rolling-update annotation asks for it" in \
        events(kube, namespace)

    before = uids(kube, namespace)
    kube.kubectl("-n", namespace, "annotate", "kafkacluster", CLUSTER, f"{MANUAL}=true")
    order = wait_roll(kube, namespace, before, 4)
    assert order[-1] == "kc-controllers-0"
    annotations = kube.get_json("-n", namespace, "kafkacluster", CLUSTER)["metadata"].get(
        "annotations") or {}
    assert MANUAL not in annotations
    assert all(MANUAL not in (p["metadata"].get("annotations") or {})
               for p in pods(kube, namespace).values())


def assignment(bootstrap: str) -> dict[tuple[str, int], tuple[int, ...]]:
    with Admin({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 30000}) as admin:
        return {(name, p.partition): tuple(p.replicas)
                for name, topic in admin.describe_topics().items() for p in topic.partitions}


def test_three_to_five_brokers_rebalances_replicas_and_leaderships(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    topic = unique("spread")
    create_topic(bootstrap, topic, partitions=12)
    records = make_records(60, partitions=12)
    kp_produce(bootstrap, topic, records, acks="all")
    started = time.monotonic()
    kube.apply(manifest(storage_class, brokers=5, config=ROLL_CONFIG),
               namespace)
    poll(lambda: (status(kube, namespace, CLUSTER).get("rebalance") or {}).get("state")
         == "Complete", ROLL_TIMEOUT, "the rebalance",
         lambda: json.dumps(status(kube, namespace, CLUSTER).get("rebalance")))
    wait_ready(kube, namespace, CLUSTER, generation(kube, namespace), brokers="5/5")
    print(f"3 -> 5 brokers, Ready and rebalanced: {time.monotonic() - started:.0f} s")
    found = status(kube, namespace, CLUSTER)
    assert found["rebalance"]["brokers"] == [103, 104]
    brokers = [100, 101, 102, 103, 104]
    placed = assignment(bootstrap)
    replicas, leaders = replica_counts(placed, brokers), leader_counts(placed, brokers)
    print(f"replicas per broker {dict(replicas)}, preferred leaders {dict(leaders)}")
    assert spread(replicas) <= 1 and spread(leaders) <= 1
    assert sum(replicas.values()) == sum(len(r) for r in placed.values())
    assert "Rebalanced" in events(kube, namespace)
    assert len(kp_consume_all(bootstrap, topic, range(12))) == 60


def test_five_to_three_brokers_drains_first_and_loses_nothing(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    load, watch = under_load(bootstrap, unique("drain"))
    phases: set[str] = set()
    stop = threading.Event()

    def watch_phases() -> None:
        while not stop.is_set():
            try:
                for entry in status(kube, namespace, CLUSTER).get("scaleDown") or []:
                    phases.add(entry["phase"])
            except KubectlError:
                pass
            stop.wait(2)

    watcher = threading.Thread(target=watch_phases, daemon=True)
    watcher.start()
    started = time.monotonic()
    kube.apply(manifest(storage_class, brokers=3, delete_claim=True,
                        config=ROLL_CONFIG), namespace)
    poll(lambda: [p.get("replicas") for p in status(kube, namespace, CLUSTER)["nodePools"]
                  if p["name"] == "brokers"] == [3], ROLL_TIMEOUT, "brokers 103, 104 removed",
         lambda: json.dumps(status(kube, namespace, CLUSTER).get("scaleDown"), indent=1))
    wait_ready(kube, namespace, CLUSTER, brokers="3/3")
    stop.set()
    watcher.join(10)
    print(f"5 -> 3 brokers drained and removed: {time.monotonic() - started:.0f} s; "
          f"phases seen {sorted(phases)}")
    assert_nothing_lost(load, watch)
    assert {"Draining", "Removing"} <= phases
    assert sorted(pods(kube, namespace)) == ["kc-brokers-0", "kc-brokers-1", "kc-brokers-2",
                                            "kc-controllers-0"]
    claims = {c["metadata"]["name"] for c in kube.get_json(
        "-n", namespace, "pvc", "-l", f"moldau.io/cluster={CLUSTER}")["items"]}
    assert not {"data-kc-brokers-3", "data-kc-brokers-4"} & claims
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        listed = admin.describe_cluster(include_fenced_brokers=True)
    assert sorted(node.node_id for node in listed.nodes) == [100, 101, 102]
    assert all(set(r) <= {100, 101, 102} for r in assignment(bootstrap).values())
    text = events(kube, namespace)
    assert "DrainStarted" in text and "Drained" in text and "BrokersRemoved" in text


def test_a_drain_that_cannot_complete_is_refused_and_nothing_is_removed(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    before = uids(kube, namespace)
    kube.apply(manifest(storage_class, brokers=2, delete_claim=True,
                        config=ROLL_CONFIG), namespace)
    found = poll(lambda: (s := status(kube, namespace, CLUSTER)) and
                 condition(s, "SpecApplied").get("reason") == "DrainNotPossible" and s,
                 180, "the refusal")
    applied = condition(found, "SpecApplied")
    assert applied["status"] == "False"
    assert applied["message"].startswith("cannot remove brokers 102: topic ")
    assert "has replication factor 3" in applied["message"]
    assert "and only 2 brokers would remain (100, 101)" in applied["message"]
    time.sleep(30)  # a few reconciles: still nothing removed
    assert kube.get_json("-n", namespace, "statefulset", "kc-brokers")["spec"]["replicas"] == 3
    assert uids(kube, namespace) == before
    assert "DrainNotPossible" in events(kube, namespace)
    kube.apply(manifest(storage_class, brokers=3, delete_claim=True,
                        config=ROLL_CONFIG), namespace)
    poll(lambda: condition(status(kube, namespace, CLUSTER), "SpecApplied").get("status")
         == "True", 120, "SpecApplied again")


def test_storage_grows_without_a_restart_and_never_shrinks(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    before = uids(kube, namespace)
    sts = kube.get_json("-n", namespace, "statefulset", "kc-brokers")["metadata"]["uid"]
    kube.apply(manifest(storage_class, brokers=3, size="200Mi", delete_claim=True,
                        config=ROLL_CONFIG), namespace)

    def grown() -> bool:
        claims = kube.get_json("-n", namespace, "pvc", "-l",
                               "moldau.io/pool=brokers")["items"]
        return len(claims) == 3 and all(
            c["spec"]["resources"]["requests"]["storage"] == "200Mi" for c in claims)

    poll(grown, 300, "claims of 200Mi")
    new = poll(lambda: (s := kube.get_json("-n", namespace, "statefulset", "kc-brokers"))
               and s["metadata"]["uid"] != sts and s, 300, "the StatefulSet re-created")
    template = new["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
    assert template["storage"] == "200Mi"
    wait_ready(kube, namespace, CLUSTER, brokers="3/3")
    assert uids(kube, namespace) == before
    assert "StorageResized" in events(kube, namespace)
    shrink = json.dumps({"spec": {"nodePools": [
        {"name": "brokers", "roles": ["broker"], "replicas": 3,
         "storage": {"size": "100Mi", "storageClassName": storage_class}}]}})
    with pytest.raises(KubectlError, match="a node pool's storage cannot shrink"):
        kube.kubectl("-n", namespace, "patch", "kafkacluster", CLUSTER, "--type=merge",
                     "-p", shrink)


def test_a_controller_pool_change_is_refused_with_a_reason(
        kube: Cluster, namespace: str, storage_class: str, bootstrap: str) -> None:
    kube.apply(manifest(storage_class, brokers=3, controllers=3, size="200Mi",
                        delete_claim=True, config=ROLL_CONFIG), namespace)
    found = poll(lambda: (s := status(kube, namespace, CLUSTER)) and
                 condition(s, "SpecApplied").get("reason") == "ControllerPoolChange" and s,
                 120, "the refusal")
    assert condition(found, "SpecApplied")["message"] == (
        "node pool 'controllers' keeps 1 controllers, not 3: the quorum's voters are static "
        "(controller.quorum.voters)")
    assert kube.get_json("-n", namespace, "statefulset",
                         "kc-controllers")["spec"]["replicas"] == 1
    assert found["phase"] == "Ready"
    kube.kubectl("-n", namespace, "delete", "kafkacluster", CLUSTER, "--wait=true",
                 timeout=300)


class UidWatch:
    """Every uid each pod of a cluster had, polled in a thread."""

    def __init__(self, kube: Cluster, namespace: str, name: str) -> None:
        self.seen: dict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(kube, namespace, name),
                                        daemon=True)
        self._thread.start()

    def _run(self, kube: Cluster, namespace: str, name: str) -> None:
        while not self._stop.is_set():
            try:
                for pod, uid in uids(kube, namespace, name).items():
                    self.seen[pod].add(uid)
            except KubectlError:
                pass
            self._stop.wait(1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_controllers_after_brokers_the_active_one_last_across_an_operator_restart(
        kube: Cluster, namespace: str, storage_class: str, image: str,
        operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory) -> None:
    name = "quorum"
    kube.apply(manifest(storage_class, name=name, controllers=3), namespace)
    wait_ready(kube, namespace, name, brokers="3/3")
    leader = status(kube, namespace, name)["quorum"]["leaderId"]
    before = uids(kube, namespace, name)
    watch = UidWatch(kube, namespace, name)
    kube.apply(manifest(storage_class, name=name, controllers=3,
                        config=ROLL_CONFIG), namespace)
    poll(lambda: restarted_in_order(kube, namespace, before, name), ROLL_TIMEOUT,
         "a first restart")
    # The operator goes away mid-roll; another one finds the roll in the pods.
    assert operator.stop() == 0
    log = tmp_path_factory.mktemp("second-operator") / "operator.log"
    second = OperatorProcess(kube, namespace, image, log)
    try:
        order = wait_roll(kube, namespace, before, 6, name=name)
    finally:
        watch.stop()
        print(f"second operator log ({log}):\n{second.tail(60)}")
        kube.kubectl("-n", namespace, "delete", "kafkacluster", name, "--wait=true",
                     timeout=300)
        assert second.stop() == 0
    print(f"roll order {order}, quorum leader {leader}")
    assert set(order[:3]) == {f"{name}-brokers-{i}" for i in range(3)}
    followers = [f"{name}-controllers-{i}" for i in range(3) if i != leader]
    assert sorted(order[3:5]) == followers
    assert order[5] == f"{name}-controllers-{leader}"
    # Each pod was replaced exactly once.
    assert {pod: len(found) for pod, found in watch.seen.items()} == dict.fromkeys(before, 2)
