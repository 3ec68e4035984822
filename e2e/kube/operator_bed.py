"""What the operator's end-to-end tests set up on a Kubernetes cluster: the broker image in the
node's containerd, the CRD, local volumes, the operator as a process on this host, and the
KafkaCluster manifests, waits and client pod the tests share."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from e2e.images.podman import build_image, podman
from e2e.kube.cluster_names import SERVER_ENV
from e2e.kube.testbed import Cluster, poll, run_dir, wait_established
from e2e.support import free_port, unique, wait_until

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CRDS = sorted((REPO / "crds").glob("*.yaml"))
# The test bed's CoreDNS (lib.sh's NODE_IP): it answers for cluster names.
TESTBED_DNS = "10.250.0.1"


def load_into_testbed(tag: str) -> None:
    """The test bed pulls nothing: an image goes from podman into its containerd."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "image.tar"
        podman("save", "--format", "docker-archive", "-o", str(archive), tag, timeout=300)
        subprocess.run(["ctr", "--address", str(run_dir() / "containerd" / "containerd.sock"),
                        "-n", "k8s.io", "images", "import", str(archive)],
                       check=True, capture_output=True, timeout=300)


def built_images(*targets: str) -> list[str]:
    """The images of these Dockerfile targets, built here and imported into the test bed."""
    done = build_image(*targets)
    assert done.returncode == 0, done.stdout + done.stderr
    # build.sh's timed steps and image sizes, for the report.
    print(done.stdout)
    tags = done.stdout.strip().splitlines()[-len(targets):]
    for tag in tags:
        load_into_testbed(tag)
    return tags


def broker_image(kube: Cluster) -> str:
    """The broker image, built here and imported into the test bed's containerd; on a
    cluster of one's own, MOLDAU_KUBE_BROKER_IMAGE names an image it can pull."""
    if not kube.owned:
        return os.environ.get("MOLDAU_KUBE_BROKER_IMAGE", "localhost/moldau-broker:0.1.0")
    return built_images("broker")[0]


@contextlib.contextmanager
def crd_installed(kube: Cluster) -> Iterator[None]:
    """The operator's CRDs (KafkaCluster, Topic, KafkaUser)."""
    files = [arg for crd in CRDS for arg in ("-f", str(crd))]
    kube.kubectl("apply", "--server-side", *files)
    wait_established(kube, "kafkaclusters.moldau.io", "topics.moldau.io",
                     "kafkausers.moldau.io")
    try:
        yield
    finally:
        kube.kubectl("delete", *files, "--ignore-not-found", "--wait=true", timeout=300)


@contextlib.contextmanager
def local_volumes(kube: Cluster, storage_class: str, count: int, capacity: str = "1Gi",
                  default: bool = False,
                  access_modes: tuple[str, ...] = ("ReadWriteOnce",)) -> Iterator[None]:
    """`count` hostPath volumes of `capacity` in a storage class of their own (the cluster's
    default class if `default`), writable by any user, deleted afterwards with their folders.
    On one node a hostPath volume may also offer ReadWriteMany (`access_modes`)."""
    root = Path(tempfile.mkdtemp(prefix=f"{storage_class}-"))
    root.chmod(0o755)
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    items = [{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
              "metadata": {"name": storage_class, "annotations": annotations},
              "provisioner": "kubernetes.io/no-provisioner",
              "volumeBindingMode": "WaitForFirstConsumer"}]
    for i in range(count):
        folder = root / f"pv{i}"
        folder.mkdir()
        folder.chmod(0o777)
        items.append({"apiVersion": "v1", "kind": "PersistentVolume",
                      "metadata": {"name": f"{storage_class}-{i}",
                                   "labels": {"moldau.io/e2e": storage_class}},
                      "spec": {"capacity": {"storage": capacity},
                               "accessModes": list(access_modes),
                               "persistentVolumeReclaimPolicy": "Retain",
                               "storageClassName": storage_class,
                               "hostPath": {"path": str(folder), "type": "Directory"}}})
    kube.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        yield
    finally:
        kube.kubectl("delete", "pv", "-l", f"moldau.io/e2e={storage_class}",
                     "--ignore-not-found", "--wait=true", timeout=300)
        kube.kubectl("delete", "storageclass", storage_class, "--ignore-not-found")
        shutil.rmtree(root, ignore_errors=True)


class OperatorProcess:
    """`moldau operator` on this host against the cluster's kubeconfig."""

    def __init__(self, kube: Cluster, namespace: str, image: str, log: Path,
                 args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig),
               "MOLDAU_BROKER_IMAGE": image,
               # The operator reaches brokers by their cluster names.
               SERVER_ENV: os.environ.get(SERVER_ENV, TESTBED_DNS),
               "PYTHONPATH": os.pathsep.join([str(HERE / "cluster_dns"), str(REPO)])}
        self._out = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moldau.cli", "operator", "--standalone",
             "--namespace", namespace, "--http-port", str(self.port), *args],
            env=env, stdout=self._out, stderr=subprocess.STDOUT)
        wait_until(lambda: self.get("/healthz") == 200, 60, "the operator's /healthz")

    def get(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=5) as answer:
                return answer.status
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                    timeout=5) as answer:
            return answer.read().decode()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int | None:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=30)
        self._out.close()
        return code

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_operator(kube: Cluster, namespace: str, image: str, log: Path,
                     args: tuple[str, ...] = ()) -> Iterator[OperatorProcess]:
    """The operator for a module's tests; at the end the namespace's Topics and KafkaUsers
    are deleted while it still runs (their finalizers need it), it must stop with 0, and its log's
    tail is printed."""
    process = OperatorProcess(kube, namespace, image, log, args)
    try:
        yield process
    finally:
        kube.kubectl("-n", namespace, "delete", "topics,kafkausers", "--all", "--wait=true",
                     timeout=300)
        code = process.stop()
        print(f"operator log ({log}):\n{process.tail(80)}")
        assert code == 0, f"the operator exited with {code}"


READY_TIMEOUT = 240.0


def cluster_manifest(name: str, storage_class: str, brokers: int = 1,
                     config: dict | None = None, controllers: int = 1) -> dict:
    return {"apiVersion": "moldau.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": name},
            "spec": {"nodePools": [
                {"name": "controllers", "roles": ["controller"], "replicas": controllers,
                 "storage": {"size": "100Mi", "storageClassName": storage_class}},
                {"name": "brokers", "roles": ["broker"], "replicas": brokers,
                 "storage": {"size": "100Mi", "storageClassName": storage_class}}],
                "listeners": [{"name": "plain", "port": 9092, "type": "internal"}],
                "config": config or {"num.partitions": "1"}}}


def status(kube: Cluster, namespace: str, name: str) -> dict:
    return kube.get_json("-n", namespace, "kafkacluster", name).get("status") or {}


def condition(found: dict, kind: str) -> dict:
    return next((c for c in found.get("conditions") or [] if c["type"] == kind), {})


def wait_ready(kube: Cluster, namespace: str, name: str, generation: int | None = None,
               brokers: str = "1/1") -> dict:
    def ready() -> dict | None:
        found = status(kube, namespace, name)
        settled = (found.get("phase") == "Ready" and found.get("readyBrokers") == brokers
                   and condition(found, "Reconciling").get("status") == "False")
        if generation is not None and found.get("observedGeneration") != generation:
            return None
        return found if settled else None

    def explain() -> str:
        return json.dumps(status(kube, namespace, name), indent=1)[-3000:] + "\n" + \
            kube.kubectl("-n", namespace, "get", "pods", "-o", "wide")

    return poll(ready, READY_TIMEOUT, f"KafkaCluster {name} to be Ready", explain, 1.0)


def run_client_pod(kube: Cluster, namespace: str, image: str, bootstrap: str) -> None:
    """A pod from the broker image produces three lines through bootstrap and consumes
    them back."""
    topic = unique("in-cluster")
    script = (f"printf 'one\\ntwo\\nthree\\n' | moldau produce --bootstrap-server {bootstrap} "
              f"--topic {topic} && moldau consume --bootstrap-server {bootstrap} --topic "
              f"{topic} --from-beginning --max-messages 3 --timeout-ms 60000")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "client", "image": image, "imagePullPolicy": "IfNotPresent",
               "command": ["sh", "-c", script]}]}}
    kube.kubectl("-n", namespace, "delete", "pod", "client", "--ignore-not-found",
                 "--wait=true")
    kube.apply(json.dumps(pod), namespace)
    poll(lambda: kube.get_json("-n", namespace, "pod", "client")["status"].get("phase")
         in ("Succeeded", "Failed"), 180, "the client pod to finish")
    logs = kube.kubectl("-n", namespace, "logs", "client")
    phase = kube.get_json("-n", namespace, "pod", "client")["status"]["phase"]
    kube.kubectl("-n", namespace, "delete", "pod", "client", "--wait=false")
    assert phase == "Succeeded", logs
    # The consumer's count line ("Processed a total of 3 messages") goes to stderr.
    assert [line for line in logs.splitlines() if not line.startswith("Processed")] == \
        ["one", "two", "three"]


# A client in a process of its own, which resolves no cluster name: it reaches the brokers
# only if they advertise addresses the host can reach. Prints the brokers' addresses as
# Metadata names them and the values it read back.
_OUTSIDE_CLIENT = """
import json, sys
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic, replicas = sys.argv[1:4]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(topic, 2, int(replicas))])[topic].result(60)
brokers = sorted(f"{b.host}:{b.port}" for b in admin.list_topics(timeout=30).brokers.values())
producer = Producer({"bootstrap.servers": bootstrap})
for n in range(10):
    producer.produce(topic, str(n).encode(), partition=n % 2)
assert producer.flush(60) == 0
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                     "auto.offset.reset": "earliest"})
consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
read = []
while len(read) < 10:
    read += [m.value().decode() for m in consumer.consume(10, 30) if m.error() is None]
consumer.close()
print(json.dumps({"brokers": brokers, "read": sorted(read, key=int)}))
"""


def outside_client(bootstrap: str, topic: str, replicas: int = 1) -> list[str]:
    """Creates `topic`, produces 10 records (acks=all) and reads them back from a process on
    this host through `bootstrap`; the brokers' addresses as Metadata names them."""
    done = subprocess.run([sys.executable, "-c", _OUTSIDE_CLIENT, bootstrap, topic,
                           str(replicas)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["read"] == [str(n) for n in range(10)], seen
    return seen["brokers"]
