"""A thousand Topic resources against a three-node LocalCluster, as the operator's handlers
submit them (one call each, all at once) to the cluster's one admin client: they reconcile
in a few batches of a few requests each, not a few requests per resource. Prints the times
(pytest -s)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from e2e.support import wait_until
from moldau.client import Admin
from moldau.client.admin import AsyncAdmin
from moldau.client.versions import ApiKey
from moldau.cluster import LocalCluster
from moldau.operator.topics.clients import ClusterClient
from moldau.operator.topics.model import DesiredTopic, TopicRef

pytestmark = pytest.mark.timeout(900)

RESOURCES = 1000
T = TypeVar("T")


def count_requests(admin: AsyncAdmin) -> Counter[str]:
    """Requests the admin client sends from now on, by API name."""
    counts: Counter[str] = Counter()
    send = admin.network.request

    def counting(node: int, api_key: int, *args: Any, **kwargs: Any) -> Any:
        counts[ApiKey(api_key).name] += 1
        return send(node, api_key, *args, **kwargs)

    admin.network.request = counting  # type: ignore[method-assign]
    return counts


def resources(prefix: str, config: dict[str, str]) -> list[DesiredTopic]:
    return [DesiredTopic(TopicRef("load", f"{prefix}-{i}", f"uid-{i}", "2025-01-01T00:00:00Z"),
                         f"{prefix}-{i}", 1, 1, dict(config)) for i in range(RESOURCES)]


async def all_at_once(call: Callable[[DesiredTopic], Awaitable[T]],
                      wanted: list[DesiredTopic]) -> tuple[list[T], float]:
    started = time.monotonic()
    results = await asyncio.gather(*(call(d) for d in wanted))
    return list(results), time.monotonic() - started


def test_a_thousand_resources_reconcile_in_a_few_batched_requests(cluster: LocalCluster
                                                                   ) -> None:
    prefix = f"load-{uuid.uuid4().hex[:6]}"
    figures: dict[str, tuple[float, int, Counter[str]]] = {}

    async def main() -> None:
        client = ClusterClient("kc", cluster.bootstrap_servers.split(","), timeout=60)
        counts = count_requests(client.admin)
        try:
            async def phase(name: str, call: Callable[[DesiredTopic], Awaitable[Any]],
                            wanted: list[DesiredTopic]) -> list[Any]:
                counts.clear()
                batches = client.batcher.batches
                results, took = await all_at_once(call, wanted)
                figures[name] = (took, client.batcher.batches - batches, Counter(counts))
                return results

            created = await phase("create", client.apply, resources(prefix, {}))
            assert [r.reason for r in created] == ["Ready"] * RESOURCES
            assert all([c for c, _ in r.changes] == ["TopicCreated"] for r in created)
            listed = await client.admin.list_topics()
            assert len([t for t in listed if t.startswith(prefix)]) == RESOURCES
            settled = await phase("resync", client.apply, resources(prefix, {}))
            assert all(r.ready and r.changes == () and r.topic_id for r in settled)
            changed = await phase("config", client.apply,
                                  resources(prefix, {"retention.ms": "3600000"}))
            assert all([c for c, _ in r.changes] == ["ConfigChanged"] for r in changed)
            deleted = await phase("delete", client.delete,
                                  resources(prefix, {"retention.ms": "3600000"}))
            assert {r.reason for r in deleted} == {"TopicDeleted"}
        finally:
            await client.close()

    asyncio.run(main())
    for name, (took, batches, counts) in figures.items():
        print(f"{RESOURCES} Topic resources, {name}: {took:.2f} s in {batches} batches; "
              f"requests {dict(sorted(counts.items()))}")
        # A handful of requests per batch, whatever the batch's size.
        assert batches <= 3, (name, batches)
        assert sum(counts.values()) <= 12 * batches + 10, (name, counts)
    assert figures["resync"][2]["DESCRIBE_CONFIGS"] == figures["resync"][1]
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        wait_until(lambda: not [t for t in admin.list_topics() if t.startswith(prefix)], 60,
                   f"every {prefix} topic deleted")
