"""The operator image (Dockerfile target `operator`, e2e/images/build.sh operator): built
offline with podman, runs `moldau operator` as a user that is not root."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from e2e.images.podman import HERE, podman
from e2e.support import unique

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def image() -> str:
    done = subprocess.run(["bash", str(HERE / "build.sh"), "operator"], capture_output=True,
                          text=True, timeout=900, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    tag = done.stdout.strip().splitlines()[-1]
    assert tag.startswith("localhost/moldau-operator:")
    return tag


def test_the_entrypoint_is_the_operator_and_says_what_it_lacks(image: str) -> None:
    # No kubeconfig and no service account in a bare container: one line, exit 1.
    done = podman("run", "--rm", "--network=none", "--no-healthcheck", image, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().startswith("moldau operator: no Kubernetes configuration: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_runs_as_a_user_that_is_not_root(image: str) -> None:
    uid = podman("run", "--rm", "--network=none", "--entrypoint", "id", image, "-u").stdout
    assert uid.strip().isdigit() and uid.strip() != "0"


def test_has_the_operator_but_not_the_broker(image: str) -> None:
    code = ("import importlib.util as u; print(bool(u.find_spec('moldau.operator')), "
            "bool(u.find_spec('moldau.broker')))")
    done = podman("run", "--rm", "--network=none", "--entrypoint", "python3", image, "-c", code)
    assert done.stdout.split() == ["True", "False"]


def test_the_image_is_small(image: str) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    print(f"{image}: {size / 1e6:.0f} MB")
    assert size < 400e6


def test_sigterm_stops_the_operator_cleanly(image: str, tmp_path) -> None:
    """PID 1 is `moldau operator` itself: with an API server it cannot reach it keeps
    retrying, and SIGTERM still stops it at once with exit 0."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "nobody", "user": {"token": "none"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}]}))
    kubeconfig.chmod(0o644)
    name = unique("moldau-operator-image")
    podman("run", "-d", "--name", name, "--network=none", "--no-healthcheck",
           "-v", f"{kubeconfig}:/etc/moldau/kubeconfig:ro",
           "-e", "KUBECONFIG=/etc/moldau/kubeconfig", image)
    try:
        time.sleep(3)
        state = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
        assert state == "true", podman("logs", name, check=False).stderr
        started = time.monotonic()
        podman("stop", "--time", "30", name)
        took = time.monotonic() - started
        print(f"podman stop of the operator took {took:.2f} s")
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0", podman("logs", name, check=False).stderr[-2000:]
        assert took < 25, f"stop took {took:.1f} s: SIGTERM was not handled"
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
