"""Spark on Kubernetes: pip PySpark's own spark-submit on this host submits
spark/jobs/windowed_counts.py with `--master k8s://... --deploy-mode cluster` to a namespace
where the operator runs a KafkaCluster. The driver and executor pods run the Spark jobs image
(e2e/images/build.sh spark) under the driver's service account from spark/k8s/rbac.yaml, read
and write exactly once through the cluster's bootstrap Service, and keep the query's checkpoint
on the claim of spark/k8s/storage.yaml across two submissions: the second one's late order is
dropped by the watermark the first one left there. The output topic is checked exactly."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.kube.cluster_names import install
from e2e.kube.operator_bed import (
    TESTBED_DNS,
    OperatorProcess,
    built_images,
    cluster_manifest,
    local_volumes,
    wait_ready,
)
from e2e.kube.testbed import Cluster, poll, wait_established
from e2e.spark.orders import FIRST_RUN, KEEP, SECOND_RUN, expected_rows, window_rows
from e2e.support import REPO_ROOT, kp_create_topic, kp_produce, unique

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]

MANIFESTS = REPO_ROOT / "spark" / "k8s"
JOB = "local:///opt/spark/jobs/windowed_counts.py"
CHECKPOINTS = "/checkpoints"
SUBMIT_TIMEOUT = 900.0


def manifests(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


@pytest.fixture(scope="module")
def spark_image(kube: Cluster) -> str:
    """The jobs image, built here and imported into the test bed's containerd; on a cluster
    of one's own, MOLDAU_KUBE_SPARK_IMAGE names an image it can pull."""
    if not kube.owned:
        return os.environ.get("MOLDAU_KUBE_SPARK_IMAGE", "localhost/moldau-spark:0.1.0")
    started = time.monotonic()
    [tag] = built_images("spark")
    print(f"spark image built and imported in {time.monotonic() - started:.0f} s")
    return tag


@pytest.fixture(scope="module")
def storage_class(kube: Cluster) -> Iterator[str]:
    name = unique("spark-local")
    # A controller, a broker and the checkpoint claim (ReadWriteMany, as storage.yaml asks).
    with local_volumes(kube, name, count=3, access_modes=("ReadWriteOnce", "ReadWriteMany")):
        yield name


@pytest.fixture(scope="module")
def namespace(kube: Cluster, crd: None, storage_class: str) -> Iterator[str]:
    with kube.namespace(unique("spark")) as name:
        yield name


@pytest.fixture(scope="module")
def bootstrap(kube: Cluster, namespace: str, storage_class: str,
              operator: OperatorProcess) -> str:
    # One broker: the internal topics of transactions and groups get one replica.
    config = {"num.partitions": "1", "offsets.topic.replication.factor": "1",
              "transaction.state.log.replication.factor": "1",
              "transaction.state.log.min.isr": "1"}
    kube.apply(json.dumps(cluster_manifest("kc", storage_class, config=config)), namespace)
    found = wait_ready(kube, namespace, "kc")
    # This process reaches the brokers by their cluster names through the test bed's DNS.
    install(TESTBED_DNS)
    return found["listeners"][0]["bootstrapServers"]


@pytest.fixture(scope="module")
def spark_namespace(kube: Cluster, namespace: str, storage_class: str) -> str:
    """The driver's ServiceAccount, Role and RoleBinding, and the checkpoint claim, from
    spark/k8s/ as they are (the claim in the test's storage class)."""
    kube.apply(json.dumps({"apiVersion": "v1", "kind": "List",
                           "items": manifests("rbac.yaml")}), namespace)
    [claim] = [doc for doc in manifests("storage.yaml")
               if doc["metadata"]["name"] == "spark-checkpoints"]
    claim["spec"]["storageClassName"] = storage_class
    kube.apply(json.dumps(claim), namespace)
    return namespace


class PodWatch:
    """Every Spark pod of the namespace seen while a submission runs: role, image, phases."""

    def __init__(self, kube: Cluster, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.seen: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.kube.get_json("-n", self.namespace, "pods", "-l", "spark-role")
            except AssertionError:
                pods = {"items": []}
            for pod in pods["items"]:
                entry = self.seen.setdefault(pod["metadata"]["name"], {
                    "role": pod["metadata"]["labels"]["spark-role"],
                    "image": pod["spec"]["containers"][0]["image"],
                    "pullPolicy": pod["spec"]["containers"][0]["imagePullPolicy"],
                    "serviceAccount": pod["spec"].get("serviceAccountName"),
                    "fsGroup": (pod["spec"].get("securityContext") or {}).get("fsGroup"),
                    "phases": []})
                phase = pod["status"].get("phase")
                if phase and phase not in entry["phases"]:
                    entry["phases"].append(phase)
            self._stop.wait(1.0)

    def __enter__(self) -> PodWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def documented_command() -> tuple[list[str], dict[str, str], str]:
    """docs/spark.md's spark-submit command (section "spark-submit --master k8s://"): the
    options before `--conf`s, the `--conf`s, and the application."""
    section = (REPO_ROOT / "docs" / "spark.md").read_text().split(
        "### spark-submit --master k8s://", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block[block.index("spark-submit "):].replace("\\\n", " "))
    options, conf, application = [], {}, ""
    words = iter(words[1:])
    for word in words:
        if word == "--conf":
            key, value = next(words).split("=", 1)
            conf[key] = value
        elif word.startswith("local://"):
            application = word
            break
        else:
            options.append(word)
    return options, conf, application


def submitter_kubeconfig(kube: Cluster, namespace: str, work: Path) -> Path:
    """A kubeconfig for spark-submit: a service account allowed to edit the namespace, with a
    token, as a CI job would submit. (The test bed's own admin key is an EC key in PKCS#8,
    which Spark's Kubernetes client reads as RSA whatever it is told: "Invalid DER".)"""
    account = "spark-submit"
    if not kube.get_json("-n", namespace, "serviceaccounts", "--field-selector",
                         f"metadata.name={account}")["items"]:
        kube.kubectl("-n", namespace, "create", "serviceaccount", account)
        kube.kubectl("-n", namespace, "create", "rolebinding", account, "--clusterrole=edit",
                     f"--serviceaccount={namespace}:{account}")
    token = kube.kubectl("-n", namespace, "create", "token", account,
                         "--duration=1h").strip()
    [cluster] = json.loads(kube.kubectl("config", "view", "--raw", "--minify", "-o",
                                        "json"))["clusters"]
    config = {"apiVersion": "v1", "kind": "Config", "current-context": account,
              "clusters": [{"name": "testbed", "cluster": cluster["cluster"]}],
              "users": [{"name": account, "user": {"token": token}}],
              "contexts": [{"name": account, "context": {
                  "cluster": "testbed", "user": account, "namespace": namespace}}]}
    path = work / "submitter.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def spark_submit(kube: Cluster, namespace: str, image: str, driver_pod: str,
                 args: list[str], work: Path) -> subprocess.CompletedProcess:
    """The command docs/spark.md gives, run with pip PySpark's spark-submit: the test's
    namespace, image (pullPolicy Never: the test bed pulls nothing) and driver pod name, the
    pod template from the repository, and the job's arguments for the test's topics."""
    options, conf, application = documented_command()
    assert application == JOB
    for role in ("driver", "executor"):
        assert conf[f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.checkpoints."
                    "mount.path"] == CHECKPOINTS
    server = kube.kubectl("config", "view", "--minify", "-o",
                          "jsonpath={.clusters[0].cluster.server}").strip()
    options = [f"k8s://{server}" if word.startswith("k8s://") else word for word in options]
    for key, value in conf.items():
        if value.startswith("spark/k8s/"):
            conf[key] = str(REPO_ROOT / value)
    conf.update({"spark.kubernetes.namespace": namespace,
                 "spark.kubernetes.container.image": image,
                 "spark.kubernetes.container.image.pullPolicy": "Never",
                 "spark.kubernetes.driver.pod.name": driver_pod})
    command = [str(Path(sys.executable).with_name("spark-submit")), *options]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    work.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYSPARK_", "SPARK_"))}
    # As in an activated virtual environment: spark-submit finds PySpark through python3.
    env.update(KUBECONFIG=str(submitter_kubeconfig(kube, namespace, work)),
               SPARK_LOCAL_IP="127.0.0.1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run([*command, application, *args], env=env, cwd=work,
                          capture_output=True, text=True, timeout=SUBMIT_TIMEOUT)


def run_job(kube: Cluster, namespace: str, image: str, name: str, args: list[str],
            work: Path) -> dict[str, dict]:
    """One submission, waited for: the driver pod must succeed, an executor pod from the
    image must have run, and the driver must have removed its executors (its Role allows
    that); the Spark pods seen."""
    started = time.monotonic()
    with PodWatch(kube, namespace) as watch:
        done = spark_submit(kube, namespace, image, name, args, work)
    took = time.monotonic() - started
    print(f"spark-submit of {name}: {took:.0f} s, exit {done.returncode}")
    submitted = (done.stdout + done.stderr)[-3000:]
    pod = kube.get_json("-n", namespace, "pod", name) if name in watch.seen else None
    assert pod, f"no driver pod {name}: {submitted}"
    log = kube.kubectl("-n", namespace, "logs", name)
    tail = "\n".join(log.splitlines()[-60:])
    assert done.returncode == 0, submitted + "\n" + tail
    state = pod["status"]["containerStatuses"][0]["state"]
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[-2000:] + tail
    assert state["terminated"]["exitCode"] == 0
    assert "forbidden" not in log.lower(), tail
    pods = {pod_name: seen for pod_name, seen in watch.seen.items()
            if pod_name == name or seen["role"] == "executor"}
    executors = [seen for seen in pods.values() if seen["role"] == "executor"]
    assert pods[name]["image"] == image and pods[name]["serviceAccount"] == "spark", pods
    assert executors and all(seen["image"] == image and seen["pullPolicy"] == "Never"
                             for seen in executors), pods
    # The pod template's security context, on both.
    assert {seen["fsGroup"] for seen in pods.values()} == {185}, pods
    assert any("Running" in seen["phases"] for seen in executors), pods
    poll(lambda: not kube.get_json("-n", namespace, "pods", "-l",
                                   "spark-role=executor")["items"],
         120, "the driver to remove its executor pods")
    return pods


def test_windowed_counts_submitted_to_kubernetes(kube: Cluster, spark_namespace: str,
                                                 spark_image: str, bootstrap: str,
                                                 tmp_path: Path) -> None:
    namespace = spark_namespace
    orders, counts = unique("k8s-orders"), unique("k8s-counts")
    kp_create_topic(bootstrap, orders, configs=KEEP)
    kp_create_topic(bootstrap, counts)
    args = ["--bootstrap-servers", bootstrap, "--input", orders, "--output", counts,
            "--checkpoint", f"{CHECKPOINTS}/{counts}", "--available-now", "--exactly-once"]
    for run, records in enumerate((FIRST_RUN, SECOND_RUN), start=1):
        kp_produce(bootstrap, orders, records)
        run_job(kube, namespace, spark_image, f"windowed-counts-{run}-driver", args,
                tmp_path / f"run{run}")
    expected = expected_rows()
    rows = poll(lambda: (found := window_rows(bootstrap, counts)) and
                len(found) >= len(expected) and found, 120,
                f"{len(expected)} committed rows in {counts}")
    assert rows == expected


SCHEMA = REPO_ROOT / "tests" / "spark" / "kubeflow" / "sparkapplication-v1beta2.schema.json"


@pytest.fixture(scope="module")
def spark_application_crd(kube: Cluster) -> Iterator[None]:
    """The SparkApplication CRD around the Kubeflow Spark operator's v1beta2 schema (no
    operator runs it: only the API server's validation is asked for)."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "sparkapplications.sparkoperator.k8s.io",
                        # As the operator's own CRD: *.k8s.io groups need this annotation.
                        "annotations": {"api-approved.kubernetes.io":
                                        "https://github.com/kubeflow/spark-operator/pull/1298"}},
           "spec": {"group": "sparkoperator.k8s.io", "scope": "Namespaced",
                    "names": {"kind": "SparkApplication", "listKind": "SparkApplicationList",
                              "plural": "sparkapplications", "singular": "sparkapplication",
                              "shortNames": ["sparkapp"]},
                    "versions": [{"name": "v1beta2", "served": True, "storage": True,
                                  "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": json.loads(
                                      SCHEMA.read_text())}}]}}
    existing = kube.kubectl("get", "crd", "--ignore-not-found", "-o", "name",
                            crd["metadata"]["name"]).strip()
    if existing:
        # Someone's own Spark operator: use its CRD as it is, and leave it.
        yield
        return
    kube.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(crd))
    wait_established(kube, crd["metadata"]["name"])
    try:
        yield
    finally:
        kube.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", timeout=300)


def test_the_api_server_accepts_the_applications_and_refuses_a_misspelling(
        kube: Cluster, spark_application_crd: None) -> None:
    with kube.namespace(unique("sparkapp")) as namespace:
        for name in ("windowed-counts.yaml", "archive-to-parquet.yaml"):
            [app] = manifests(name)
            out = kube.kubectl("-n", namespace, "apply", "--dry-run=server",
                               "--validate=strict", "-f", "-", stdin=json.dumps(app))
            assert "created (server dry run)" in out
        [app] = manifests("windowed-counts.yaml")
        app["spec"]["driver"]["memmory"] = app["spec"]["driver"].pop("memory")
        with pytest.raises(AssertionError, match=r'unknown field "spec.driver.memmory"'):
            kube.kubectl("-n", namespace, "apply", "--dry-run=server", "--validate=strict",
                         "-f", "-", stdin=json.dumps(app))
