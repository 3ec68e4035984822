"""LocalCluster: several real `moldau broker` processes on loopback, started, watched and
stopped as one cluster.

Node i (node.id i, counting from 1) listens for clients on `base_port + 2*(i-1)`; the first
`voters` nodes (three at most by default) are also controllers, with a controller listener on
the port after their broker port, and form the metadata quorum. Node i serves metrics and
health (http.listener) on `base_port + 2*brokers + (i-1)`. Every node keeps its data in
`<data_dir>/node-<i>/data` and writes stdout and stderr to `<data_dir>/node-<i>/broker.log`.
The processes run in sessions of their own, so they outlive the program that started them;
`<data_dir>/cluster.json` records their pids, ports, roles and command lines, which is how
`LocalCluster.load` (and `moldau cluster status` / `down`) find them again.

`start()` returns once the cluster is ready: node 1 answers Metadata listing every broker
(KRaft lists only registered, unfenced brokers) and a controller. The other methods are for
tests and benchmarks: kill a node with any signal, stop or restart one, wait until given
nodes are registered again, and read what the cluster says about itself.

    with LocalCluster(tmp_path / "cluster", brokers=3, base_port=free_base_port(3)) as cluster:
        produce(cluster.bootstrap_servers, ...)
        cluster.kill(2)              # SIGKILL, waits for the exit
        cluster.restart(2)           # start again, wait until it is registered
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moldau.cluster.probe import (
    ClusterView,
    ProbeError,
    QuorumView,
    describe_quorum,
    fetch_metadata,
)

__all__ = [
    "DEFAULT_BASE_PORT", "DEFAULT_BROKERS", "DEFAULT_DATA_DIR", "ClusterError", "ClusterNode",
    "ClusterStartError", "LocalCluster", "free_base_port",
]

HOST = "127.0.0.1"
DEFAULT_DATA_DIR = "data/cluster"
DEFAULT_BASE_PORT = 9092
DEFAULT_BROKERS = 3
MAX_DEFAULT_VOTERS = 3
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
ABORT_GRACE = 5.0  # seconds the nodes get after SIGTERM when start-up fails
STATE_FILE = "cluster.json"
STATE_VERSION = 1
LOG_FILE = "broker.log"
META_FILE = "meta.properties"
TAIL_LINES = 20
PROGRESS_INTERVAL = 5.0  # seconds between repeated progress lines
POLL_INTERVAL = 0.25
PROBE_TIMEOUT = 2.0

BROKER_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"
# Settings that define a node's identity and addresses: the launcher owns them.
MANAGED_SETTINGS = frozenset({
    "node.id", "process.roles", "listeners", "advertised.listeners",
    "controller.quorum.voters", "controller.listener.names", "inter.broker.listener.name",
    "log.dirs", "log.dir", "http.listener",
})
Progress = Callable[[str], None]


class ClusterError(Exception):
    """A cluster that cannot be started, found or stopped; the message says why."""


class ClusterStartError(ClusterError):
    """Start-up failed; `node_id` names the node that failed (None: the cluster as a whole)."""

    def __init__(self, message: str, node_id: int | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id


def free_base_port(brokers: int = DEFAULT_BROKERS, *, attempts: int = 200,
                   low: int = 20000, high: int = 32000) -> int:
    """A base port P such that P .. P+3*brokers-1 are all free on loopback right now (picked
    at random below Linux's ephemeral range, so outgoing connections do not take them)."""
    span = 3 * brokers  # broker, controller and http ports
    for _ in range(attempts):
        base = random.randrange(low, high - span)
        if all(port_is_free(port) for port in range(base, base + span)):
            return base
    raise ClusterError(f"no {span} consecutive free ports found between {low} and {high}")


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the broker binds: a port whose old connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat (Z: zombie), or None where /proc is absent."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[0] if fields else None


def _pid_runs(pid: int, marker: str) -> bool:
    """True when process `pid` runs and (where /proc tells) its command line has `marker`,
    so a recycled pid is not mistaken for a node."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not one of ours
    if _proc_state(pid) in ("Z", "X"):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return marker.encode() + b"\0" in cmdline


@dataclass
class ClusterNode:
    """One node of a LocalCluster: its ports, roles, directory and (when running) process."""

    node_id: int
    roles: tuple[str, ...]
    broker_port: int
    controller_port: int | None
    directory: Path
    command: list[str] = field(default_factory=list)
    pid: int | None = None
    exit_code: int | None = None  # known for processes started by this object
    http_port: int | None = None
    host: str = HOST  # the address the node binds and advertises
    # Words put before the node's command, e.g. ["ip", "netns", "exec", <namespace>].
    command_prefix: tuple[str, ...] = ()
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def is_voter(self) -> bool:
        return "controller" in self.roles

    @property
    def broker_address(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def controller_address(self) -> str | None:
        return None if self.controller_port is None else f"{self.host}:{self.controller_port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    @property
    def shares_loopback(self) -> bool:
        """The node's ports are on this host's loopback, where other programs may hold them
        (a node with an address of its own, in a network namespace, has ports of its own)."""
        return self.host == HOST

    @property
    def ports(self) -> list[tuple[int, str]]:
        ports = [(self.broker_port, "broker listener")]
        if self.controller_port is not None:
            ports.append((self.controller_port, "controller listener"))
        if self.http_port is not None:
            ports.append((self.http_port, "http listener"))
        return ports

    @property
    def metrics_url(self) -> str | None:
        return None if self.http_port is None else f"http://{self.host}:{self.http_port}/metrics"

    @property
    def alive(self) -> bool:
        """The node's process runs (a zombie or a recycled pid does not count)."""
        if self._proc is not None:
            code = self._proc.poll()
            if code is None:
                return True
            self.exit_code = code
            return False
        if self.pid is None:
            return False
        return _pid_runs(self.pid, f"log.dirs={self.data_dir}")

    def signal(self, sig: int) -> bool:
        """Send `sig` to the node's process group; False when it was not running."""
        if self.pid is None or not self.alive:
            return False
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            os.kill(self.pid, sig)
        return True

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the process to end; True when it has."""
        if self._proc is not None:
            try:
                self.exit_code = self._proc.wait(max(timeout, 0.0))
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.alive:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last `lines` lines of the node's log."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(size - 64 * 1024, 0))
                text = handle.read().decode(errors="replace")
        except OSError as exc:
            return f"(cannot read {self.log_path}: {exc.strerror or exc})"
        return "\n".join(text.splitlines()[-lines:])

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "roles": list(self.roles),
                "broker_port": self.broker_port, "controller_port": self.controller_port,
                "directory": str(self.directory), "log": str(self.log_path),
                "pid": self.pid, "command": self.command, "http_port": self.http_port,
                "host": self.host, "command_prefix": list(self.command_prefix)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterNode:
        return cls(int(data["node_id"]), tuple(data["roles"]), int(data["broker_port"]),
                   None if data.get("controller_port") is None else int(data["controller_port"]),
                   Path(data["directory"]), list(data.get("command") or []),
                   None if data.get("pid") is None else int(data["pid"]),
                   http_port=None if data.get("http_port") is None else int(data["http_port"]),
                   host=str(data.get("host") or HOST),
                   command_prefix=tuple(data.get("command_prefix") or ()))


class LocalCluster:
    """A cluster of `moldau broker` processes on 127.0.0.1. See the module docstring."""

    def __init__(self, data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
                 brokers: int = DEFAULT_BROKERS, base_port: int = DEFAULT_BASE_PORT, *,
                 overrides: Mapping[str, object] | None = None, voters: int | None = None,
                 log_level: str = "INFO", launcher: Sequence[str] | None = None,
                 progress: Progress | None = None, hosts: Sequence[str] | None = None,
                 command_prefixes: Sequence[Sequence[str]] | None = None) -> None:
        """`hosts` (one address per node, default all 127.0.0.1) and `command_prefixes`
        (words run before each node's command) place nodes in network namespaces."""
        if brokers < 1:
            raise ClusterError(f"a cluster needs at least one broker, not {brokers}")
        voters = min(brokers, MAX_DEFAULT_VOTERS) if voters is None else voters
        if not 1 <= voters <= brokers:
            raise ClusterError(f"voters must be between 1 and the number of brokers "
                               f"({brokers}), not {voters}")
        if base_port < 1 or base_port + 3 * brokers - 1 > 65535:
            raise ClusterError(f"base port {base_port} leaves no room for {brokers} brokers "
                               f"(ports {base_port}..{base_port + 3 * brokers - 1} must be "
                               "between 1 and 65535)")
        self.overrides = {key: str(value) for key, value in (overrides or {}).items()}
        for key in self.overrides:
            if key in MANAGED_SETTINGS:
                raise ClusterError(f"{key} cannot be overridden: the launcher sets it for each "
                                   "node (see --base-port and --data-dir)")
        self.data_dir = Path(data_dir).resolve()
        self.base_port = base_port
        self.log_level = log_level
        self.launcher = list(launcher) if launcher else [sys.executable, "-m", "moldau.cli"]
        self.progress = progress
        self.cluster_id: str | None = None
        self.nodes: list[ClusterNode] = []
        for given, what in ((hosts, "hosts"), (command_prefixes, "command prefixes")):
            if given is not None and len(given) != brokers:
                raise ClusterError(f"{len(given)} {what} given for {brokers} brokers")
        for node_id in range(1, brokers + 1):
            port = base_port + 2 * (node_id - 1)
            voter = node_id <= voters
            self.nodes.append(ClusterNode(
                node_id, ("broker", "controller") if voter else ("broker",), port,
                port + 1 if voter else None, self.data_dir / f"node-{node_id}",
                http_port=base_port + 2 * brokers + node_id - 1,
                host=hosts[node_id - 1] if hosts else HOST,
                command_prefix=tuple(command_prefixes[node_id - 1]) if command_prefixes
                else ()))

    # ---------------------------------------------------------------------------- describing

    def __repr__(self) -> str:
        return (f"LocalCluster({str(self.data_dir)!r}, brokers={len(self.nodes)}, "
                f"base_port={self.base_port})")

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.broker_address for node in self.nodes)

    @property
    def voters(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.is_voter]

    @property
    def quorum_voters(self) -> str:
        """The controller.quorum.voters value every node gets."""
        return ",".join(f"{node.node_id}@{node.controller_address}" for node in self.voters)

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise ClusterError(f"there is no node {node_id}: the cluster has nodes "
                           f"1..{len(self.nodes)}")

    def alive_nodes(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.alive]

    def settings_for(self, node: ClusterNode) -> dict[str, str]:
        """The broker settings of `node`, the user's overrides last."""
        listeners = f"{BROKER_LISTENER}://{node.broker_address}"
        if node.controller_address is not None:
            listeners += f",{CONTROLLER_LISTENER}://{node.controller_address}"
        settings = {
            "node.id": str(node.node_id),
            "process.roles": ",".join(node.roles),
            "listeners": listeners,
            "controller.quorum.voters": self.quorum_voters,
            "controller.listener.names": CONTROLLER_LISTENER,
            "inter.broker.listener.name": BROKER_LISTENER,
            "log.dirs": str(node.data_dir),
            "http.listener": ("" if node.http_port is None
                              else f"http://{node.host}:{node.http_port}"),
            "offsets.topic.replication.factor": str(min(MAX_DEFAULT_VOTERS, len(self.nodes))),
        }
        settings.update(self.overrides)
        return settings

    def command_for(self, node: ClusterNode) -> list[str]:
        command = [*node.command_prefix, *self.launcher, "broker", "--log-level",
                   self.log_level]
        for key, value in self.settings_for(node).items():
            command += ["--override", f"{key}={value}"]
        return command

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    # ---------------------------------------------------------------------------- state file

    def to_json(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "data_dir": str(self.data_dir),
                "brokers": len(self.nodes), "voters": len(self.voters),
                "base_port": self.base_port, "cluster_id": self.cluster_id,
                "bootstrap_servers": self.bootstrap_servers, "overrides": self.overrides,
                "log_level": self.log_level, "launcher": self.launcher,
                "nodes": [node.to_json() for node in self.nodes]}

    def save(self) -> None:
        """Write cluster.json (atomically)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_path)

    @staticmethod
    def read_state(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
        """The recorded cluster.json of `data_dir`, None when there is none."""
        path = Path(data_dir).resolve() / STATE_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ClusterError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or not isinstance(state.get("nodes"), list):
                raise ValueError("no node list")
        except ValueError as exc:
            raise ClusterError(f"{path} is not a cluster record ({exc}); remove it if no "
                               "cluster runs there") from None
        return state

    @classmethod
    def load(cls, data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *,
             progress: Progress | None = None) -> LocalCluster:
        """The cluster recorded in `data_dir`/cluster.json, with the pids it recorded."""
        state = cls.read_state(data_dir)
        if state is None:
            raise ClusterError(f"no cluster recorded in {Path(data_dir).resolve()} "
                               f"({STATE_FILE} not found)")
        try:
            nodes = [ClusterNode.from_json(item) for item in state["nodes"]]
            cluster = cls(data_dir, len(nodes), int(state["base_port"]),
                          overrides=state.get("overrides") or {},
                          voters=sum(1 for node in nodes if node.is_voter),
                          log_level=state.get("log_level", "INFO"),
                          launcher=state.get("launcher"), progress=progress)
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterError(f"{Path(data_dir).resolve() / STATE_FILE} is not a valid "
                               f"cluster record ({type(exc).__name__}: {exc})") from None
        cluster.nodes = nodes
        cluster.cluster_id = state.get("cluster_id")
        return cluster

    # ---------------------------------------------------------------------------- starting

    def _check_can_start(self) -> None:
        state = self.read_state(self.data_dir)
        if state is not None:
            recorded = LocalCluster.load(self.data_dir)
            running = [node.node_id for node in recorded.alive_nodes()]
            if running:
                raise ClusterError(
                    f"a cluster is already running in {self.data_dir} (node"
                    f"{'s' if len(running) > 1 else ''} {', '.join(map(str, running))} "
                    f"alive); stop it with: moldau cluster down --data-dir {self.data_dir}")
            count = len(recorded.nodes)
            has_data = any((node.data_dir / META_FILE).exists() for node in recorded.nodes)
            if has_data and (count != len(self.nodes)
                             or len(recorded.voters) != len(self.voters)):
                raise ClusterError(
                    f"{self.data_dir} holds the data of a {count}-node cluster; start it "
                    f"again with --brokers {count}, or use another --data-dir")
            self.cluster_id = self.cluster_id or recorded.cluster_id
        for node in self.nodes:
            for port, what in node.ports if node.shares_loopback else ():
                if not port_is_free(port):
                    raise ClusterError(
                        f"port {port} ({what} of node {node.node_id}) is already in use on "
                        f"{HOST}; choose another --base-port or stop what uses it")

    def _format_storage(self) -> None:
        """Give every node's data directory the same cluster id before its first start (as
        Kafka's storage format does), so that the nodes agree on the cluster they form."""
        from moldau.broker.log.checkpoint import atomic_write
        from moldau.broker.storage import new_cluster_id

        existing = set()
        for node in self.nodes:
            meta = node.data_dir / META_FILE
            if meta.exists():
                for line in meta.read_text(encoding="utf-8").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "cluster.id":
                        existing.add(value.strip())
        if len(existing) > 1:
            raise ClusterError(f"the nodes in {self.data_dir} belong to different clusters "
                               f"({', '.join(sorted(existing))}); remove the directory to "
                               "start afresh")
        if existing:
            self.cluster_id = existing.pop()
        if self.cluster_id is None:
            self.cluster_id = new_cluster_id()
        for node in self.nodes:
            meta = node.data_dir / META_FILE
            if meta.exists():
                continue
            node.data_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(str(meta), f"version=1\ncluster.id={self.cluster_id}\n"
                                    f"node.id={node.node_id}\ndirectory.id={new_cluster_id()}\n"
                                    .encode())

    def _spawn(self, node: ClusterNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.command = self.command_for(node)
        with open(node.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"----- {stamp} moldau cluster: starting node {node.node_id}: "
                      f"{' '.join(node.command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(node.command, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=node.directory,
                                    start_new_session=True)
        node._proc = proc
        node.pid = proc.pid
        node.exit_code = None
        self._say(f"started node {node.node_id} (pid {proc.pid}, {','.join(node.roles)}): "
                  f"broker {node.broker_address}"
                  + (f", controller {node.controller_address}"
                     if node.controller_address else ""))

    def start(self, timeout: float = START_TIMEOUT) -> LocalCluster:
        """Start every node and return once the cluster is ready (see wait_ready). On a
        failure every node is stopped again and ClusterStartError names the failing node."""
        self._check_can_start()
        self._format_storage()
        self._say(f"starting a {len(self.nodes)}-node cluster in {self.data_dir} (logs: "
                  f"node-<id>/{LOG_FILE}, cluster id {self.cluster_id})")
        try:
            for node in self.nodes:
                self._spawn(node)
                self.save()
            self.wait_ready(timeout)
        except BaseException:
            self._abort()
            raise
        return self

    def _abort(self) -> None:
        """Stop whatever start() left running, quickly, and record that."""
        for node in self.nodes:
            node.signal(signal.SIGTERM)
        deadline = time.monotonic() + ABORT_GRACE
        for node in self.nodes:
            if node.pid is not None and not node.wait_exit(deadline - time.monotonic()):
                node.signal(signal.SIGKILL)
                node.wait_exit(5.0)
            node.pid = None
        with contextlib.suppress(OSError):
            self.save()

    def start_node(self, node_id: int, *, wait: bool = True,
                   timeout: float = START_TIMEOUT) -> ClusterNode:
        """Start one stopped node again with its data; with `wait`, return once it is
        registered (it answers Metadata listing itself and a controller)."""
        node = self.node(node_id)
        if node.alive:
            raise ClusterError(f"node {node_id} is already running (pid {node.pid})")
        for port, what in node.ports if node.shares_loopback else ():
            if not port_is_free(port):
                raise ClusterError(f"port {port} ({what} of node {node_id}) is already in use "
                                   f"on {HOST}")
        self._spawn(node)
        self.save()
        if wait:
            self.wait_ready(timeout, nodes=[node_id], ask=[node_id])
        return node

    def start_stopped_nodes(self, timeout: float = START_TIMEOUT) -> list[int]:
        """Start every node that is not running (of a cluster whose other nodes run) and
        wait until they are registered; return their ids."""
        stopped = [node.node_id for node in self.nodes if not node.alive]
        for node_id in stopped:
            self.start_node(node_id, wait=False)
        # Each node is asked itself: the others may still list a killed node's old session.
        deadline = time.monotonic() + timeout
        for node_id in stopped:
            self.wait_ready(max(deadline - time.monotonic(), 0.0), nodes=[node_id],
                            ask=[node_id])
        return stopped

    def restart(self, node_id: int, *, timeout: float = START_TIMEOUT,
                stop_timeout: float = STOP_TIMEOUT) -> ClusterNode:
        """Stop the node if it runs (SIGTERM, SIGKILL after `stop_timeout`), start it again
        and wait until it is registered."""
        self.stop_node(node_id, timeout=stop_timeout)
        return self.start_node(node_id, timeout=timeout)

    # ---------------------------------------------------------------------------- readiness

    def metadata(self, timeout: float = PROBE_TIMEOUT,
                 ask: Iterable[int] | None = None) -> ClusterView:
        """Metadata from the first node that answers (of `ask`, default: the live nodes)."""
        nodes = self.alive_nodes() if ask is None else [self.node(i) for i in ask]
        if not nodes:
            raise ProbeError("Metadata: no node is running")
        return fetch_metadata([node.broker_address for node in nodes], timeout)

    def quorum(self, timeout: float = PROBE_TIMEOUT) -> QuorumView:
        """DescribeQuorum from the controller listeners of the live voters; the first answer
        naming a leader wins. Raises ProbeError when none gives one."""
        errors = []
        fallback: QuorumView | None = None
        for node in self.voters:
            if node.controller_address is None or not node.alive:
                continue
            try:
                view = describe_quorum([node.controller_address], timeout)
            except ProbeError as exc:
                errors.append(str(exc))
                continue
            if view.leader_id >= 0:
                return view
            fallback = fallback or view
        if fallback is not None:
            return fallback
        raise ProbeError("; ".join(errors) or "DescribeQuorum: no controller is running")

    def active_controller(self, timeout: float = PROBE_TIMEOUT) -> int:
        """The quorum leader by DescribeQuorum, else the controller id of Metadata; -1 when
        neither names one."""
        with contextlib.suppress(ProbeError):
            leader = self.quorum(timeout).leader_id
            if leader >= 0:
                return leader
        with contextlib.suppress(ProbeError):
            return self.metadata(timeout).controller_id
        return -1

    def wait_until(self, condition: Callable[[ClusterView], object], timeout: float,
                   what: str = "the condition", *,
                   ask: Iterable[int] | None = None) -> ClusterView:
        """Poll Metadata (from the live nodes, or `ask`) until `condition(view)` holds; e.g.
        `cluster.wait_until(lambda v: not v.under_replicated, 30, "full ISRs")`. Raises
        TimeoutError naming `what` and the last answer (or error) otherwise."""
        asked = None if ask is None else list(ask)
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            try:
                view = self.metadata(PROBE_TIMEOUT, ask=asked)
                if condition(view):
                    return view
                last = (f"brokers {sorted(view.broker_ids)}, controller {view.controller_id}, "
                        f"{len(view.under_replicated)} under-replicated and "
                        f"{len(view.offline)} offline of {len(view.partitions)} partitions")
            except ProbeError as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not reached within {timeout:g} s; last: {last}")
            time.sleep(POLL_INTERVAL)

    def wait_ready(self, timeout: float = START_TIMEOUT, *, nodes: Iterable[int] | None = None,
                   ask: Iterable[int] | None = None) -> ClusterView:
        """Wait until Metadata, asked of the first live node of `ask` (default: node 1, then
        the others), lists every node of `nodes` (default: all) and a controller id >= 0.
        Raises ClusterStartError when one of `nodes` exits or `timeout` passes."""
        want = sorted(self.node(i).node_id for i in nodes) if nodes is not None else [
            node.node_id for node in self.nodes]
        askable = [self.node(i) for i in ask] if ask is not None else self.nodes
        total = len(want)
        started = time.monotonic()
        deadline = started + timeout
        last_line = ""
        last_said = float("-inf")
        view: ClusterView | None = None
        problem = ""
        while True:
            for node_id in want:
                node = self.node(node_id)
                if not node.alive:
                    self._failed(node)
            candidates = [node for node in askable if node.alive]
            try:
                view = self.metadata(PROBE_TIMEOUT, ask=[n.node_id for n in candidates]) \
                    if candidates else None
                problem = "" if candidates else "no node to ask is running"
            except ProbeError as exc:
                view, problem = None, str(exc)
            registered = sorted(set(want) & view.broker_ids) if view else []
            if view is not None and len(registered) == total and view.controller_id >= 0:
                elapsed = time.monotonic() - started
                self._say(f"ready in {elapsed:.1f} s: {len(view.brokers)} broker"
                          f"{'s' if len(view.brokers) != 1 else ''} registered, controller "
                          f"{view.controller_id}")
                return view
            controller = ("none yet" if view is None or view.controller_id < 0
                          else str(view.controller_id))
            line = (f"waiting for {total} broker{'s' if total != 1 else ''} to register: "
                    f"{len(registered)}/{total} (controller: {controller})")
            now = time.monotonic()
            if line != last_line or now - last_said >= PROGRESS_INTERVAL:
                self._say(line + " ...")
                last_line, last_said = line, now
            if now >= deadline:
                missing = [i for i in want if i not in registered]
                self._timed_out(timeout, registered, missing, controller, problem)
            time.sleep(min(POLL_INTERVAL, max(deadline - now, 0.0)))

    def _failed(self, node: ClusterNode) -> None:
        code = node.exit_code
        status = f"with status {code}" if code is not None and code >= 0 else (
            f"on signal {signal.Signals(-code).name}" if code is not None else "")
        raise ClusterStartError(
            f"node {node.node_id} exited {status} during start-up".replace("  ", " ")
            + f"; last lines of {node.log_path}:\n" + _indent(node.tail()), node.node_id)

    def _timed_out(self, timeout: float, registered: list[int], missing: list[int],
                   controller: str, problem: str) -> None:
        total = len(registered) + len(missing)
        text = (f"the cluster was not ready within {timeout:g} s: {len(registered)}/{total} "
                f"brokers registered (missing: {', '.join(map(str, missing))}), controller: "
                f"{controller}")
        if problem:
            text += f"\n{problem}"
        suspects = [self.node(i) for i in missing] or [self.nodes[0]]
        for node in suspects:
            text += f"\nnode {node.node_id} did not register; last lines of {node.log_path}:\n"
            text += _indent(node.tail())
        raise ClusterStartError(text, missing[0] if len(missing) == 1 else None)

    # ---------------------------------------------------------------------------- stopping

    def kill(self, node_id: int, sig: int = signal.SIGKILL, *, wait: bool | None = None,
             timeout: float = STOP_TIMEOUT) -> bool:
        """Send `sig` to a node. With `wait` (default: for SIGKILL, SIGTERM and SIGINT) wait
        up to `timeout` seconds for it to exit and return whether it did; SIGSTOP/SIGCONT and
        the like return at once. The pid stays recorded until the node is started again."""
        node = self.node(node_id)
        if not node.signal(sig):
            return True
        if wait is None:
            wait = sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
        return node.wait_exit(timeout) if wait else True

    def stop_node(self, node_id: int, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM (a controlled shutdown), then SIGKILL if the node is still running after
        `timeout` seconds. True when it exited by itself."""
        node = self.node(node_id)
        clean = True
        if node.alive:
            started = time.monotonic()
            node.signal(signal.SIGCONT)  # a paused node cannot shut down
            node.signal(signal.SIGTERM)
            if not node.wait_exit(timeout):
                clean = False
                self._say(f"node {node_id} did not exit within {timeout:g} s of SIGTERM; "
                          "killing it (SIGKILL)")
                node.signal(signal.SIGKILL)
                node.wait_exit(10.0)
            else:
                code = f", exit status {node.exit_code}" if node.exit_code is not None else ""
                self._say(f"stopped node {node_id} in {time.monotonic() - started:.1f} s{code}")
        node.pid = None
        with contextlib.suppress(OSError):
            self.save()
        return clean

    def stop(self, timeout: float = STOP_TIMEOUT) -> list[int]:
        """Stop the whole cluster with controlled shutdowns, so leaderships move away:
        broker-only nodes first (together), then the voters one at a time, the active
        controller last. Each node gets `timeout` seconds after SIGTERM before SIGKILL.
        Returns the ids of the nodes that had to be killed. Stopping a stopped cluster does
        nothing."""
        killed = self._stop_together(
            [node for node in self.nodes if not node.is_voter and node.alive], timeout)
        for node in self._voters_in_stop_order():
            if not self.stop_node(node.node_id, timeout):
                killed.append(node.node_id)
        for node in self.nodes:  # forget the pids of nodes that had already exited
            if node.pid is not None and not node.alive:
                node.pid = None
        if self.state_path.exists():
            with contextlib.suppress(OSError):
                self.save()
        return killed

    def _stop_together(self, nodes: list[ClusterNode], timeout: float) -> list[int]:
        """SIGTERM all of `nodes` at once, wait up to `timeout` seconds, SIGKILL the rest;
        returns the ids of the nodes killed."""
        if len(nodes) == 1:
            return [] if self.stop_node(nodes[0].node_id, timeout) else [nodes[0].node_id]
        killed: list[int] = []
        if not nodes:
            return killed
        self._say(f"stopping nodes {', '.join(str(node.node_id) for node in nodes)} together")
        started = time.monotonic()
        for node in nodes:
            node.signal(signal.SIGCONT)  # a paused node cannot shut down
            node.signal(signal.SIGTERM)
        for node in nodes:
            remaining = max(timeout - (time.monotonic() - started), 0.0)
            if node.wait_exit(remaining):
                code = f", exit status {node.exit_code}" if node.exit_code is not None else ""
                self._say(f"stopped node {node.node_id} in {time.monotonic() - started:.1f} s"
                          + code)
            else:
                killed.append(node.node_id)
                self._say(f"node {node.node_id} did not exit within {timeout:g} s of "
                          "SIGTERM; killing it (SIGKILL)")
                node.signal(signal.SIGKILL)
                node.wait_exit(10.0)
            node.pid = None
            with contextlib.suppress(OSError):
                self.save()
        return killed

    def _voters_in_stop_order(self) -> list[ClusterNode]:
        alive = [node for node in self.voters if node.alive]
        if len(alive) <= 1:
            return alive
        leader = -1
        try:
            leader = self.quorum(1.0).leader_id
        except ProbeError:
            with contextlib.suppress(ProbeError):
                leader = self.metadata(1.0).controller_id
        alive.sort(key=lambda node: (node.node_id == leader, -node.node_id))
        return alive

    def detach(self) -> None:
        """Let the processes run on after this object is gone (the `cluster up` command)."""
        for node in self.nodes:
            node._proc = None

    def __enter__(self) -> LocalCluster:
        if not any(node.alive for node in self.nodes):
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) or f"{prefix}(empty log)"
