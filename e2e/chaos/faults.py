"""Faults for a cluster whose nodes run in network namespaces (net.py), each one reversible
and logged with timestamps.

Network faults are nft rules in a table of our own (`moldau_chaos`) inside the nodes'
namespaces, so nothing else on the machine sees them; each fault has its own base chain, so
faults can overlap and be healed one at a time. A partition drops packets where they arrive:
`one_way(a, b)` drops at b what comes from a, `partition([{1}, {2, 3}])` drops in both
directions between the groups. The root namespace (the test's clients) is never cut off.

Process faults: `pause` (SIGSTOP until healed with SIGCONT), `crash` (kill -9; healing starts
the node again with its data). `netem` adds loss and delay with tc, where the kernel has
sch_netem.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from e2e.chaos.net import TestNetwork, run
from moldau.cluster.launcher import LocalCluster
from moldau.cluster.probe import ProbeError, describe_quorum

TABLE = "moldau_chaos"


class FaultUnavailable(Exception):
    """This machine cannot inject the fault (e.g. no sch_netem in the kernel)."""


@dataclass
class Event:
    wall: float  # time.time()
    action: str  # "start" or "heal"
    fault: str

    def __str__(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.wall))
        return f"{stamp}.{int(self.wall * 1000) % 1000:03d} {self.action:5} {self.fault}"


@dataclass
class Fault:
    """An injected fault and how to undo it."""

    name: str
    undo: Callable[[], None]
    healed: bool = False


@dataclass
class Faults:
    """Injects faults into `cluster` (whose nodes live in `network`) and logs them."""

    cluster: LocalCluster
    network: TestNetwork
    echo: Callable[[str], None] | None = print
    events: list[Event] = field(default_factory=list)
    active: list[Fault] = field(default_factory=list)
    _ids: Iterable[int] = field(default_factory=itertools.count)

    # ------------------------------------------------------------------ bookkeeping

    def _log(self, action: str, name: str) -> None:
        event = Event(time.time(), action, name)
        self.events.append(event)
        if self.echo is not None:
            self.echo(f"fault {event}")

    def _started(self, name: str, undo: Callable[[], None]) -> Fault:
        fault = Fault(name, undo)
        self.active.append(fault)
        self._log("start", name)
        return fault

    def heal(self, fault: Fault) -> None:
        if fault.healed:
            return
        fault.undo()
        fault.healed = True
        self.active.remove(fault)
        self._log("heal", fault.name)

    def heal_all(self) -> None:
        """Undo every active fault: network ones first, so restarted nodes find their peers."""
        for fault in sorted(self.active, key=lambda f: f.name.startswith(("pause", "crash"))):
            self.heal(fault)

    # ------------------------------------------------------------------ network

    def _nft(self, node_id: int, script: str) -> None:
        done = subprocess.run([*self.network.node(node_id).exec_prefix, "nft", "-f", "-"],
                              input=script, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"nft in node {node_id}'s namespace: {done.stderr.strip()}")

    def _drop(self, links: list[tuple[int, int]], name: str) -> Fault:
        """Drop packets from a to b for each (a, b), in b's namespace, in a chain of their own."""
        chain = f"f{next(self._ids)}"  # type: ignore[call-overload]
        sources: dict[int, list[str]] = {}
        for src, dst in links:
            sources.setdefault(dst, []).append(self.network.node(src).address)
        for dst, addresses in sources.items():
            self._nft(dst, f"add table inet {TABLE}\n"
                           f"add chain inet {TABLE} {chain} "
                           "{ type filter hook input priority 0; policy accept; }\n"
                           f"add rule inet {TABLE} {chain} ip saddr "
                           f"{{ {', '.join(addresses)} }} drop\n")

        def undo() -> None:
            for dst in sources:
                self._nft(dst, f"flush chain inet {TABLE} {chain}\n"
                               f"delete chain inet {TABLE} {chain}\n")
        return self._started(name, undo)

    def one_way(self, src: int, dst: int) -> Fault:
        """Packets from node src no longer reach node dst; dst's packets still reach src (so
        TCP connections between them stall in both directions, as in Jepsen's one-way
        partitions, but datagrams from dst and half-open connections' data get through)."""
        return self._drop([(src, dst)], f"one-way {src}->{dst}")

    def partition(self, groups: list[set[int]], why: str = "") -> Fault:
        """No packets between nodes of different groups, in either direction."""
        links = [(a, b) for first, second in itertools.permutations(groups, 2)
                 for a in first for b in second]
        text = " | ".join(",".join(map(str, sorted(group))) for group in groups)
        return self._drop(links, f"partition {text}{why}")

    def isolate(self, node_id: int, why: str = "") -> Fault:
        rest = {node.node_id for node in self.cluster.nodes} - {node_id}
        return self.partition([{node_id}, rest], why)

    def isolate_leader(self, topic: str, partition: int = 0) -> Fault:
        leader = partition_leader(self.cluster, topic, partition)
        return self.isolate(leader, f" (leader of {topic}-{partition})")

    def isolate_controller(self) -> Fault:
        return self.isolate(self.cluster.active_controller(), " (active controller)")

    def netem(self, node_id: int, loss_percent: float = 0, delay_ms: int = 0) -> Fault:
        """Loss and delay on everything node_id sends (tc netem on its veth end)."""
        node = self.network.node(node_id)
        done = run(*node.exec_prefix, "tc", "qdisc", "add", "dev", node.device, "root",
                   "netem", "loss", f"{loss_percent}%", "delay", f"{delay_ms}ms", check=False)
        if done.returncode != 0:
            raise FaultUnavailable(f"tc netem is not available here: {done.stderr.strip()} "
                                   "(the kernel has no sch_netem)")
        return self._started(
            f"netem node {node_id} loss {loss_percent}% delay {delay_ms} ms",
            lambda: run(*node.exec_prefix, "tc", "qdisc", "del", "dev", node.device, "root"))

    # ------------------------------------------------------------------ processes

    def pause(self, node_id: int, why: str = "") -> Fault:
        """SIGSTOP the node; healing sends SIGCONT."""
        self.cluster.kill(node_id, signal.SIGSTOP)
        return self._started(f"pause node {node_id}{why}",
                             lambda: self.cluster.kill(node_id, signal.SIGCONT))

    def crash(self, node_id: int, why: str = "") -> Fault:
        """kill -9; healing starts the node again with its data (not waiting for it)."""
        self.cluster.kill(node_id)
        return self._started(f"crash node {node_id}{why}",
                             lambda: self.cluster.start_node(node_id, wait=False))


def partition_leader(cluster: LocalCluster, topic: str, partition: int = 0) -> int:
    """The partition's leader by Metadata (-1: none now, or no live node answered)."""
    try:
        view = cluster.metadata()
    except ProbeError:
        return -1
    for entry in view.partitions:
        if entry.topic == topic and entry.partition == partition:
            return entry.leader
    return -1


def quorum_leader_seen_by(cluster: LocalCluster, node_ids: Iterable[int]) -> int:
    """The metadata quorum's leader as the controller listeners of `node_ids` report it
    (-1: none of them names one), so a cut-off node's stale view is not asked."""
    for node_id in node_ids:
        address = cluster.node(node_id).controller_address
        if address is None:
            continue
        try:
            leader = describe_quorum([address], 2.0).leader_id
        except ProbeError:
            continue
        if leader >= 0:
            return leader
    return -1
