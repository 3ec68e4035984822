"""The test hosts: namespaces on a bridge, a cluster inside them, and a crashed run's
leftovers removed by the next set-up."""

from __future__ import annotations

import subprocess

import pytest

from e2e.chaos import net
from e2e.support import ck_consume_all, ck_produce, make_records
from e2e.test_cluster_failover import create_topic
from moldau.cluster.launcher import LocalCluster


def test_cluster_in_namespaces_serves_a_client_in_the_root_namespace(
        chaos_cluster: LocalCluster, chaos_net: net.TestNetwork) -> None:
    view = chaos_cluster.metadata()
    advertised = {broker.host for broker in view.brokers}
    assert advertised == set(chaos_net.hosts)
    for node in chaos_cluster.nodes:  # each process really lives in its namespace
        pids = net.run("ip", "netns", "pids", chaos_net.node(node.node_id).namespace).stdout
        assert str(node.pid) in pids.split()
    bootstrap = chaos_cluster.bootstrap_servers
    create_topic(bootstrap, "through-bridge", configs={"min.insync.replicas": "2"})
    records = make_records(50)
    ck_produce(bootstrap, "through-bridge", records, acks="all")
    assert len(ck_consume_all(bootstrap, "through-bridge")) == len(records)


def test_setup_removes_what_a_crashed_run_left(tmp_path) -> None:
    problem = net.namespaces_supported()
    if problem is not None:
        pytest.skip(problem)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a run id whose process no longer exists
    crashed = net.TestNetwork(2, run_id=str(gone.pid)).create()
    names = [crashed.bridge, *(m.namespace for m in crashed.members),
             *(f"{net.PREFIX}{gone.pid}h{i}" for i in (1, 2))]
    straggler = subprocess.Popen([*crashed.node(1).exec_prefix, "sleep", "600"])
    assert net.exists(names) == names
    with net.TestNetwork(1) as fresh:
        assert net.exists(names) == []
        assert straggler.wait(10) == -9
        assert net.exists([fresh.bridge]) == [fresh.bridge]
    assert net.exists([fresh.bridge]) == []
