"""Without the test bed's cache and without KUBECONFIG, the kube tests fail with one line
naming what is missing, and the scripts say so too (these tests run in the default suite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e.kube.testbed import HERE

REPO = HERE.parents[1]


def env_without_cluster(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["MOLDAU_KUBE_CACHE"] = str(cache)
    return env


def test_kube_tests_fail_naming_the_missing_part(tmp_path: Path) -> None:
    cache = tmp_path / "no-cache"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "kube", "-p", "no:cacheprovider",
         "e2e/kube/test_testbed.py::test_statefulset_with_headless_service_and_volumes"],
        cwd=REPO, env=env_without_cluster(cache), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    expected = (f"Kubernetes test bed: missing {cache}/bin/etcd "
                "(run 'make kube-deps' or set KUBECONFIG)")
    assert expected in done.stdout, done.stdout
    # The message is the error's whole report: one line of its own, no traceback (pytest's
    # short summary repeats it after a prefix, untruncated when CI is set).
    assert "Traceback" not in done.stdout and done.stdout.splitlines().count(expected) == 1
    assert "1 error" in done.stdout and "skipped" not in done.stdout


def test_up_names_the_missing_binary(tmp_path: Path) -> None:
    cache = tmp_path / "no-cache"
    done = subprocess.run(["bash", str(HERE / "up.sh")], env=env_without_cluster(cache),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"kube-up: {cache}/bin/etcd is missing: "
                                   "run 'make kube-deps'")


def test_deps_names_an_unknown_part(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(HERE / "deps.sh"), "kubelets"],
                          env=env_without_cluster(tmp_path / "cache"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("kube-deps: unknown part 'kubelets' (parts: apt kubernetes "
                                   "etcd cni crictl coredns helm images)")
