"""README.md's "On Kubernetes" example, run as written on the test bed: `helm install` of the
chart (the operator runs as a pod from the operator image), then the KafkaCluster (3
controllers, 3 brokers from the broker image, an internal and a NodePort listener) and the
Topic it applies, until `kubectl get mkc` and `kubectl get mkt` show what the README's
comments say; then a client pod through the bootstrap Service, a client on this host through
the NodePort listener, and a broker pod deleted by hand that comes back on its claim and
rejoins the ISR.

The block's `make images` is what the `images` step here does (build.sh, the same script),
plus the import into the test bed's containerd that a registry does for a real cluster. The
README's claims use the cluster's default storage class: the test gives it six volumes."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from e2e.charts.helm import helm_path
from e2e.kube.operator_bed import built_images, local_volumes, outside_client, run_client_pod
from e2e.kube.testbed import Cluster, poll
from e2e.support import unique
from e2e.test_readme import REPO, code_blocks
from moldau.client import Admin

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]

READY_TIMEOUT = 420.0
NAMESPACE = "default"  # the README's `kubectl apply` names none
OPERATOR_NAMESPACE = "moldau-system"


def kubernetes_block() -> str:
    [block] = [text for language, text in code_blocks(REPO / "README.md")
               if language == "sh" and "helm install" in text]
    return block


def run_block(kube: Cluster, script: str) -> None:
    tools = str(helm_path().parent)
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig),
           "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-e", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def columns(kube: Cluster, *args: str) -> list[str]:
    lines = kube.kubectl("-n", NAMESPACE, "get", *args).splitlines()
    return lines[1].split() if len(lines) > 1 else []


def test_the_readme_example_runs_on_kubernetes(kube: Cluster) -> None:
    if not kube.owned:
        pytest.skip("installs into the cluster's default namespace: the test bed's only")
    block = kubernetes_block()
    setup, _, rest = block.partition("\n")
    assert setup.startswith("make images"), setup
    started = time.monotonic()
    operator, broker = built_images("operator", "broker")
    images = {"operator": operator, "broker": broker}
    print(f"images built and imported: {time.monotonic() - started:.1f} s")
    # Everything up to the comments that say what to look at.
    apply, _, checks = rest.partition("kubectl get mkc orders")
    with local_volumes(kube, unique("readme"), count=6, capacity="100Gi", default=True):
        try:
            started = time.monotonic()
            run_block(kube, apply)

            def cluster_ready() -> list[str]:
                row = columns(kube, "mkc", "orders")
                return row if row[1:2] == ["3/3"] and "Ready" in row else []

            row = poll(cluster_ready, READY_TIMEOUT, "orders to show 3/3 Ready",
                       lambda: kube.kubectl("get", "pods", "-A", "-o", "wide"), 2.0)
            print(f"helm install and kubectl apply to 3/3 Ready: "
                  f"{time.monotonic() - started:.1f} s")
            assert row[:5] == ["orders", "3/3", "3", f"orders-bootstrap.{NAMESPACE}.svc:9092",
                               "Ready"]
            poll(lambda: "True" in columns(kube, "mkt", "payments"), 120,
                 "the payments Topic to be Ready",
                 lambda: kube.kubectl("-n", NAMESPACE, "describe", "mkt", "payments"))
            topic = columns(kube, "mkt", "payments")
            assert topic[:5] == ["payments", "orders", "payments", "6", "3"], topic
            # The comments' commands themselves run.
            assert re.search(r"^kubectl get mkt payments", checks, re.M)
            run_block(kube, "kubectl get mkc orders\n" + checks)
            clients_inside_and_outside(kube, images["broker"])
            a_deleted_broker_pod_comes_back(kube)
        finally:
            uninstall(kube)


def outside_addresses(kube: Cluster) -> list[str]:
    found = kube.get_json("-n", NAMESPACE, "kafkacluster", "orders")["status"]["listeners"]
    outside = next(entry for entry in found if entry["name"] == "outside")
    return outside["bootstrapServers"].split(",")


def clients_inside_and_outside(kube: Cluster, broker_image: str) -> None:
    """A pod produces and consumes through the bootstrap Service; a process on this host
    through the NodePort listener, which names the three brokers by their node ports."""
    run_client_pod(kube, NAMESPACE, broker_image, f"orders-bootstrap.{NAMESPACE}.svc:9092")
    addresses = outside_addresses(kube)
    assert len(addresses) == 3
    # Three replicas: the example's min.insync.replicas is 2.
    assert outside_client(addresses[0], unique("outside"), replicas=3) == sorted(addresses)


def a_deleted_broker_pod_comes_back(kube: Cluster) -> None:
    """A broker pod deleted by hand comes back on its claim, and its replicas of the
    payments topic (replication factor 3) rejoin the ISR."""
    claim = kube.get_json("-n", NAMESPACE, "pvc", "data-orders-kafka-1")["metadata"]["uid"]
    kube.kubectl("-n", NAMESPACE, "delete", "pod", "orders-kafka-1", "--wait=true")
    poll(lambda: columns(kube, "mkc", "orders")[1:2] == ["3/3"], READY_TIMEOUT,
         "orders to be 3/3 again")
    assert kube.get_json("-n", NAMESPACE, "pvc", "data-orders-kafka-1")["metadata"]["uid"] \
        == claim

    def full_isr() -> bool:
        with Admin({"bootstrap.servers": ",".join(outside_addresses(kube))}) as admin:
            described = admin.describe_topics(["payments"])["payments"]
        return all(len(partition.isr) == 3 for partition in described.partitions)

    poll(full_isr, 120, "every payments partition back to 3 in-sync replicas")


def uninstall(kube: Cluster) -> None:
    """The example's objects, in the order that leaves no finalizer without its operator and
    no volume bound: topics and cluster while the operator runs, then claims, the chart, the
    CRDs."""
    kube.kubectl("-n", NAMESPACE, "delete", "topic", "payments", "--ignore-not-found",
                 "--wait=true", timeout=180)
    kube.kubectl("-n", NAMESPACE, "delete", "kafkacluster", "orders", "--ignore-not-found",
                 "--wait=true", timeout=180)
    kube.kubectl("-n", NAMESPACE, "delete", "pvc", "-l", "moldau.io/cluster=orders",
                 "--ignore-not-found", "--wait=true", timeout=180)
    run_block(kube, f"helm uninstall moldau --namespace {OPERATOR_NAMESPACE} --wait || true")
    kube.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found",
                 "--wait=true", timeout=300)
    kube.kubectl("delete", "crd", "kafkaclusters.moldau.io", "topics.moldau.io",
                 "kafkausers.moldau.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev",
                 "--ignore-not-found", "--wait=true", timeout=300)
