"""Metadata responses are kept per metadata image: repeated questions get the same answer
under their own correlation id, and every change to topics shows at once."""

from __future__ import annotations

import asyncio

import pytest

from e2e.support import unique
from moldau.client import AsyncAdmin, NewPartitions, NewTopic
from moldau.client.versions import ApiKey

pytestmark = pytest.mark.timeout(60)


def test_cached_metadata_follows_every_topic_change(module_broker):
    topic = unique("mdc")

    async def main() -> None:
        async with AsyncAdmin({"bootstrap.servers": module_broker.bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 3, 1)])
            await admin.list_topics()
            node = admin.metadata.cluster.nodes[0].node_id
            body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False}

            async def partitions(version: int | None = None) -> int | str:
                # Several in flight at once: each answer must carry its own correlation id
                # (the client closes the connection on a mismatch).
                answers = await asyncio.gather(*(admin.network.request(
                    node, ApiKey.METADATA, body, max_version=version) for _ in range(4)))
                counts = set()
                for response in answers:
                    (described,) = response.topics
                    counts.add(len(described.partitions) if described.error_code == 0
                               else described.error_code.name)
                assert len(counts) == 1, counts
                return counts.pop()

            assert await partitions() == 3
            assert await partitions() == 3
            assert await partitions(4) == 3  # another version, its own encoding
            await admin.create_partitions({topic: NewPartitions(5)})
            assert await partitions() == 5
            await admin.delete_topics([topic])
            assert await partitions() == "unknown_topic_or_partition"
            await admin.create_topics([NewTopic(topic, 2, 1)])
            assert await partitions() == 2

    asyncio.run(main())
