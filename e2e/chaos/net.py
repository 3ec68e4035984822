"""Test hosts with real networks: one Linux network namespace per cluster node.

Each node gets a namespace with a veth pair whose other end is enslaved to a bridge in the
root namespace. The bridge holds the first address of a /24 taken from 10.213.0.0/16 (a
range that exists only on this machine); node i gets `.10+i`. The test process stays in the
root namespace and reaches every node through the bridge, so faults cut links between nodes
without cutting the client off (unless a fault says so).

Every name starts with `mch<pid>` (the pid of the run that made it), so runs that overlap
use different names, and `remove_stale()` recognises what a crashed run left behind: it kills
the processes still in such a namespace and deletes namespaces and links whose run is gone.
Nothing outside these names is touched; firewall rules live in a table inside each node's
namespace and vanish with it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

PREFIX = "mch"
SUPERNET = ipaddress.ip_network("10.213.0.0/16")
FIRST_NODE_HOST = 11  # node i gets .10+i
NETNS_DIR = "/run/netns"  # where `ip netns add` names its namespaces
_NAME = re.compile(rf"^{PREFIX}(\d+)(?:n\d+|br|h\d+)$")


class NetworkError(Exception):
    """A namespace, link or address could not be set up; the message has the failing
    command and its error."""


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one iproute2/nft/tc command; raise NetworkError with its stderr on failure."""
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done


def namespaces_supported() -> str | None:
    """None when this process may create network namespaces; otherwise why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    probe = f"{PREFIX}{os.getpid()}n0"
    done = run("ip", "netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"ip netns add failed: {done.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


def _run_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete_namespace(name: str) -> None:
    """Kill every process still inside namespace `name`, then delete it."""
    for pid in run("ip", "netns", "pids", name, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    run("ip", "netns", "del", name, check=False)


def remove_stale() -> list[str]:
    """Remove namespaces and links of runs whose process is gone; return their names."""
    removed = []
    for line in run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAME.match(name)
        if match and not _run_alive(int(match.group(1))):
            delete_namespace(name)
            removed.append(name)
    for line in run("ip", "-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        match = _NAME.match(name)
        if match and not _run_alive(int(match.group(1))):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that no address in the root namespace is on yet."""
    used = set()
    for line in run("ip", "-o", "-4", "addr", "show").stdout.splitlines():
        for word in line.split():
            if "/" in word and word[0].isdigit():
                used.add(ipaddress.ip_interface(word).network)
    subnets = list(SUPERNET.subnets(new_prefix=24))
    start = os.getpid() % len(subnets)
    for index in range(len(subnets)):
        subnet = subnets[(start + index) % len(subnets)]
        if subnet not in used and subnet.network_address.packed[2] != 0:
            return subnet
    raise NetworkError(f"every /24 of {SUPERNET} is in use")


@dataclass
class NodeNet:
    """One node's namespace and address."""

    node_id: int
    namespace: str
    address: str
    device: str  # the veth end inside the namespace

    @property
    def exec_prefix(self) -> list[str]:
        """Words that run a command inside the namespace. nsenter enters only the network
        namespace (`ip netns exec` would also give the command a copy of every mount, which
        would keep another node's dropped disk mounted: see disks.py)."""
        return ["nsenter", f"--net={NETNS_DIR}/{self.namespace}"]


@dataclass
class TestNetwork:
    """Namespaces for `nodes` nodes on a bridge; `create()` builds them, `remove()` tears
    them down (also after a partial create)."""

    nodes: int
    run_id: str = field(default_factory=lambda: str(os.getpid()))
    subnet: ipaddress.IPv4Network | None = None
    members: list[NodeNet] = field(default_factory=list)
    _links: list[str] = field(default_factory=list)

    __test__ = False  # not a pytest test class

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.run_id}br"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge: where test clients connect from."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def node(self, node_id: int) -> NodeNet:
        return self.members[node_id - 1]

    @property
    def hosts(self) -> list[str]:
        return [member.address for member in self.members]

    @property
    def command_prefixes(self) -> list[list[str]]:
        return [member.exec_prefix for member in self.members]

    def create(self) -> TestNetwork:
        remove_stale()
        self.subnet = _free_subnet()
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for node_id in range(1, self.nodes + 1):
                self._add_node(node_id)
        except BaseException:
            self.remove()
            raise
        return self

    def _add_node(self, node_id: int) -> None:
        assert self.subnet is not None
        namespace = f"{PREFIX}{self.run_id}n{node_id}"
        outside, inside = f"{PREFIX}{self.run_id}h{node_id}", "eth0"
        address = str(self.subnet.network_address + FIRST_NODE_HOST - 1 + node_id)
        run("ip", "netns", "add", namespace)
        member = NodeNet(node_id, namespace, address, inside)
        self.members.append(member)  # so remove() finds it if the rest fails
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside,
            "netns", namespace)
        self._links.append(outside)
        run("ip", "link", "set", outside, "master", self.bridge)
        run("ip", "link", "set", outside, "up")
        inner = member.exec_prefix
        run(*inner, "ip", "link", "set", "lo", "up")
        run(*inner, "ip", "addr", "add", f"{address}/24", "dev", inside)
        run(*inner, "ip", "link", "set", inside, "up")

    def remove(self) -> None:
        """Kill whatever still runs in the namespaces, delete them and the links."""
        for member in self.members:
            delete_namespace(member.namespace)
        for link in reversed(self._links):
            run("ip", "link", "del", link, check=False)
        self.members.clear()
        self._links.clear()

    def __enter__(self) -> TestNetwork:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def exists(names: Sequence[str]) -> list[str]:
    """Which of `names` exist as namespaces or links in the root namespace."""
    present = set(run("ip", "netns", "list").stdout.split())
    for line in run("ip", "-o", "link", "show").stdout.splitlines():
        if ":" in line:
            present.add(line.split(":")[1].strip().split("@")[0])
    return [name for name in names if name in present]


def can_connect(member: NodeNet, address: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a TCP connection from inside `member`'s namespace to address:port opens."""
    script = ("import socket, sys\n"
              "try:\n"
              f"    socket.create_connection(({address!r}, {port}), {timeout}).close()\n"
              "except OSError:\n"
              "    sys.exit(1)\n")
    done = subprocess.run([*member.exec_prefix, sys.executable, "-c", script],
                          capture_output=True, timeout=timeout + 30)
    return done.returncode == 0


def datagrams_delivered(src: NodeNet, dst: NodeNet, count: int = 20, port: int = 9999) -> int:
    """How many of `count` UDP datagrams sent from inside `src`'s namespace arrive in
    `dst`'s (links in one direction only, which TCP cannot show)."""
    receiver = ("import socket, sys\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"s.bind(({dst.address!r}, {port})); s.settimeout(2.0)\n"
                "print('ready', flush=True)\n"
                "got = 0\n"
                "try:\n"
                "    while True:\n"
                "        s.recv(64); got += 1\n"
                "except OSError:\n"
                "    print(got)\n")
    sender = ("import socket, time\n"
              "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              f"for _ in range({count}):\n"
              f"    s.sendto(b'x', ({dst.address!r}, {port})); time.sleep(0.002)\n")
    with subprocess.Popen([*dst.exec_prefix, sys.executable, "-c", receiver],
                          stdout=subprocess.PIPE, text=True) as listening:
        assert listening.stdout is not None
        assert listening.stdout.readline().strip() == "ready"
        subprocess.run([*src.exec_prefix, sys.executable, "-c", sender], check=True,
                       timeout=60)
        return int(listening.stdout.read().strip())
