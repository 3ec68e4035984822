"""The operator image (Dockerfile target `operator`, e2e/images/build.sh operator): built
offline with podman, runs `moldau operator` as a user that is not root."""

from __future__ import annotations

import os
import subprocess

import pytest

from e2e.images.podman import HERE, podman

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
