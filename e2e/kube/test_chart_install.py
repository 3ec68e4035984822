"""The Helm chart and the operator together, in the cluster: `helm install` of charts/moldau
runs two operator pods from the operator image under exactly the chart's RBAC; a KafkaCluster
from the broker image becomes Ready and serves a client pod; one replica reconciles and the
other takes over when its pod goes; `helm uninstall` keeps the CRDs.

On a cluster of one's own, MOLDAU_KUBE_OPERATOR_IMAGE and MOLDAU_KUBE_BROKER_IMAGE name images
it can pull."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator

import pytest
import yaml

from e2e.charts.helm import CHART, HelmMissing, helm, helm_path
from e2e.kube.operator_bed import (
    built_images,
    cluster_manifest,
    local_volumes,
    run_client_pod,
    status,
    wait_ready,
)
from e2e.kube.testbed import Cluster, poll, wait_established
from e2e.support import unique

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]

APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
READY_TIMEOUT = 300.0
OPERATOR_PODS = "app.kubernetes.io/component=operator"
# What the API server answers a request RBAC refuses, in kopf's and lightkube's log lines.
FORBIDDEN = re.compile(r"Forbidden|forbidden|\b403\b")


def crd_names() -> list[str]:
    """The CRDs the chart installs, from its crds/ files."""
    return sorted(yaml.safe_load(path.read_text())["metadata"]["name"]
                  for path in (CHART / "crds").glob("*.yaml"))


@pytest.fixture(scope="module")
def images(kube: Cluster) -> dict[str, str]:
    if not kube.owned:
        return {"operator": os.environ.get("MOLDAU_KUBE_OPERATOR_IMAGE",
                                           f"localhost/moldau-operator:{APP_VERSION}"),
                "broker": os.environ.get("MOLDAU_KUBE_BROKER_IMAGE",
                                         f"localhost/moldau-broker:{APP_VERSION}")}
    started = time.monotonic()
    operator, broker = built_images("operator", "broker")
    print(f"build.sh operator broker and import into containerd: "
          f"{time.monotonic() - started:.1f} s")
    return {"operator": operator, "broker": broker}


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("chart-local")
    with local_volumes(kube, name, count=2):
        yield name


@pytest.fixture(scope="module")
def release(kube: Cluster, images: dict[str, str], storage_class: str) -> Iterator[str]:
    """The chart installed in a namespace of its own with two operator replicas; its name is
    the release's and the namespace's."""
    try:
        helm_path()
    except HelmMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    name = unique("moldau-chart")
    repository, _, tag = images["operator"].rpartition(":")
    started = time.monotonic()
    helm("install", name, str(CHART), *helm_target(kube, name), "--create-namespace",
         values={"operator": {"replicas": 2, "brokerImage": images["broker"],
                              "image": {"repository": repository, "tag": tag}}})
    try:
        poll(lambda: len(ready_operator_pods(kube, name)) == 2, READY_TIMEOUT,
             "both operator pods to run and be ready",
             lambda: kube.kubectl("-n", name, "get", "pods,events", "-o", "wide"))
        print(f"helm install to both operator pods Ready: {time.monotonic() - started:.1f} s")
        yield name
    finally:
        helm("uninstall", name, *helm_target(kube, name), "--wait", check=False)
        kube.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true",
                     timeout=300)
        # Kept by `helm uninstall` (test_helm_uninstall_keeps_the_crds): removed by hand.
        kube.kubectl("delete", "crd", *crd_names(), "--ignore-not-found", "--wait=true",
                     timeout=300)


def helm_target(kube: Cluster, namespace: str) -> list[str]:
    return ["--kubeconfig", str(kube.kubeconfig), "--namespace", namespace]


def ready_operator_pods(kube: Cluster, namespace: str) -> list[str]:
    pods = kube.get_json("-n", namespace, "pods", "-l", OPERATOR_PODS)["items"]
    return sorted(pod["metadata"]["name"] for pod in pods
                  if pod["status"].get("phase") == "Running"
                  and "deletionTimestamp" not in pod["metadata"]
                  and all(c.get("ready") for c in pod["status"].get("containerStatuses", [])))


def reconciles(kube: Cluster, namespace: str, pod: str) -> float:
    """The pod's moldau_operator_reconciles_total, all outcomes, read through the API
    server's proxy."""
    text = kube.kubectl("get", "--raw",
                        f"/api/v1/namespaces/{namespace}/pods/{pod}:8080/proxy/metrics")
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("moldau_operator_reconciles_total{"))


def peering_lines(kube: Cluster, namespace: str, pod: str) -> list[str]:
    """What the pod's log says about kopf's peering (pausing, resuming, priorities)."""
    log = kube.kubectl("-n", namespace, "logs", pod)
    return [line for line in log.splitlines()
            if any(word in line.lower() for word in ("peer", "paus", "resum", "priority"))]


def assert_no_forbidden(kube: Cluster, namespace: str, pod: str) -> str:
    """The pod's log, after checking RBAC refused the operator nothing."""
    log = kube.kubectl("-n", namespace, "logs", pod)
    refused = [line for line in log.splitlines() if FORBIDDEN.search(line)]
    assert not refused, f"{pod} was refused by RBAC:\n" + "\n".join(refused[:10])
    return log


def test_the_operator_runs_as_the_images_entrypoint(kube: Cluster, release: str) -> None:
    for pod in ready_operator_pods(kube, release):
        command = kube.kubectl("-n", release, "exec", pod, "--", "cat", "/proc/1/cmdline")
        words = command.split("\0")
        assert words[1:4] == ["/opt/moldau/bin/moldau", "operator", "--http-port=8080"], words
    # The CRDs came with the chart.
    wait_established(kube, *crd_names())


def test_a_cluster_becomes_ready_and_serves_a_client_pod(kube: Cluster, release: str,
                                                         images: dict[str, str],
                                                         storage_class: str) -> None:
    started = time.monotonic()
    kube.apply(json.dumps(cluster_manifest("kc", storage_class)), release)
    found = wait_ready(kube, release, "kc")
    print(f"kubectl apply to KafkaCluster Ready (operator in-cluster, 1 controller + "
          f"1 broker): {time.monotonic() - started:.1f} s")
    bootstrap = f"kc-bootstrap.{release}.svc:9092"
    assert found["listeners"][0]["bootstrapServers"] == bootstrap
    columns = kube.kubectl("-n", release, "get", "mkc", "kc").splitlines()
    assert columns[0].split() == ["NAME", "READY", "CONTROLLERS", "BOOTSTRAP", "PHASE", "AGE"]
    assert columns[1].split()[:5] == ["kc", "1/1", "1", bootstrap, "Ready"]
    run_client_pod(kube, release, images["broker"], bootstrap)


@pytest.mark.xfail(strict=False, reason=(
    "known bug: two operator replicas started together can both resume after kopf's "
    "start-up pause (each logs 'Resuming operations after the pause') and both reconcile "
    "(2 of 3 runs here); docs/helm.md says to keep operator.replicas at 1 until it is fixed"))
def test_one_replica_reconciles_and_the_other_takes_over(kube: Cluster, release: str,
                                                         storage_class: str) -> None:
    first, second = ready_operator_pods(kube, release)
    # Only the replica of highest priority runs handlers: a new resource is reconciled by
    # one of them. (Counted from here: two replicas that start together may both handle
    # what exists before each has seen the other's peering record.)
    before = {pod: reconciles(kube, release, pod) for pod in (first, second)}
    kube.apply(json.dumps(cluster_manifest("probe", storage_class,
                                           config={"num.partiton": "3"})), release)
    poll(lambda: status(kube, release, "probe").get("phase") == "Failed", 120,
         "an operator to report the bad spec")
    after = {pod: reconciles(kube, release, pod) for pod in (first, second)}
    grew = [pod for pod in (first, second) if after[pod] > before[pod]]
    assert len(grew) == 1, (before, after, {pod: peering_lines(kube, release, pod)
                                            for pod in (first, second)})
    [active] = grew
    standby = second if active == first else first
    kube.kubectl("-n", release, "delete", "kafkacluster", "probe", "--wait=true", timeout=120)
    assert reconciles(kube, release, standby) == after[standby]
    for pod in (active, standby):
        assert_no_forbidden(kube, release, pod)

    kube.kubectl("-n", release, "delete", "pod", active, "--wait=true", timeout=180)
    # The standby reconciles what comes next: a spec it reports as Failed.
    kube.apply(json.dumps(cluster_manifest("typo", storage_class,
                                           config={"num.partiton": "3"})), release)
    poll(lambda: status(kube, release, "typo").get("phase") == "Failed", 120,
         "the standby operator to report the bad spec",
         lambda: kube.kubectl("-n", release, "logs", standby, "--tail=30"))
    assert reconciles(kube, release, standby) > after[standby]
    # The replacement pod started later: a lower priority, it waits.
    poll(lambda: len(ready_operator_pods(kube, release)) == 2, READY_TIMEOUT,
         "the replacement operator pod")
    replacement = next(p for p in ready_operator_pods(kube, release) if p != standby)
    kube.kubectl("-n", release, "delete", "kafkacluster", "typo", "--wait=true", timeout=120)
    assert reconciles(kube, release, replacement) == 0
    for pod in (standby, replacement):
        assert_no_forbidden(kube, release, pod)


def test_helm_uninstall_keeps_the_crds(kube: Cluster, release: str) -> None:
    # The cluster goes while its operator still runs.
    kube.kubectl("-n", release, "delete", "kafkacluster", "--all", "--wait=true", timeout=180)
    helm("uninstall", release, *helm_target(kube, release), "--wait")
    poll(lambda: not kube.get_json("-n", release, "pods", "-l", OPERATOR_PODS)["items"], 120,
         "the operator pods to go")
    kept = kube.get_json("crd")["items"]
    assert set(crd_names()) <= {crd["metadata"]["name"] for crd in kept}
