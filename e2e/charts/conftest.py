"""The `helm_binary` fixture: the cached helm, or one line naming what builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.charts.helm import HelmMissing, helm_path


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    failure = None
    try:
        return helm_path()
    except HelmMissing as exc:
        failure = str(exc)
    # Outside the except block, so the report shows the one line alone.
    pytest.fail(failure, pytrace=False)
