"""What of a node pool change is applied now: broker pools grow at once and shrink only once
drained, controller pool changes and shrinking storage are refused with a reason, removed
nodes are cleaned up, a pool removed with nodes blocks everything."""

from __future__ import annotations

from moldau.operator.pools import (
    CONTROLLER_POOL_CHANGE,
    POOL_REMOVED,
    STORAGE_SHRINK,
    Cleanup,
    LivePool,
    ScaleDown,
    StorageGrowth,
    plan_pools,
)
from moldau.operator.spec import parse_spec

BASES = {"controllers": 0, "brokers": 100}
ROLES = {"controllers": frozenset({"controller"}), "brokers": frozenset({"broker"})}


def spec(brokers: int = 3, controllers: int = 1, size: str = "1Gi", delete_claim=False,
         extra_pools=()) -> dict:
    return {"nodePools": [
        {"name": "controllers", "roles": ["controller"], "replicas": controllers,
         "storage": {"size": "1Gi"}},
        {"name": "brokers", "roles": ["broker"], "replicas": brokers,
         "storage": {"size": size, "deleteClaim": delete_claim}}, *extra_pools],
        "listeners": [{"name": "plain", "port": 9092}]}


def plan(raw: dict, live: dict, recorded: dict | None = None, bases=None):
    cluster = parse_spec("kc", "ns", raw, "img")
    return plan_pools(cluster, bases or BASES, live, recorded if recorded is not None else
                      {name: pool.replicas for name, pool in live.items()}, ROLES)


RUNNING = {"controllers": LivePool(1, "1Gi"), "brokers": LivePool(3, "1Gi")}


def test_a_new_cluster_is_applied_as_asked() -> None:
    made = plan(spec(), {}, {})
    assert made.refusals == [] and made.blocked is None
    assert [p.replicas for p in made.cluster.pools] == [1, 3]
    assert (made.scale_downs, made.cleanups, made.growths, made.added) == ([], [], [], {})


def test_a_broker_pool_grows_at_once_and_names_the_new_brokers() -> None:
    made = plan(spec(brokers=5), RUNNING)
    assert made.cluster.pool("brokers").replicas == 5
    assert made.added == {"brokers": (103, 104)}
    assert made.refusals == []


def test_a_broker_pool_shrinks_only_after_its_drain() -> None:
    made = plan(spec(brokers=3), {**RUNNING, "brokers": LivePool(5, "1Gi")})
    assert made.cluster.pool("brokers").replicas == 5  # until the scaler says drained
    assert made.scale_downs == [ScaleDown("brokers", 3, 5, (103, 104))]
    assert made.cleanups == []


def test_removed_nodes_are_cleaned_up_once_the_statefulset_is_smaller() -> None:
    made = plan(spec(brokers=3, delete_claim=True), RUNNING, {"controllers": 1, "brokers": 5})
    assert made.scale_downs == []
    assert made.cleanups == [Cleanup("brokers", 3, (3, 4), (103, 104), True)]
    # Grown back before the cleanup: only what is still gone.
    made = plan(spec(brokers=4), RUNNING, {"controllers": 1, "brokers": 5})
    assert made.cleanups == [Cleanup("brokers", 4, (4,), (104,), False)]


def test_controller_pool_changes_are_refused_and_the_pool_keeps_its_size() -> None:
    made = plan(spec(controllers=3), RUNNING)
    assert made.cluster.pool("controllers").replicas == 1
    assert [(r.reason, r.message) for r in made.refusals] == [(CONTROLLER_POOL_CHANGE, (
        "node pool 'controllers' keeps 1 controllers, not 3: the quorum's voters are static "
        "(controller.quorum.voters)"))]
    # A controller pool added to a running cluster is not created.
    more = spec(extra_pools=[{"name": "more", "roles": ["controller"], "replicas": 2,
                              "storage": {"size": "1Gi"}}])
    made = plan(more, RUNNING, bases={**BASES, "more": 200})
    assert [p.name for p in made.cluster.pools] == ["controllers", "brokers"]
    assert made.refusals[0].reason == CONTROLLER_POOL_CHANGE
    assert "adds controllers to a running cluster" in made.refusals[0].message


def test_removing_a_pool_with_nodes_blocks_everything() -> None:
    raw = spec()
    raw["nodePools"] = raw["nodePools"][1:] + [
        {"name": "c2", "roles": ["controller"], "replicas": 1, "storage": {"size": "1Gi"}}]
    made = plan(raw, RUNNING, bases={**BASES, "c2": 200})
    assert made.blocked is not None and made.blocked.reason == CONTROLLER_POOL_CHANGE
    assert made.blocked.message == ("node pool 'controllers' has the controller role and cannot "
                                    "be removed: the quorum's voters are static "
                                    "(controller.quorum.voters)")
    extra = spec(extra_pools=[{"name": "big", "roles": ["broker"], "replicas": 2,
                               "storage": {"size": "1Gi"}}])
    live = {**RUNNING, "big": LivePool(2, "1Gi")}
    made = plan(spec(), live, bases={**BASES, "big": 200})
    assert made.blocked is not None and made.blocked.reason == POOL_REMOVED
    assert made.blocked.message == ("node pool 'big' still has 2 nodes: scale it to 0 replicas "
                                    "(its brokers are drained first) before removing it")
    assert plan(extra, live, bases={**BASES, "big": 200}).blocked is None
    # Scaled to 0 first, it may go.
    assert plan(spec(), {**RUNNING, "big": LivePool(0, "1Gi")},
                bases={**BASES, "big": 200}).blocked is None


def test_storage_grows_and_never_shrinks() -> None:
    made = plan(spec(size="2Gi"), RUNNING)
    assert made.growths == [StorageGrowth("brokers", "2Gi", "1Gi")]
    made = plan(spec(size="500Mi"), RUNNING)
    assert made.cluster.pool("brokers").storage.size == "1Gi"
    assert [(r.reason, r.message) for r in made.refusals] == [(STORAGE_SHRINK, (
        "node pool 'brokers' keeps its 1Gi volumes: a claim cannot shrink to 500Mi"))]
    # The same size written differently is no change.
    assert plan(spec(size="1024Mi"), RUNNING).growths == []
