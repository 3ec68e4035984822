"""The `helm` fixture (the cached binary, or one line naming what builds it) and the test
bed's `kube` fixture for the chart's install test."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.charts.helm import HelmMissing, helm_path
from e2e.kube.conftest import kube  # noqa: F401  (the fixture, for test_chart_install.py)


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    failure = None
    try:
        return helm_path()
    except HelmMissing as exc:
        failure = str(exc)
    # Outside the except block, so the report shows the one line alone.
    pytest.fail(failure, pytrace=False)
