"""The `kube` fixture: one Kubernetes cluster for every test marked `kube` in the session;
and, per module that asks, the broker image in it, the operator's CRDs, and the operator
running against the module's own `namespace` fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kube.operator_bed import OperatorProcess, broker_image, crd_installed, running_operator
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


@pytest.fixture(scope="module")
def image(kube: Cluster) -> str:
    return broker_image(kube)


@pytest.fixture(scope="module")
def crd(kube: Cluster) -> Iterator[None]:
    with crd_installed(kube):
        yield


@pytest.fixture(scope="module")
def operator(kube: Cluster, namespace: str, image: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(kube, namespace, image, log) as process:
        yield process
