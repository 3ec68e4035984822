"""Running an admin scenario against a LocalCluster from a synchronous test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from moldau.client.admin import AsyncAdmin
from moldau.cluster import LocalCluster

T = TypeVar("T")
TIMEOUT = 15.0


def with_admin(cluster: LocalCluster, scenario: Callable[[AsyncAdmin], Awaitable[T]]) -> T:
    """Run `scenario` with a fresh admin client of the cluster, closed afterwards."""
    async def main() -> T:
        admin = AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers,
                            "default.api.timeout.ms": int(TIMEOUT * 1000)})
        try:
            return await scenario(admin)
        finally:
            await admin.close()
    return asyncio.run(main())
