"""Acceptance of the Kubernetes test bed (or of the cluster KUBECONFIG names): a StatefulSet of
three pods with a headless Service, readiness probes and a volume claim each. All become Ready,
reach each other by their stable DNS names, keep their volume's files when deleted, and are
replaced when deleted."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from e2e.kube.testbed import UP_TIMEOUT, Cluster, cache_dir, poll, run_dir, run_script

# The first test also waits for the test bed to come up.
pytestmark = [pytest.mark.kube, pytest.mark.timeout(900)]

REPLICAS = 3
READY_TIMEOUT = 240.0
DNS_TIMEOUT = 60.0

# Each pod serves its volume over HTTP, after writing its own name there; it exits on SIGTERM
# (as PID 1, Python would otherwise ignore it and wait out the grace period).
SERVER = """
import http.server, os, signal, socket, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
os.chdir("/data")
with open("hostname", "w") as f:
    f.write(socket.gethostname())
http.server.ThreadingHTTPServer(("", 8000), http.server.SimpleHTTPRequestHandler).serve_forever()
"""

# Fetch URLs from inside a pod, retrying each until its deadline: a new pod's name may take
# a few seconds to appear in (or a re-created pod's new address to replace the old one in) DNS.
FETCH = """
import json, sys, time, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
answers = {}
for url in sys.argv[2:]:
    while True:
        try:
            answers[url] = urllib.request.urlopen(url, timeout=3).read().decode()
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                answers[url] = "error: " + str(exc)
                break
            time.sleep(0.5)
print(json.dumps(answers))
"""


def manifest(image: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
         "spec": {"clusterIP": "None", "selector": {"app": "web"},
                  "ports": [{"name": "http", "port": 8000}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
         "spec": {
             "serviceName": "web", "replicas": REPLICAS, "podManagementPolicy": "Parallel",
             "selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                 "terminationGracePeriodSeconds": 10,
                 "containers": [{
                     "name": "web", "image": image, "imagePullPolicy": "IfNotPresent",
                     "command": ["python3", "-c", SERVER],
                     "ports": [{"containerPort": 8000, "name": "http"}],
                     "readinessProbe": {"httpGet": {"path": "/hostname", "port": 8000},
                                        "periodSeconds": 1, "failureThreshold": 3},
                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
             "volumeClaimTemplates": [{
                 "metadata": {"name": "data"},
                 "spec": {"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": "64Mi"}}}}]}},
    ]})


def pod_summary(kube: Cluster, namespace: str) -> str:
    """What the pods and recent events say, for a failure message."""
    pods = kube.kubectl("-n", namespace, "get", "pods,pvc", "-o", "wide")
    events = kube.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp")
    return pods + "\n" + "\n".join(events.splitlines()[-15:])


def ready_pods(kube: Cluster, namespace: str) -> dict[str, str]:
    """Ready pods of the StatefulSet: name -> uid."""
    pods = kube.get_json("-n", namespace, "pods", "-l", "app=web")["items"]
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods
            if pod["metadata"].get("deletionTimestamp") is None
            and any(c["type"] == "Ready" and c["status"] == "True"
                    for c in pod.get("status", {}).get("conditions", []))}


def all_ready(kube: Cluster, namespace: str) -> dict[str, str]:
    pods = ready_pods(kube, namespace)
    return pods if len(pods) == REPLICAS else {}


def fetch_from(kube: Cluster, namespace: str, pod: str, urls: list[str]) -> dict[str, str]:
    out = kube.kubectl("-n", namespace, "exec", pod, "--", "python3", "-c", FETCH,
                       str(DNS_TIMEOUT), *urls, timeout=DNS_TIMEOUT * len(urls) + 30)
    return json.loads(out)


def dns_name(pod: str, namespace: str) -> str:
    return f"{pod}.web.{namespace}.svc.cluster.local"


def assert_reach_each_other(kube: Cluster, namespace: str, pods: list[str]) -> None:
    for source in pods:
        urls = {f"http://{dns_name(target, namespace)}:8000/hostname": target
                for target in pods if target != source}
        answers = fetch_from(kube, namespace, source, list(urls))
        assert answers == urls, f"{source} fetched {answers}, expected {urls}"


# Connect from inside a pod to an address outside the machine (TEST-NET-1, RFC 5737).
CONNECT_OUT = """
import socket
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5)
    print("connected")
except OSError as exc:
    print(type(exc).__name__, exc.errno)
"""


def test_statefulset_with_headless_service_and_volumes(kube: Cluster) -> None:
    with kube.namespace(f"testbed-{uuid.uuid4().hex[:8]}") as ns:
        started = time.monotonic()
        kube.apply(manifest(kube.python_image), namespace=ns)
        first = poll(lambda: all_ready(kube, ns), READY_TIMEOUT,
                     f"{REPLICAS} Ready pods of StatefulSet web", lambda: pod_summary(kube, ns))
        print(f"\nStatefulSet of {REPLICAS}: Ready {time.monotonic() - started:.1f} s after apply")
        names = sorted(first)
        assert names == [f"web-{i}" for i in range(REPLICAS)]
        # The readiness probes reached the server: its access log shows them.
        assert "GET /hostname" in kube.kubectl("-n", ns, "logs", "web-1")

        assert_reach_each_other(kube, ns, names)
        if kube.owned:
            # The test bed's pods have no route out of the machine.
            out = kube.kubectl("-n", ns, "exec", "web-0", "--", "python3", "-c", CONNECT_OUT)
            assert out.split() == ["OSError", str(errno.ENETUNREACH)], out

        token = uuid.uuid4().hex
        kube.kubectl("-n", ns, "exec", "web-0", "--", "python3", "-c",
                     f"open('/data/token', 'w').write({token!r})")
        deleted = time.monotonic()
        kube.kubectl("-n", ns, "delete", "pod", "web-0", "--wait=true")
        replaced = poll(lambda: (pods := all_ready(kube, ns)) and pods["web-0"] != first["web-0"]
                        and pods, READY_TIMEOUT, "a new Ready web-0 after deleting it",
                        lambda: pod_summary(kube, ns))
        print(f"deleted pod web-0 replaced and Ready in {time.monotonic() - deleted:.1f} s")
        assert replaced["web-1"] == first["web-1"] and replaced["web-2"] == first["web-2"]

        kept = kube.kubectl("-n", ns, "exec", "web-0", "--", "cat", "/data/token")
        assert kept == token, f"web-0's volume lost the file written before deletion: {kept!r}"
        # The new web-0 has a new address: its name must lead there from the others.
        assert_reach_each_other(kube, ns, names)


def container_pid(name: str) -> int:
    """The host pid of the test bed's running container NAME, asked of containerd."""
    crictl = [str(cache_dir() / "bin" / "crictl"), "--runtime-endpoint",
              f"unix://{run_dir() / 'containerd' / 'containerd.sock'}"]
    ids = subprocess.run([*crictl, "ps", "-q", "--name", name], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert len(ids) == 1, f"containers named {name}: {ids}"
    info = subprocess.run([*crictl, "inspect", ids[0]], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    return json.loads(info)["info"]["pid"]


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_again_after_a_crash_leaves_nothing_behind(kube: Cluster, tmp_path: Path) -> None:
    """Kubelet, containerd and the apiserver die with a pod running; up.sh then takes the
    remains down (containers included) and brings a working node up again."""
    if not kube.owned:
        pytest.skip("KUBECONFIG names a cluster of its own, not this machine's test bed")
    kube.apply(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "survivor"},
        "spec": {"containers": [{"name": "survivor", "image": kube.python_image,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["python3", "-c", "import time; time.sleep(3600)"]}]}}),
        namespace="default")
    poll(lambda: kube.get_json("-n", "default", "pod", "survivor")["status"].get("phase")
         == "Running", READY_TIMEOUT, "pod survivor Running")
    pid = container_pid("survivor")
    for component in ("kubelet", "containerd", "kube-apiserver"):
        os.kill(int((run_dir() / "pids" / component).read_text()), signal.SIGKILL)

    run_script("up.sh", tmp_path / "up.log", UP_TIMEOUT)

    poll(lambda: not running(pid), 30, f"the crashed test bed's container (pid {pid}) to stop")
    nodes = kube.get_json("nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["moldau-node"]
    pods = kube.get_json("-n", "default", "pods")["items"]
    assert pods == [], "the new test bed kept the old one's pods"
