"""`moldau cluster up|status|down` and the LocalCluster API, with real broker processes.

`test_three_node_cluster` needs the broker's multi-node support (several voters, broker
registration) and expects `down` to stop every node by SIGTERM alone, the last voter
included; a node that fails to start shows up with the tail of its log in the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import moldau_executable
from e2e.support import ck_consume_all, ck_produce, make_records, unique, wait_until
from moldau.client import Admin, NewTopic
from moldau.cluster import ClusterError, ClusterStartError, LocalCluster, free_base_port

pytestmark = pytest.mark.timeout(180)

UP_TIMEOUT = "60"


def moldau(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([moldau_executable(), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (f"exit status {proc.returncode}\n--- stdout:\n{proc.stdout}"
                                  f"--- stderr:\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def failed(proc: subprocess.CompletedProcess) -> str:
    """A failure: exit status 1, an 'Error: ...' message on stderr, no traceback."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback (most recent call last)" not in proc.stderr.split("Error: ", 1)[0]
    assert "Error: " in proc.stderr, proc.stderr
    return proc.stderr


def pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state == "Z":
            return False
    return True


def recorded_pids(data_dir: Path) -> list[int]:
    state = json.loads((data_dir / "cluster.json").read_text())
    return [node["pid"] for node in state["nodes"] if node["pid"] is not None]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A cluster directory; whatever cluster it records is stopped after the test."""
    directory = tmp_path / "cluster"
    yield directory
    if (directory / "cluster.json").exists():
        with contextlib.suppress(ClusterError):
            LocalCluster.load(directory).stop(timeout=15)


def up(data_dir: Path, brokers: int, base_port: int, *extra: str) -> subprocess.CompletedProcess:
    return moldau("cluster", "up", "--brokers", str(brokers), "--data-dir", str(data_dir),
                  "--base-port", str(base_port), "--timeout", UP_TIMEOUT, *extra)


def status_rows(text: str) -> dict[int, list[str]]:
    """Node rows of the status table by node id."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


def test_help_texts():
    top = ok(moldau("--help"))
    assert "cluster" in top
    for action, flags in [("up", ["--brokers", "--data-dir", "--base-port", "--override",
                                  "--timeout"]),
                          ("start", ["NODE", "--data-dir", "--timeout"]),
                          ("status", ["--data-dir"]), ("down", ["--data-dir", "--timeout"])]:
        text = ok(moldau("cluster", action, "--help"))
        for flag in flags:
            assert flag in text, (action, flag)
        assert "example: moldau cluster " + action in text


def test_one_node_up_status_down(cluster_dir):
    base = free_base_port(1)
    proc = up(cluster_dir, 1, base, "--override", "num.partitions=2")
    out = ok(proc)
    assert out.strip() == f"bootstrap.servers=127.0.0.1:{base}"
    assert "waiting for 1 broker to register: 0/1" in proc.stderr
    assert "ready in" in proc.stderr

    # The broker outlives `up`, detached, logging to its own file.
    state = json.loads((cluster_dir / "cluster.json").read_text())
    (node,) = state["nodes"]
    assert node["roles"] == ["broker", "controller"]
    assert (node["broker_port"], node["controller_port"]) == (base, base + 1)
    assert pid_runs(node["pid"])
    assert f"controller.quorum.voters=1@127.0.0.1:{base + 1}" in node["command"]
    assert "num.partitions=2" in node["command"]
    assert (cluster_dir / "node-1" / "broker.log").exists()
    assert (cluster_dir / "node-1" / "data" / "meta.properties").exists()

    with Admin({"bootstrap.servers": f"127.0.0.1:{base}"}) as admin:
        admin.create_topics([NewTopic("cluster-cli", num_partitions=3)])

    text = ok(moldau("cluster", "status", "--data-dir", str(cluster_dir)))
    rows = status_rows(text)
    assert rows[1][:5] == ["1", "broker,controller", str(node["pid"]), "yes",
                           f"127.0.0.1:{base}"]
    assert re.search(r"^active controller: 1 ", text, re.M), text
    assert "registered brokers: 1/1 (1)" in text
    assert re.search(r"^partitions: \d+, under-replicated: 0, offline: 0$", text, re.M), text
    assert int(re.search(r"^partitions: (\d+)", text, re.M)[1]) >= 3

    # A second `up` on the same directory is refused while the cluster runs.
    err = failed(up(cluster_dir, 1, base))
    assert "already running" in err and "moldau cluster down" in err

    proc = moldau("cluster", "down", "--data-dir", str(cluster_dir))
    assert "stopped 1 node" in ok(proc)
    assert not pid_runs(node["pid"])
    assert recorded_pids(cluster_dir) == []
    # Idempotent.
    assert "is running" in ok(moldau("cluster", "down", "--data-dir", str(cluster_dir)))
    # Nobody answers now.
    proc = moldau("cluster", "status", "--data-dir", str(cluster_dir))
    assert "no node answers" in failed(proc)
    assert status_rows(proc.stdout)[1][3] == "no"

    # `up` again restarts the recorded cluster with its data.
    out = ok(moldau("cluster", "up", "--data-dir", str(cluster_dir), "--timeout", UP_TIMEOUT))
    assert out.strip() == f"bootstrap.servers=127.0.0.1:{base}"
    with Admin({"bootstrap.servers": f"127.0.0.1:{base}"}) as admin:
        assert "cluster-cli" in admin.list_topics()
    ok(moldau("cluster", "down", "--data-dir", str(cluster_dir)))


def test_taken_port_is_refused(cluster_dir):
    base = free_base_port(1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", base + 1))  # node 1's controller port
        sock.listen()
        err = failed(up(cluster_dir, 1, base))
    assert f"port {base + 1} (controller listener of node 1) is already in use" in err
    assert not (cluster_dir / "node-1").exists()


def test_node_that_exits_during_start_up(cluster_dir):
    base = free_base_port(1)
    proc = up(cluster_dir, 1, base, "--override", "num.io.threads=0")
    err = failed(proc)
    assert "node 1 exited with status 2 during start-up" in err
    # The tail of the node's log says why.
    assert "num.io.threads" in err
    assert proc.stdout == ""
    assert recorded_pids(cluster_dir) == []


def test_overrides_of_managed_settings_are_refused(cluster_dir):
    err = failed(up(cluster_dir, 1, free_base_port(1), "--override",
                    "listeners=PLAINTEXT://127.0.0.1:1"))
    assert "listeners cannot be overridden" in err
    err = failed(up(cluster_dir, 1, free_base_port(1), "--override", "novalue"))
    assert "expected KEY=VALUE" in err


def test_status_and_down_without_a_cluster(tmp_path):
    err = failed(moldau("cluster", "status", "--data-dir", str(tmp_path / "none")))
    assert "no cluster recorded" in err
    proc = moldau("cluster", "down", "--data-dir", str(tmp_path / "none"))
    assert proc.returncode == 0 and "nothing to stop" in proc.stderr


def test_python_api_kill_and_restart(cluster_dir):
    lines: list[str] = []
    cluster = LocalCluster(cluster_dir, brokers=1, base_port=free_base_port(1),
                           progress=lines.append)
    with cluster:
        assert cluster.bootstrap_servers == cluster.node(1).broker_address
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("api-kill", num_partitions=2)])
        first_pid = cluster.node(1).pid
        assert cluster.kill(1, signal.SIGKILL)
        assert not cluster.node(1).alive
        assert cluster.node(1).exit_code == -signal.SIGKILL

        cluster.restart(1)
        assert cluster.node(1).alive and cluster.node(1).pid != first_pid
        view = cluster.wait_until(lambda v: not v.under_replicated and not v.offline, 30,
                                  "every partition led and fully replicated")
        assert view.broker_ids == {1} and view.controller_id == 1
        assert {p.topic for p in view.partitions} >= {"api-kill"}
        assert cluster.active_controller() == 1

        # Another LocalCluster finds the same processes through cluster.json.
        again = LocalCluster.load(cluster_dir)
        assert again.node(1).pid == cluster.node(1).pid and again.node(1).alive
        with pytest.raises(ClusterError, match="already running"):
            LocalCluster(cluster_dir, brokers=1, base_port=cluster.base_port).start()
    assert not cluster.node(1).alive
    assert cluster.node(1).exit_code == 0  # a clean shutdown on SIGTERM
    assert any(line.startswith("waiting for 1 broker to register") for line in lines)


def test_python_api_reports_start_up_failure(cluster_dir):
    cluster = LocalCluster(cluster_dir, brokers=1, base_port=free_base_port(1),
                           overrides={"num.io.threads": 0})
    with pytest.raises(ClusterStartError) as info:
        cluster.start(timeout=30)
    assert info.value.node_id == 1
    assert "num.io.threads" in str(info.value)
    assert not cluster.node(1).alive


def test_three_node_cluster(cluster_dir):
    base = free_base_port(3)
    proc = up(cluster_dir, 3, base)
    out = ok(proc)
    assert out.strip() == ("bootstrap.servers=" + ",".join(
        f"127.0.0.1:{base + 2 * i}" for i in range(3)))
    assert "waiting for 3 brokers to register" in proc.stderr
    state = json.loads((cluster_dir / "cluster.json").read_text())
    voters = f"controller.quorum.voters=1@127.0.0.1:{base + 1},2@127.0.0.1:{base + 3}," \
             f"3@127.0.0.1:{base + 5}"
    for node in state["nodes"]:
        assert voters in node["command"]
        assert "offsets.topic.replication.factor=3" in node["command"]

    with Admin({"bootstrap.servers": f"127.0.0.1:{base}"}) as admin:
        admin.create_topics([NewTopic("cluster-rf3", num_partitions=3,
                                      replication_factor=3)])

    text = ok(moldau("cluster", "status", "--data-dir", str(cluster_dir)))
    rows = status_rows(text)
    assert sorted(rows) == [1, 2, 3]
    assert all(row[3] == "yes" for row in rows.values()), text
    controller = re.search(r"^active controller: (\d+) ", text, re.M)
    assert controller and int(controller[1]) in (1, 2, 3), text
    assert "registered brokers: 3/3 (1, 2, 3)" in text

    pids = recorded_pids(cluster_dir)
    assert len(pids) == 3
    proc = moldau("cluster", "down", "--data-dir", str(cluster_dir))
    assert "stopped 3 nodes" in ok(proc)
    assert "killing it" not in proc.stderr, proc.stderr
    assert not any(pid_runs(pid) for pid in pids)
    assert recorded_pids(cluster_dir) == []


def node_pid(data_dir: Path, node_id: int) -> int:
    state = json.loads((data_dir / "cluster.json").read_text())
    return next(node["pid"] for node in state["nodes"] if node["node_id"] == node_id)


def kill_node(data_dir: Path, node_id: int) -> None:
    pid = node_pid(data_dir, node_id)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_runs(pid), 30, f"node {node_id} (pid {pid}) to die")


def test_a_killed_node_is_shown_down_and_started_again(cluster_dir):
    base = free_base_port(3)
    bootstrap = ok(up(cluster_dir, 3, base)).strip().removeprefix("bootstrap.servers=")
    kill_node(cluster_dir, 3)

    text = ok(moldau("cluster", "status", "--data-dir", str(cluster_dir)))
    assert [row[3] for _, row in sorted(status_rows(text).items())] == ["yes", "yes", "no"]
    assert "nodes down: 3 (start with: moldau cluster start 3 " in text, text
    # Only a stopped node can be started.
    assert "already running" in failed(moldau("cluster", "start", "1", "--data-dir",
                                              str(cluster_dir)))

    out = ok(moldau("cluster", "start", "3", "--data-dir", str(cluster_dir),
                    "--timeout", UP_TIMEOUT))
    assert out.strip() == f"bootstrap.servers={bootstrap}"
    text = ok(moldau("cluster", "status", "--data-dir", str(cluster_dir)))
    assert all(row[3] == "yes" for row in status_rows(text).values()), text
    assert "registered brokers: 3/3 (1, 2, 3)" in text and "nodes down" not in text

    # `up` on the running cluster starts whatever node is missing.
    kill_node(cluster_dir, 2)
    proc = moldau("cluster", "up", "--data-dir", str(cluster_dir), "--timeout", UP_TIMEOUT)
    assert ok(proc).strip() == f"bootstrap.servers={bootstrap}"
    assert "started the stopped node 2" in proc.stderr
    assert "registered brokers: 3/3 (1, 2, 3)" in ok(
        moldau("cluster", "status", "--data-dir", str(cluster_dir)))

    # The healed cluster serves a topic that needs all three nodes.
    topic = unique("healed")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])
    records = make_records(20)
    ck_produce(bootstrap, topic, records, acks="all")
    assert [r.value for r in ck_consume_all(bootstrap, topic)] == [r.value for r in records]
