"""A KafkaCluster `config` change that touches only dynamically updatable keys is applied
with one IncrementalAlterConfigs on the cluster default and rolls no pod; any other change
still changes the pods' config hash. The call runs against a LocalCluster of real broker
processes, and every broker applies it."""

from __future__ import annotations

import asyncio

import pytest

from moldau.client.admin import ConfigResource, ConfigSource
from moldau.client.errors import KafkaError
from moldau.cluster import LocalCluster
from moldau.operator.dynamic_config import apply_dynamic
from moldau.operator.objects import config_hash
from moldau.operator.properties import server_properties
from moldau.operator.restarts import CONFIG_CHANGED, PodFacts, Wanted, restart_reasons
from moldau.operator.spec import parse_spec
from moldau.operator.topics.clients import admin_for

pytestmark = pytest.mark.timeout(180)


def pod_config_hash(config: dict[str, str]) -> str:
    cluster = parse_spec("kc", "ns", {
        "nodePools": [{"name": "nodes", "roles": ["controller", "broker"], "replicas": 3,
                       "storage": {"size": "1Gi"}}],
        "listeners": [{"name": "plain", "port": 9092}], "config": config}, "image:1")
    return config_hash(server_properties(cluster, cluster.pools[0], {"nodes": 0}))


def reasons_after(before: dict[str, str], after: dict[str, str]) -> tuple[str, ...]:
    """Why a pod started with `before` restarts once the spec says `after`."""
    return restart_reasons(PodFacts(pod_config_hash(before), "image:1", None),
                           Wanted(pod_config_hash(after), "image:1"))


def test_only_changes_that_need_a_restart_roll_pods():
    before = {"default.replication.factor": "3", "log.retention.ms": "3600000"}
    # Dynamic keys changed, added or removed: no restart.
    assert reasons_after(before, {**before, "log.retention.ms": "60000"}) == ()
    assert reasons_after(before, {**before, "min.insync.replicas": "2"}) == ()
    assert reasons_after(before, {"default.replication.factor": "3"}) == ()
    # A key that needs a restart, alone or with dynamic ones: every pod rolls.
    assert reasons_after(before, {**before, "num.partitions": "3"}) == (CONFIG_CHANGED,)
    assert reasons_after(before, {"default.replication.factor": "2",
                                  "log.retention.ms": "60000"}) == (CONFIG_CHANGED,)


async def broker_values(cluster: LocalCluster, key: str) -> list[tuple[str | None, int]]:
    admin = admin_for(cluster.bootstrap_servers.split(","))
    try:
        resources = [ConfigResource.broker(node.node_id) for node in cluster.nodes]
        found = await admin.describe_configs(resources, timeout=15)
        return [(found[r][key].value, found[r][key].source) for r in resources]
    finally:
        await admin.close()


def test_apply_dynamic_against_real_brokers(cluster: LocalCluster):
    async def main():
        admin = admin_for(cluster.bootstrap_servers.split(","))
        try:
            spec = {"default.replication.factor": "3", "log.retention.ms": "3600000",
                    "min.insync.replicas": "2"}
            applied = await apply_dynamic(admin, spec, 15)
            assert applied is not None
            assert (applied.set, applied.deleted) == (
                {"log.retention.ms": "3600000", "min.insync.replicas": "2"}, [])
            assert await apply_dynamic(admin, spec, 15) is None  # nothing left to change
            described = await admin.describe_configs([ConfigResource.broker("")], timeout=15)
            assert {key: entry.value for key, entry in
                    described[ConfigResource.broker("")].items()} == {
                "log.retention.ms": "3600000", "min.insync.replicas": "2"}

            # Changed and removed from the spec: set and deleted in the same call.
            applied = await apply_dynamic(admin, {"log.retention.ms": "60000"}, 15)
            assert applied is not None
            assert (applied.set, applied.deleted) == (
                {"log.retention.ms": "60000"}, ["min.insync.replicas"])
            for _ in range(100):  # every broker follows the metadata log
                values = await broker_values(cluster, "log.retention.ms")
                if values == [("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)] * 3:
                    break
                await asyncio.sleep(0.2)
            assert values == [("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)] * 3
            assert await broker_values(cluster, "min.insync.replicas") == [
                ("1", ConfigSource.DEFAULT_CONFIG)] * 3

            # A value the brokers refuse raises the broker's error; nothing changes.
            with pytest.raises(KafkaError) as info:
                await apply_dynamic(admin, {"log.retention.ms": "soon"}, 15)
            assert info.value.retriable is False
            assert "log.retention.ms" in str(info.value)
            assert await apply_dynamic(admin, {"log.retention.ms": "60000"}, 15) is None
            await apply_dynamic(admin, {}, 15)
        finally:
            await admin.close()

    asyncio.run(main())
