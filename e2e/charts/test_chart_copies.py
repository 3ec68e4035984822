"""Helm reads nothing outside the chart, so charts/moldau keeps copies of repository files
(`make chart-sync` makes them): each copy must equal its source, so that nobody edits one and
forgets the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.charts.helm import CHART, REPO

# kopf's own peering CRDs live only in the chart.
CHART_ONLY_CRDS = {"kopf.dev_clusterkopfpeerings.yaml", "kopf.dev_kopfpeerings.yaml"}


def copies() -> list[tuple[Path, Path]]:
    """(source, copy) for every repository file the chart ships."""
    pairs = [(REPO / "monitoring" / "rules" / "moldau-rules.yaml",
              CHART / "files" / "moldau-rules.yaml")]
    pairs += [(source, CHART / "files" / "dashboards" / source.name)
              for source in sorted((REPO / "monitoring" / "dashboards").glob("*.json"))]
    # The operator's CRDs (crds/ at the repository root), once they exist.
    pairs += [(source, CHART / "crds" / source.name)
              for source in sorted((REPO / "crds").glob("*.yaml"))]
    return pairs


@pytest.mark.parametrize(("source", "copy"), copies(),
                         ids=[str(source.relative_to(REPO)) for source, _ in copies()])
def test_copy_equals_its_source(source: Path, copy: Path) -> None:
    assert copy.is_file(), f"{copy.relative_to(REPO)} is missing: run 'make chart-sync'"
    assert copy.read_bytes() == source.read_bytes(), \
        f"{copy.relative_to(REPO)} differs from {source.relative_to(REPO)}: " \
        "edit the source, then run 'make chart-sync'"


def test_chart_ships_no_copy_without_a_source() -> None:
    shipped = {copy for _, copy in copies()}
    in_chart = set((CHART / "files").rglob("*.*")) | {
        path for path in (CHART / "crds").glob("*.yaml") if path.name not in CHART_ONLY_CRDS}
    stale = sorted(str(path.relative_to(REPO)) for path in in_chart - shipped)
    assert not stale, f"copies whose source is gone (delete them or restore it): {stale}"
