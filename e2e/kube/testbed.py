"""A Kubernetes cluster for end-to-end tests: the developer's own, or this machine's test bed.

With KUBECONFIG set, tests run against that cluster (kind, minikube, a cloud cluster) and
nothing is started or stopped. Otherwise `up.sh` starts the single-node test bed from the
binaries and images `make kube-deps` cached, and `down.sh` always takes it down afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.support import moldau_cache_dir

HERE = Path(__file__).resolve().parent
UP_TIMEOUT = 600.0
DOWN_TIMEOUT = 300.0
KUBECTL_TIMEOUT = 120.0


class TestbedUnavailable(Exception):
    """No cluster can be had; the message names the missing part in one line."""


def _versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (HERE / "versions.env").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


VERSIONS = _versions()


def cache_dir() -> Path:
    """Where `make kube-deps` put the binaries and images (lib.sh computes the same path)."""
    return moldau_cache_dir(f"kube-{VERSIONS['KUBE_VERSION']}", "MOLDAU_KUBE_CACHE")


def run_dir() -> Path:
    return Path(os.environ.get("MOLDAU_KUBE_RUN", "/tmp/moldau-kube"))


REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "kubelet", "kube-proxy", "kubectl", "coredns", "crictl", "cni/bridge")
REQUIRED_IMAGES = ("pause.tar", "python.tar")
REQUIRED_COMMANDS = ("containerd", "runc", "ctr", "iptables-restore")


def missing_part() -> str | None:
    """What keeps this machine from running the test bed, or None."""
    cache = cache_dir()
    for name in REQUIRED_BINARIES:
        if not os.access(cache / "bin" / name, os.X_OK):
            return f"{cache / 'bin' / name} (run 'make kube-deps' or set KUBECONFIG)"
    for name in REQUIRED_IMAGES:
        if not (cache / "images" / name).is_file():
            return f"{cache / 'images' / name} (run 'make kube-deps' or set KUBECONFIG)"
    for command in REQUIRED_COMMANDS:
        if shutil.which(command) is None:
            return f"the {command} command (run 'make kube-deps' or set KUBECONFIG)"
    if os.geteuid() != 0:
        return "root: the test bed configures network and cgroups (or set KUBECONFIG)"
    return None


class KubectlError(AssertionError):
    pass


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl_path: str
    # The image test pods run: the test bed's local Debian + python3 image, or
    # MOLDAU_KUBE_PYTHON_IMAGE for a cluster that can pull one.
    python_image: str
    # This machine's own test bed (images built here and imported, no route out), whether
    # the tests started it or `make kube-up` did; False for a KUBECONFIG cluster.
    owned: bool

    def kubectl(self, *args: str, stdin: str | None = None,
                timeout: float = KUBECTL_TIMEOUT) -> str:
        """Run kubectl; its stdout, or an error naming the command and kubectl's message."""
        command = [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args]
        try:
            done = subprocess.run(command, input=stdin, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"kubectl {' '.join(args)}: no answer in {timeout} s") from exc
        if done.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply(self, manifest: str, namespace: str | None = None) -> None:
        scope = ["-n", namespace] if namespace else []
        self.kubectl(*scope, "apply", "-f", "-", stdin=manifest)

    @contextlib.contextmanager
    def namespace(self, name: str) -> Iterator[str]:
        """A namespace of its own for one test, deleted afterwards with all it holds."""
        self.kubectl("create", "namespace", name)
        try:
            yield name
        finally:
            self.kubectl("delete", "namespace", name, "--wait=true", timeout=300)


def poll(check: Callable[[], object], timeout: float, what: str,
         explain: Callable[[], str] = lambda: "", interval: float = 0.5) -> object:
    """check() until it returns something true; fail after timeout naming what and why."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            result = check()
        except KubectlError as exc:
            result, last_error = None, str(exc)
        if result:
            return result
        if time.monotonic() > deadline:
            detail = explain() or last_error
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                                 + (f"\n{detail}" if detail else ""))
        time.sleep(interval)


def wait_established(kube: Cluster, *crds: str, timeout: float = 60.0) -> None:
    """Until each CRD's Established condition is True. (`kubectl wait` fails at once while a
    CRD just applied has no conditions yet.)"""
    def established(name: str) -> bool:
        conditions = kube.get_json("crd", name).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
    for name in crds:
        poll(lambda name=name: established(name), timeout, f"the CRD {name} to be established")


def run_script(name: str, log: Path, timeout: float) -> None:
    with log.open("a") as out:
        try:
            done = subprocess.run(["bash", str(HERE / name)], stdout=out,
                                  stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise TestbedUnavailable(
                f"{name} did not finish in {timeout:.0f} s (log: {log})") from exc
    if done.returncode != 0:
        lines = log.read_text().strip().splitlines()
        raise TestbedUnavailable(f"{name} failed: {lines[-1] if lines else '?'} (log: {log})")


# The sysctls up.sh saves and down.sh restores (up.sh's SYSCTLS).
SYSCTLS = ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables",
           "net/ipv4/conf/all/route_localnet", "kernel/panic", "kernel/panic_on_oops",
           "vm/overcommit_memory", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def _output(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout


# What the test bed adds on the host (lib.sh's BRIDGE and NODE_IP, up.sh's chains): the
# guard compares only these, since other users of the machine add links, addresses and
# chains of their own meanwhile.
BRIDGE = "moldau0"
NODE_ADDRESS = "10.250.0.1/32"
CHAIN_PREFIXES = ("KUBE-", "MOLDAU-")


def host_state(bridge: str = BRIDGE) -> dict[str, object]:
    """What the test bed touches on the host, to compare before up.sh and after down.sh."""
    sysctls = {name: (Path("/proc/sys") / name).read_text().strip() for name in SYSCTLS
               if (Path("/proc/sys") / name).exists()}
    # Chain names, not rules: counters and rule order of other users may move.
    chains = {command: sorted(name for name in (line[1:].split()[0] for line in
                                                _output(command).splitlines()
                                                if line.startswith(":"))
                              if name.startswith(CHAIN_PREFIXES))
              for command in ("iptables-save", "ip6tables-save")}
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(str(run_dir()))]
    return {"sysctls": sysctls, "iptables chains": chains, "mounts": mounts,
            "node address on lo": NODE_ADDRESS in _output(
                "ip", "-o", "-4", "addr", "show", "dev", "lo").split(),
            "links": bridge_links(bridge),
            "kubepods cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")),
            "processes of the test bed": _processes_naming(run_dir()),
            "run directory": run_dir().exists()}


def bridge_links(bridge: str) -> list[str]:
    """The bridge and the pods' veths on it. A veth left behind keeps its pod's network
    namespace, a mount under the run directory, which the guard checks too."""
    found = [line.split()[1].split("@")[0].rstrip(":") for line in _output(
        "ip", "-o", "link", "show", "master", bridge).splitlines()]
    if _output("ip", "-o", "link", "show", "dev", bridge).strip():
        found.append(bridge)
    return sorted(found)


def _processes_naming(path: Path) -> list[str]:
    """Command lines of the processes that name something under path (containerd's shims
    name its socket)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if f"{path}/" in command:
                found.append(command.strip())
    return sorted(found)


def changes(before: dict[str, object], after: dict[str, object]) -> str:
    return "; ".join(f"{key}: {before[key]} -> {after[key]}" for key in before
                     if before[key] != after[key])


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie (this machine reaps the dead slowly)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _command_line(component: str) -> tuple[int, list[bytes]]:
    """The pid and command line of a running test bed component (up.sh's pid files)."""
    pid = int((run_dir() / "pids" / component).read_text())
    return pid, Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")


def _kill(component: str, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)  # gone at once, as in a crash
    poll(lambda: not _running(pid), 60, f"{component} to stop")


def _start(component: str, command: list[bytes]) -> None:
    """As up.sh starts it: its own session, its log, its pid file."""
    with open(run_dir() / "logs" / f"{component}.log", "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    (run_dir() / "pids" / component).write_text(f"{process.pid}\n")


def restart_api_server(kube: Cluster, down_seconds: float) -> None:
    """Kill the test bed's kube-apiserver, keep it down for `down_seconds`, start it again
    with the same command line and wait until it answers. The scheduler is started afresh
    with it: after an outage its cache can disagree with the API server, and it then exits
    ("Scheduler cache is corrupted"), which a real control plane's kubelet would answer by
    restarting it; nothing here supervises it."""
    api_pid, api_command = _command_line("kube-apiserver")
    scheduler_pid, scheduler_command = _command_line("kube-scheduler")
    _kill("kube-apiserver", api_pid)
    _kill("kube-scheduler", scheduler_pid)
    time.sleep(down_seconds)
    _start("kube-apiserver", api_command)
    poll(lambda: kube.kubectl("get", "--raw", "/readyz", timeout=10) == "ok", 120,
         "kube-apiserver to answer again")
    _start("kube-scheduler", scheduler_command)


def local_testbed_running() -> bool:
    """The machine's own test bed is up (`make kube-up`): its API server answers."""
    kubeconfig = run_dir() / "kubeconfig"
    kubectl = cache_dir() / "bin" / "kubectl"
    if not kubeconfig.exists() or not os.access(kubectl, os.X_OK):
        return False
    done = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "get", "--raw",
                           "/readyz"], capture_output=True, timeout=30)
    return done.returncode == 0


@contextlib.contextmanager
def local_testbed(log: Path) -> Iterator[Cluster]:
    """The machine's own test bed, up for the block and always down after it; down must
    leave the host as up found it."""
    missing = missing_part()
    if missing:
        raise TestbedUnavailable(f"Kubernetes test bed: missing {missing}")
    before = host_state()
    try:
        run_script("up.sh", log, UP_TIMEOUT)
        yield Cluster(kubeconfig=run_dir() / "kubeconfig",
                      kubectl_path=str(cache_dir() / "bin" / "kubectl"),
                      python_image=VERSIONS["PYTHON_IMAGE"], owned=True)
    finally:
        run_script("down.sh", log, DOWN_TIMEOUT)
    left = changes(before, host_state())
    assert not left, f"down.sh left the host changed: {left}"


@contextlib.contextmanager
def cluster_for_tests(log: Path) -> Iterator[Cluster]:
    """The cluster KUBECONFIG names, else the local test bed."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig and local_testbed_running():
        # Started by `make kube-up`: used as it is, and left running.
        yield Cluster(kubeconfig=run_dir() / "kubeconfig",
                      kubectl_path=str(cache_dir() / "bin" / "kubectl"),
                      python_image=VERSIONS["PYTHON_IMAGE"], owned=True)
        return
    if not kubeconfig:
        with local_testbed(log) as cluster:
            yield cluster
        return
    kubectl = shutil.which("kubectl") or str(cache_dir() / "bin" / "kubectl")
    if not os.access(kubectl, os.X_OK):
        raise TestbedUnavailable("KUBECONFIG is set but there is no kubectl on PATH")
    yield Cluster(kubeconfig=Path(kubeconfig), kubectl_path=kubectl,
                  python_image=os.environ.get("MOLDAU_KUBE_PYTHON_IMAGE", "python:3.11-slim"),
                  owned=False)
