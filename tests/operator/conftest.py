"""A three-node moldau.cluster.LocalCluster of real broker processes, one per test module
that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from moldau.cluster import LocalCluster, free_base_port


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("operator") / "cluster", brokers=3,
                         base_port=free_base_port(3))
    local.start(timeout=90)
    try:
        yield local
    finally:
        local.stop(timeout=30)
