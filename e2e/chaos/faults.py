"""Faults for a cluster whose nodes run in network namespaces (net.py), each one reversible
and logged with timestamps.

Network faults are nft rules in a table of our own (`moldau_chaos`) inside the nodes'
namespaces, so nothing else on the machine sees them; each fault has its own base chain, so
faults can overlap and be healed one at a time. A partition drops packets where they arrive:
`one_way(a, b)` drops at b what comes from a, `partition([{1}, {2, 3}])` drops in both
directions between the groups; `all_apart`, `bridge` and `ring` are Jepsen's other shapes, and
`loss` drops a share of the packets (nft's `numgen random`, so no sch_netem is needed). The
root namespace (the test's clients) is never cut off.

Process faults: `pause` (SIGSTOP until healed with SIGCONT), `crash` (kill -9; healing starts
the node again with its data), `crash_losing_unsynced` (a power cut: the node's disk keeps
only what had reached it, disks.py), `clock_jump` (the node's wall clock steps, clocks.py).
`netem` adds delay with tc, where the kernel has sch_netem.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from e2e.chaos.clocks import NodeClocks
from e2e.chaos.disks import NodeDisk
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
    chain: str = ""  # a network fault's nft chain
    nodes: tuple[int, ...] = ()  # the namespaces that hold it


@dataclass
class Faults:
    """Injects faults into `cluster` (whose nodes live in `network`) and logs them."""

    cluster: LocalCluster
    network: TestNetwork
    echo: Callable[[str], None] | None = print
    disks: dict[int, NodeDisk] = field(default_factory=dict)  # for crash_losing_unsynced
    clocks: NodeClocks | None = None  # for clock_jump
    events: list[Event] = field(default_factory=list)
    lost_bytes: dict[int, int] = field(default_factory=dict)  # by power cuts, per node
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

    def _drop(self, links: list[tuple[int, int]], name: str, percent: int = 100) -> Fault:
        """Drop packets from a to b for each (a, b), in b's namespace, in a chain of their
        own: all of them, or each with probability `percent`/100. The chain counts the
        packets from those sources, and the rule those it dropped (`dropped`)."""
        chain = f"f{next(self._ids)}"  # type: ignore[call-overload]
        sources: dict[int, list[str]] = {}
        for src, dst in links:
            sources.setdefault(dst, []).append(self.network.node(src).address)
        chance = "" if percent >= 100 else f"numgen random mod 100 < {percent} "
        for dst, addresses in sources.items():
            match = f"ip saddr {{ {', '.join(addresses)} }}"
            self._nft(dst, f"add table inet {TABLE}\n"
                           f"add chain inet {TABLE} {chain} "
                           "{ type filter hook input priority 0; policy accept; }\n"
                           f"add rule inet {TABLE} {chain} {match} counter\n"
                           f"add rule inet {TABLE} {chain} {match} {chance}counter drop\n")

        def undo() -> None:
            for dst in sources:
                self._nft(dst, f"flush chain inet {TABLE} {chain}\n"
                               f"delete chain inet {TABLE} {chain}\n")
        fault = self._started(name, undo)
        fault.chain, fault.nodes = chain, tuple(sources)
        return fault

    def counters(self, fault: Fault) -> tuple[int, int]:
        """(packets seen, packets dropped) by a network fault's chain, over its nodes."""
        seen = dropped = 0
        for node_id in fault.nodes:
            done = run(*self.network.node(node_id).exec_prefix, "nft", "-j", "list", "chain",
                       "inet", TABLE, fault.chain)
            rules = [item["rule"] for item in json.loads(done.stdout)["nftables"]
                     if "rule" in item]
            packets = [next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
                       for rule in rules]
            seen, dropped = seen + packets[0], dropped + packets[1]
        return seen, dropped

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

    def all_apart(self) -> Fault:
        """1/1/1: every node alone."""
        return self.partition([{node.node_id} for node in self.cluster.nodes])

    def bridge(self, middle: int) -> Fault:
        """Two halves that share `middle`: it sees every node, the others only their own
        half (with three nodes: the two ends cannot reach each other)."""
        rest = [node.node_id for node in self.cluster.nodes if node.node_id != middle]
        half = len(rest) // 2
        left, right = set(rest[:half]), set(rest[half:])
        links = [(a, b) for first, second in ((left, right), (right, left))
                 for a in first for b in second]
        return self._drop(links, f"bridge {','.join(map(str, sorted(left)))} | {middle} | "
                                 f"{','.join(map(str, sorted(right)))}")

    def ring(self, start: int = 0) -> Fault:
        """Each node hears only its neighbour before it in a ring of the nodes (rotated by
        `start`). Where each node has two neighbours of its own (five nodes or more), it
        sees both and no others, as in Jepsen's majorities ring; with three, seeing both
        neighbours would be no partition at all, so the ring is one-way: 1 hears 3, 2 hears
        1, 3 hears 2, and every link carries packets in one direction only."""
        ids = [node.node_id for node in self.cluster.nodes]
        ids = ids[start % len(ids):] + ids[:start % len(ids)]
        count = len(ids)
        if count >= 5:
            sees = {ids[i]: {ids[(i - 1) % count], ids[(i + 1) % count]} for i in range(count)}
        else:
            sees = {ids[i]: {ids[(i - 1) % count]} for i in range(count)}
        links = [(src, dst) for dst in ids for src in ids
                 if src != dst and src not in sees[dst]]
        order = " ".join(f"{ids[(i - 1) % count]}->{ids[i]}" for i in range(count))
        return self._drop(links, f"ring {order}")

    def loss(self, percent: int, src: int, dst: int, both_ways: bool = False) -> Fault:
        """Drop each packet from src to dst (and from dst to src with `both_ways`) with
        probability percent/100."""
        links = [(src, dst), (dst, src)] if both_ways else [(src, dst)]
        arrow = "<->" if both_ways else "->"
        return self._drop(links, f"loss {percent}% {src}{arrow}{dst}", percent)

    def isolate(self, node_id: int, why: str = "") -> Fault:
        rest = {node.node_id for node in self.cluster.nodes} - {node_id}
        return self.partition([{node_id}, rest], why)

    def isolate_leader(self, topic: str, partition: int = 0) -> Fault:
        leader = partition_leader(self.cluster, topic, partition)
        return self.isolate(leader, f" (leader of {topic}-{partition})")

    def isolate_controller(self) -> Fault:
        return self.isolate(self.cluster.active_controller(), " (active controller)")

    def netem(self, node_id: int, loss_percent: float = 0, delay_ms: int = 0) -> Fault:
        """Loss and delay on everything node_id sends (tc netem on its veth end). Delay
        needs the kernel's sch_netem; loss without it is `loss`."""
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
        """kill -9; healing starts the node again with its data (not waiting for it), unless
        an overlapping fault's healing already did."""
        self.cluster.kill(node_id)
        return self._started(f"crash node {node_id}{why}", lambda: self._start(node_id))

    def crash_losing_unsynced(self, node_id: int, why: str = "") -> Fault:
        """A power cut of the node: it freezes (SIGSTOP), its disk stops where it stands
        (disks.py), it is killed, and the disk is mounted again with only what had reached
        it. Healing starts the node again on that data. The fault's name says how many bytes
        of the node's files the cut took."""
        disk = self.disks[node_id]
        before = disk.used_bytes()
        self.cluster.kill(node_id, signal.SIGSTOP)
        disk.power_cut()
        self.cluster.kill(node_id)
        disk.remount()
        lost = before - disk.used_bytes()
        self.lost_bytes[node_id] = self.lost_bytes.get(node_id, 0) + lost
        return self._started(f"crash node {node_id} losing unsynced writes ({lost} of "
                             f"{before} bytes){why}", lambda: self._start(node_id))

    def clock_jump(self, node_id: int, seconds: float, why: str = "") -> Fault:
        """Step the node's wall clock by `seconds` (back when negative); healing steps it back
        to the real time. Its monotonic clock does not move (clocks.py)."""
        assert self.clocks is not None, "clock jumps need the nodes started with NodeClocks"
        before = self.clocks.offsets.get(node_id, 0.0)
        self.clocks.set(node_id, before + seconds)
        return self._started(f"clock of node {node_id} {seconds:+g} s{why}",
                             lambda: self.clocks.set(node_id, before))  # type: ignore[union-attr]

    def _start(self, node_id: int) -> None:
        if not self.cluster.node(node_id).alive:
            self.cluster.start_node(node_id, wait=False)


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
