"""`helm install` of charts/moldau on the test bed (or KUBECONFIG's cluster): the CRDs become
established and the operator's pod runs from the operator image (e2e/images/build.sh).

Steps, each a function below: build the image, load it into the test bed's containerd (a
cluster of your own must be able to pull it: MOLDAU_KUBE_OPERATOR_IMAGE names it), install,
wait, uninstall."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from e2e.charts.helm import CHART, HelmMissing, helm, helm_path
from e2e.images.podman import build_image, podman
from e2e.kube.testbed import Cluster, poll, run_dir

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1200)]

APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
OPERATOR_IMAGE = f"localhost/moldau-operator:{APP_VERSION}"
READY_TIMEOUT = 300.0


def load_into_testbed(image: str, workdir: Path) -> None:
    """The test bed pulls nothing: the image goes from podman into its containerd."""
    archive = workdir / "operator.tar"
    podman("save", "--quiet", "--format", "docker-archive", "-o", str(archive), image,
           timeout=300)
    subprocess.run(["ctr", "--address", str(run_dir() / "containerd" / "containerd.sock"),
                    "-n", "k8s.io", "images", "import", str(archive)],
                   check=True, capture_output=True, timeout=300)


def crd_names() -> list[str]:
    """The CRDs the chart installs, from its crds/ files."""
    return sorted(yaml.safe_load(path.read_text())["metadata"]["name"]
                  for path in (CHART / "crds").glob("*.yaml"))


def operator_pod_running(kube: Cluster, namespace: str) -> bool:
    pods = kube.get_json("-n", namespace, "pods", "-l",
                         "app.kubernetes.io/component=operator")["items"]
    return any(pod["status"].get("phase") == "Running"
               and all(c.get("ready") for c in pod["status"].get("containerStatuses", []))
               for pod in pods)


def test_helm_install_runs_the_operator(kube: Cluster, tmp_path: Path) -> None:
    try:
        helm_path()
    except HelmMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    image = OPERATOR_IMAGE
    if kube.owned:
        built = build_image()
        assert built.returncode == 0, built.stdout + built.stderr
        load_into_testbed(image, tmp_path)
    else:
        image = os.environ.get("MOLDAU_KUBE_OPERATOR_IMAGE", image)
    repository, _, tag = image.rpartition(":")
    namespace = f"moldau-chart-{uuid.uuid4().hex[:8]}"
    release = namespace
    target = ["--kubeconfig", str(kube.kubeconfig), "--namespace", namespace]
    helm("install", release, str(CHART), *target, "--create-namespace",
         values={"operator": {"image": {"repository": repository, "tag": tag,
                                        "pullPolicy": "IfNotPresent"}}})
    try:
        for crd in crd_names():
            kube.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        poll(lambda: operator_pod_running(kube, namespace), READY_TIMEOUT,
             "the operator's pod to run and be ready",
             lambda: kube.kubectl("-n", namespace, "get", "pods,events", "-o", "wide"))
    finally:
        helm("uninstall", release, *target, "--wait", check=False)
        kube.kubectl("delete", "namespace", namespace, "--wait=true", timeout=300)
