"""Fixtures of the fault-injection suite: a 3-node cluster whose nodes each run in a network
namespace of their own (net.py), and the fault injector that acts on it (faults.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.chaos import clocks, disks, tools
from e2e.chaos.clocks import NodeClocks
from e2e.chaos.disks import NodeDisk
from e2e.chaos.faults import Faults
from e2e.chaos.net import TestNetwork, namespaces_supported
from e2e.chaos.schedule import replay_command
from e2e.conftest import FAST_FAILOVER
from moldau.cluster.launcher import LocalCluster

BASE_PORT = 9092  # every node has its own address, so all use the same ports
START_TIMEOUT = 90.0
# The faults must be noticed within a schedule's few seconds: Kafka's settings, shorter.
CHAOS_SETTINGS = {**FAST_FAILOVER, "min.insync.replicas": 2, "default.replication.factor": 3,
                  # Retention runs every few seconds, so a clock jump's effect on it shows.
                  "log.retention.check.interval.ms": 2000}


@pytest.fixture
def chaos_net() -> Iterator[TestNetwork]:
    """Three namespaces on a bridge; removed afterwards, whatever happened."""
    tools.require(tools.NETWORK)
    problem = namespaces_supported()
    if problem is not None:
        pytest.skip(f"the fault-injection suite needs network namespaces: {problem}")
    with TestNetwork(3) as network:
        yield network


@pytest.fixture
def chaos_disks(tmp_path: Path, chaos_net: TestNetwork) -> Iterator[dict[int, NodeDisk]]:
    """Node i's data directory on a disk of its own that a power cut can drop (disks.py)."""
    tools.require(tools.DISKS)
    disks.remove_stale()
    made = disks.node_disks(tmp_path, {i: cluster_dir(tmp_path) / f"node-{i}" / "data"
                                       for i in (1, 2, 3)}, chaos_net.run_id)
    try:
        yield made
    finally:
        for disk in made.values():
            disk.remove()


def cluster_dir(tmp_path: Path) -> Path:
    return tmp_path / "cluster"


@pytest.fixture(scope="session")
def clock_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clockshift.c, compiled once per session (clocks.py)."""
    tools.require(tools.CLOCK)
    return clocks.build(tmp_path_factory.mktemp("clockshift"))


@pytest.fixture
def chaos_clocks(tmp_path: Path, clock_library: Path) -> NodeClocks:
    """Each node's wall-clock offset, zero until a test or a fault moves it."""
    return NodeClocks(clock_library, tmp_path)


@pytest.fixture
def chaos_cluster(tmp_path: Path, chaos_net: TestNetwork, chaos_disks: dict[int, NodeDisk],
                  chaos_clocks: NodeClocks) -> Iterator[LocalCluster]:
    """Three broker+controller nodes, node i at chaos_net.node(i).address, its data on
    chaos_disks[i], its wall clock shifted by chaos_clocks."""
    prefixes = [[*chaos_net.node(i).exec_prefix, *chaos_clocks.prefix(i)] for i in (1, 2, 3)]
    cluster = LocalCluster(cluster_dir(tmp_path), brokers=3, base_port=BASE_PORT,
                           overrides=CHAOS_SETTINGS, hosts=chaos_net.hosts,
                           command_prefixes=prefixes)
    cluster.start(timeout=START_TIMEOUT)
    try:
        yield cluster
    finally:
        cluster.stop(timeout=20)


@pytest.fixture
def chaos_faults(chaos_cluster: LocalCluster, chaos_net: TestNetwork,
                 chaos_disks: dict[int, NodeDisk], chaos_clocks: NodeClocks) -> Faults:
    """Every fault, power cuts and clock jumps included, on chaos_cluster."""
    return Faults(chaos_cluster, chaos_net, disks=chaos_disks, clocks=chaos_clocks)


SHORT_SEEDS = (1, 2)  # the normal suite's schedules (a workload module may name its own)


def chaos_seeds(config: pytest.Config, short: tuple[int, ...] = SHORT_SEEDS) -> list[int]:
    """--chaos-seed N (repeatable), else $CHAOS_SCHEDULES seeds from $CHAOS_FIRST_SEED (the
    soak of `make chaos`), else the short mode's few seeds."""
    given = config.getoption("chaos_seed", default=None)
    if given:
        return list(given)
    count = os.environ.get("CHAOS_SCHEDULES")
    if count:
        first = int(os.environ.get("CHAOS_FIRST_SEED", "1"))
        return list(range(first, first + int(count)))
    return list(short)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_seed" in metafunc.fixturenames:
        seeds = chaos_seeds(metafunc.config,
                            getattr(metafunc.module, "SHORT_SEEDS", SHORT_SEEDS))
        metafunc.parametrize("chaos_seed", seeds, ids=[f"seed{seed}" for seed in seeds])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    """Whatever made a schedule fail (an anomaly, a cluster that did not recover), its
    report ends with the command that replays it."""
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    if report.failed and callspec is not None and "chaos_seed" in callspec.params:
        report.sections.append(("replay", replay_command(callspec.params["chaos_seed"],
                                                         item.nodeid.split("::")[0])))
