"""Three-node clusters for the RF 3 rows, behind one small interface.

Moldau runs through `moldau.cluster.LocalCluster`; Apache Kafka as three combined
broker+controller nodes in KRaft mode through e2e/kafka_dist.py, formatted with one shared
cluster id and a static three-voter `controller.quorum.voters`. Both get the settings of the
single-node comparison (loopback, Kafka's default flush policy, one partition for
auto-created topics, no group rebalance delay), Kafka's default broker session timeouts
written out explicitly, and replication factor 3 for the internal topics.

Nothing here is measured on stopping: a cluster is killed at the end of its workloads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import subprocess
import threading
import time
from pathlib import Path

from bench import brokers
from e2e import kafka_dist
from moldau.cluster.launcher import LocalCluster, free_base_port
from moldau.cluster.probe import ClusterView, ProbeError, describe_quorum, fetch_metadata

SIZE = 3
NODE_IDS = tuple(range(1, SIZE + 1))
START_TIMEOUT = 120.0
PROBE_TIMEOUT = 2.0
# Kafka's defaults, the same names and defaults in Moldau: stated so that both clusters
# notice a dead broker after the same time.
SESSION = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
CLUSTER_SETTINGS: dict[str, str] = {
    **brokers.COMMON_SETTINGS,
    **SESSION,
    "offsets.topic.replication.factor": str(SIZE),
}
# kafka_dist lowers these for its single node; a three-node Kafka gets its defaults back.
KAFKA_ONLY: dict[str, str] = {
    "transaction.state.log.replication.factor": str(SIZE),
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": str(SIZE),
    "share.coordinator.state.topic.min.isr": "2",
}

_LIVE: list[BenchCluster] = []
_LOCK = threading.Lock()


def kill_all() -> None:
    """SIGKILL every node of every cluster still running (Ctrl-C, a bug, the end of a run)."""
    with _LOCK:
        live = list(_LIVE)
    for cluster in live:
        cluster.kill_all()


class BenchCluster:
    """What the RF 3 workloads need from a cluster of nodes 1..3."""

    name = ""

    def address(self, node_id: int) -> str:
        raise NotImplementedError

    def controller_address(self, node_id: int) -> str:
        raise NotImplementedError

    def alive(self, node_id: int) -> bool:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    def kill9(self, node_id: int) -> None:
        """SIGKILL, returning once the process is gone."""
        raise NotImplementedError

    def terminate(self, node_id: int) -> None:
        """SIGTERM (a controlled shutdown), returning at once."""
        raise NotImplementedError

    def wait_exit(self, node_id: int, timeout: float) -> bool:
        raise NotImplementedError

    def _start_node(self, node_id: int) -> None:
        raise NotImplementedError

    def _kill_nodes(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        """The last lines of each node's output, for a failure message."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in NODE_IDS)

    def live_nodes(self) -> list[int]:
        return [i for i in NODE_IDS if self.alive(i)]

    def start(self) -> float:
        """Start every node; seconds until Metadata lists all of them."""
        with _LOCK:
            _LIVE.append(self)
        started = time.monotonic()
        self._start()
        self.wait_registered(NODE_IDS, START_TIMEOUT)
        return time.monotonic() - started

    def restart(self, node_id: int) -> float:
        """Start a stopped node again; seconds until Metadata lists it."""
        started = time.monotonic()
        self._start_node(node_id)
        self.wait_registered(NODE_IDS, START_TIMEOUT)
        return time.monotonic() - started

    def kill_all(self) -> None:
        self._kill_nodes()
        with _LOCK:
            if self in _LIVE:
                _LIVE.remove(self)

    def metadata(self, ask: list[int] | None = None) -> ClusterView:
        """Metadata from the first of `ask` (default: the live nodes) that answers."""
        nodes = self.live_nodes() if ask is None else ask
        return fetch_metadata([self.address(i) for i in nodes], PROBE_TIMEOUT)

    def active_controller(self) -> int:
        """The leader of the metadata quorum, by DescribeQuorum on the controller listeners
        (a KRaft broker's Metadata names a random broker as controller, not the active one)."""
        errors = []
        for node_id in self.live_nodes():
            try:
                leader = describe_quorum([self.controller_address(node_id)],
                                         PROBE_TIMEOUT).leader_id
            except ProbeError as exc:
                errors.append(str(exc))
                continue
            if leader >= 0:
                return leader
        raise RuntimeError(f"{self.name}: no controller names a quorum leader "
                           f"({'; '.join(errors) or 'no leader yet'})")

    def wait_registered(self, node_ids: tuple[int, ...], timeout: float) -> None:
        """Until every live node's Metadata lists all of `node_ids` (KRaft lists registered,
        unfenced brokers only)."""
        deadline = time.monotonic() + timeout
        while True:
            live = self.live_nodes()
            problem = self._unregistered(live, node_ids) if live else "no node running"
            if problem is None:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} cluster: brokers {list(node_ids)} not all "
                                   f"registered after {timeout:g} s ({problem})\n"
                                   f"{self.describe()}")
            time.sleep(0.1)

    def _unregistered(self, ask: list[int], node_ids: tuple[int, ...]) -> str | None:
        """Why one of `ask` does not list all of `node_ids` yet, None when all do."""
        for node_id in ask:
            try:
                view = self.metadata([node_id])
            except ProbeError as exc:
                return str(exc)
            if not set(node_ids) <= view.broker_ids:
                return f"node {node_id} lists brokers {sorted(view.broker_ids)}"
        return None


class MoldauCluster(BenchCluster):
    name = "Moldau"

    def __init__(self, workdir: Path) -> None:
        self.local = LocalCluster(workdir, brokers=SIZE, base_port=free_base_port(SIZE),
                                  overrides=CLUSTER_SETTINGS)

    def address(self, node_id: int) -> str:
        return self.local.node(node_id).broker_address

    def controller_address(self, node_id: int) -> str:
        address = self.local.node(node_id).controller_address
        assert address is not None
        return address

    def alive(self, node_id: int) -> bool:
        return self.local.node(node_id).alive

    def _start(self) -> None:
        self.local.start(timeout=START_TIMEOUT)

    def kill9(self, node_id: int) -> None:
        self.local.kill(node_id, signal.SIGKILL, timeout=30)

    def terminate(self, node_id: int) -> None:
        self.local.node(node_id).signal(signal.SIGTERM)

    def wait_exit(self, node_id: int, timeout: float) -> bool:
        return self.local.node(node_id).wait_exit(timeout)

    def _start_node(self, node_id: int) -> None:
        self.local.start_node(node_id, timeout=START_TIMEOUT)

    def _kill_nodes(self) -> None:
        for node in self.local.nodes:
            if node.signal(signal.SIGKILL):
                node.wait_exit(15)

    def describe(self) -> str:
        return "\n".join(f"--- node {node.node_id} ({node.log_path}):\n{node.tail(15)}"
                         for node in self.local.nodes)


class KafkaCluster(BenchCluster):
    """Three kafka_dist.KafkaBroker nodes, each broker and controller, node ids 1..3."""

    name = "Kafka"

    def __init__(self, workdir: Path) -> None:
        overrides = {**CLUSTER_SETTINGS, **KAFKA_ONLY}
        self.nodes = {i: kafka_dist.KafkaBroker(workdir / f"node-{i}", overrides=overrides)
                      for i in NODE_IDS}
        voters = ",".join(f"{i}@127.0.0.1:{node.controller_port}"
                          for i, node in self.nodes.items())
        cluster_id = kafka_dist.random_cluster_id()
        for node_id, node in self.nodes.items():
            node.settings.update({"node.id": str(node_id), "controller.quorum.voters": voters})
            node.cluster_id = cluster_id
        self.starts = dict.fromkeys(NODE_IDS, 0)

    def address(self, node_id: int) -> str:
        return self.nodes[node_id].bootstrap

    def controller_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].controller_port}"

    def alive(self, node_id: int) -> bool:
        return self.nodes[node_id].alive

    def _start(self) -> None:
        # The storage format (one-off, as for the single node) and the start both in
        # parallel: a combined node's start-up waits for a quorum of the others.
        with concurrent.futures.ThreadPoolExecutor(SIZE) as pool:
            list(pool.map(lambda node: node.format(), self.nodes.values()))
            list(pool.map(self._start_node, NODE_IDS))

    def _start_node(self, node_id: int) -> None:
        node = self.nodes[node_id]
        # kafka_dist waits for the start-up line in stdout.log: a restart must not see the
        # previous run's line.
        if node.stdout_path.exists():
            node.stdout_path.rename(node.workdir / f"stdout.{self.starts[node_id]}.log")
        self.starts[node_id] += 1
        try:
            node.start(timeout=START_TIMEOUT)
        except AssertionError as exc:
            raise RuntimeError(f"Kafka node {node_id} did not start: "
                               f"{' '.join(str(exc).split())[-600:]}") from None

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def terminate(self, node_id: int) -> None:
        proc = self.nodes[node_id].proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    def wait_exit(self, node_id: int, timeout: float) -> bool:
        node = self.nodes[node_id]
        if node.proc is not None:
            try:
                node.proc.wait(timeout)
            except subprocess.TimeoutExpired:  # still running: the caller decides
                return False
        node.kill()  # only forgets it: the process is gone
        return True

    def _kill_nodes(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.kill()

    def describe(self) -> str:
        return "\n".join(f"--- node {i}:\n{node.tail(15)}" for i, node in self.nodes.items())


def make(kind: str, workdir: Path) -> BenchCluster:
    return MoldauCluster(workdir) if kind == "moldau" else KafkaCluster(workdir)
