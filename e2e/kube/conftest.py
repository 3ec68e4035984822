"""The `kube` fixture: one Kubernetes cluster for every test marked `kube` in the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kube.testbed import Cluster, TestbedUnavailable, cluster_for_tests


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    log = tmp_path_factory.mktemp("kube") / "testbed.log"
    failure = None
    try:
        with cluster_for_tests(log) as cluster:
            yield cluster
    except TestbedUnavailable as exc:
        failure = str(exc)
    # Outside the except block, so the report shows the one line alone.
    if failure:
        pytest.fail(failure, pytrace=False)
