"""Without the cached helm, the chart's tests and scripts fail with one line naming the make
target that builds it; with it, `make chart` lints and packages the chart."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from e2e.charts.helm import REPO, helm_path


def env_with_cache(cache: Path) -> dict[str, str]:
    return {**os.environ, "MOLDAU_KUBE_CACHE": str(cache)}


def test_chart_tests_fail_naming_what_builds_helm(tmp_path: Path) -> None:
    cache = tmp_path / "no-cache"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
         "e2e/charts/test_chart.py::test_helm_lint_strict_passes"],
        cwd=REPO, env=env_with_cache(cache), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    expected = f"{cache}/bin/helm is missing: run 'make kube-deps' (or 'make helm-deps')"
    assert expected in done.stdout.splitlines(), done.stdout
    assert "Traceback" not in done.stdout and "skipped" not in done.stdout


def test_helm_script_names_what_builds_helm(tmp_path: Path) -> None:
    cache = tmp_path / "no-cache"
    done = subprocess.run(["bash", str(REPO / "charts" / "helm.sh"), "version"],
                          env=env_with_cache(cache), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == f"chart: {cache}/bin/helm is missing: run 'make kube-deps'"


def test_make_chart_packages_the_chart(tmp_path: Path) -> None:
    helm_path()  # one line, not a make error, when helm is missing
    done = subprocess.run(["make", "-s", "chart", f"CHART_DIST={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [package] = tmp_path.glob("moldau-*.tgz")
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
    assert {"moldau/Chart.yaml", "moldau/values.schema.json", "moldau/templates/NOTES.txt",
            "moldau/crds/kopf.dev_kopfpeerings.yaml", "moldau/files/moldau-rules.yaml"} <= names
