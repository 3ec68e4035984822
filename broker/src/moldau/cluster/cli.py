"""`moldau cluster up|start|status|down`: a local multi-node cluster for development and
tests.

Progress goes to stderr; stdout carries the result (the bootstrap.servers line of `up` and
`start`, the table of `status`, the summary of `down`). Mistakes and failures end with an
`Error: ...` message on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from moldau.cluster.launcher import (
    DEFAULT_BASE_PORT,
    DEFAULT_BROKERS,
    DEFAULT_DATA_DIR,
    START_TIMEOUT,
    STOP_TIMEOUT,
)

__all__ = ["add_command"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
STATUS_TIMEOUT = 3.0
LISTED_PARTITIONS = 10


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _data_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                        help=f"the cluster's directory: one node-<id> folder per node and "
                             f"cluster.json (default: ./{DEFAULT_DATA_DIR})")


def add_command(commands: Any) -> None:
    """Add `cluster` to the `moldau` command's subparsers."""
    parser = commands.add_parser(
        "cluster", help="start, inspect and stop a local multi-node cluster",
        description="Run a cluster of several broker processes on 127.0.0.1, for development "
                    "and tests. Node i gets broker port BASE+2*(i-1) and, if it is one of the "
                    "first three nodes (the controller quorum), controller port "
                    "BASE+2*(i-1)+1; its metrics and health are served on "
                    "http://127.0.0.1:BASE+2*N+(i-1) for N brokers.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    up = actions.add_parser(
        "up", help="start the cluster and wait until it is ready",
        description="Start the brokers in the background and return once the quorum has a "
                    "leader and every broker is registered; then print "
                    "bootstrap.servers=... on stdout. The brokers keep running, each logging "
                    "to DIR/node-<id>/broker.log, until `moldau cluster down`. Run again on "
                    "a stopped cluster's directory to restart it with its data, or on a "
                    "running cluster with stopped nodes to start just those.",
        epilog="example: moldau cluster up --brokers 3 --data-dir /tmp/moldau-cluster "
               "--override num.partitions=6")
    up.add_argument("--brokers", type=_positive_int, metavar="N",
                    help=f"number of brokers; the first three are also controllers (default: "
                         f"{DEFAULT_BROKERS}, or the number recorded in --data-dir)")
    _data_dir_flag(up)
    up.add_argument("--base-port", type=_port, metavar="PORT",
                    help=f"broker port of node 1; node i uses PORT+2*(i-1) and the port after "
                         f"it (default: {DEFAULT_BASE_PORT}, or the recorded one)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every node, e.g. num.partitions=6; repeat as "
                         "needed")
    up.add_argument("--timeout", type=_seconds, default=START_TIMEOUT, metavar="SECONDS",
                    help=f"give up (and stop the nodes) when the cluster is not ready by "
                         f"then (default: {START_TIMEOUT:g})")
    up.add_argument("--log-level", default="INFO",
                    choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                    help="the brokers' log verbosity (default: INFO)")
    up.set_defaults(run=_run(_up))

    start = actions.add_parser(
        "start", help="start one stopped node of the cluster",
        description="Start a node that stopped or was killed, with its data and its "
                    "recorded settings, and wait until it is registered again.",
        epilog="example: moldau cluster start 2 --data-dir /tmp/moldau-cluster")
    start.add_argument("node", type=_positive_int, metavar="NODE", help="the node id")
    _data_dir_flag(start)
    start.add_argument("--timeout", type=_seconds, default=START_TIMEOUT, metavar="SECONDS",
                       help=f"give up when the node is not registered by then (default: "
                            f"{START_TIMEOUT:g})")
    start.set_defaults(run=_run(_start))

    status = actions.add_parser(
        "status", help="show the nodes, the controller and partition health",
        description="Show every node (roles, pid, whether it runs, address), the active "
                    "controller, the registered brokers and the partitions that are "
                    "under-replicated or offline. Exits with status 1 when no node answers.",
        epilog="example: moldau cluster status --data-dir /tmp/moldau-cluster")
    _data_dir_flag(status)
    status.add_argument("--timeout", type=_seconds, default=STATUS_TIMEOUT, metavar="SECONDS",
                        help=f"how long to wait for each node's answer (default: "
                             f"{STATUS_TIMEOUT:g})")
    status.set_defaults(run=_run(_status))

    down = actions.add_parser(
        "down", help="stop the cluster",
        description="Stop the nodes with SIGTERM (controlled shutdown): broker-only nodes "
                    "first, then the controllers one at a time, the active one last. A node "
                    "still running after --timeout seconds is killed with SIGKILL. The data "
                    "stays in DIR; stopping a stopped cluster does nothing.",
        epilog="example: moldau cluster down --data-dir /tmp/moldau-cluster")
    _data_dir_flag(down)
    down.add_argument("--timeout", type=_seconds, default=STOP_TIMEOUT, metavar="SECONDS",
                      help=f"seconds each node gets to exit after SIGTERM (default: "
                           f"{STOP_TIMEOUT:g})")
    down.set_defaults(run=_run(_down))


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from moldau.cluster.launcher import ClusterError
        from moldau.cluster.probe import ProbeError

        try:
            return int(command(args))
        except KeyboardInterrupt:
            print("Interrupted; the nodes started were stopped.", file=sys.stderr)
            return EXIT_INTERRUPTED
        except (ClusterError, ProbeError, OSError) as exc:
            text = str(exc)
            if isinstance(exc, OSError) and exc.filename:
                text = f"{exc.filename}: {exc.strerror or exc}"
            print(f"Error: {text}", file=sys.stderr)
            return EXIT_ERROR

    return run


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _up(args: argparse.Namespace) -> int:
    from moldau.cluster.launcher import ClusterError, LocalCluster

    # SIGTERM while starting stops the nodes started so far, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)

    overrides: dict[str, str] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ClusterError(f"invalid --override {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value
    recorded = LocalCluster.read_state(args.data_dir) or {}
    if recorded:
        running = LocalCluster.load(args.data_dir, progress=_progress)
        if running.alive_nodes() and not all(node.alive for node in running.nodes):
            return _heal(running, args, overrides)
    brokers = args.brokers or int(recorded.get("brokers") or DEFAULT_BROKERS)
    base_port = args.base_port or int(recorded.get("base_port") or DEFAULT_BASE_PORT)
    cluster = LocalCluster(args.data_dir, brokers, base_port, overrides=overrides,
                           log_level=args.log_level, progress=_progress)
    cluster.start(timeout=args.timeout)
    cluster.detach()
    print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
    return EXIT_OK


def _heal(cluster: Any, args: argparse.Namespace, overrides: dict[str, str]) -> int:
    """`up` on a running cluster with stopped nodes: start those, as they were recorded."""
    from moldau.cluster.launcher import ClusterError

    if (args.brokers not in (None, len(cluster.nodes))
            or args.base_port not in (None, cluster.base_port) or overrides):
        raise ClusterError(f"the cluster in {cluster.data_dir} is running: --brokers, "
                           "--base-port and --override cannot change it; start its stopped "
                           "nodes with plain `moldau cluster up` or `moldau cluster start "
                           "NODE`")
    started = cluster.start_stopped_nodes(args.timeout)
    _progress(f"started the stopped node{'s' if len(started) != 1 else ''} "
              f"{', '.join(map(str, started))}")
    cluster.detach()
    print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
    return EXIT_OK


def _start(args: argparse.Namespace) -> int:
    from moldau.cluster.launcher import LocalCluster

    cluster = LocalCluster.load(args.data_dir, progress=_progress)
    cluster.start_node(args.node, timeout=args.timeout)
    cluster.detach()
    print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
    return EXIT_OK


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                         strict=True)).rstrip()
                     for row in rows)


def _status(args: argparse.Namespace) -> int:
    from moldau.cluster.launcher import LocalCluster
    from moldau.cluster.probe import ProbeError

    cluster = LocalCluster.load(args.data_dir)
    alive = {node.node_id: node.alive for node in cluster.nodes}
    rows = [["NODE", "ROLES", "PID", "ALIVE", "BROKER", "CONTROLLER"]]
    for node in cluster.nodes:
        rows.append([str(node.node_id), ",".join(node.roles),
                     str(node.pid) if node.pid is not None and alive[node.node_id] else "-",
                     "yes" if alive[node.node_id] else "no", node.broker_address,
                     node.controller_address or "-"])
    lines = [f"cluster in {cluster.data_dir}"
             + (f" (cluster id {cluster.cluster_id})" if cluster.cluster_id else ""),
             _table(rows)]
    running = [node.node_id for node in cluster.nodes if alive[node.node_id]]
    down = [str(node.node_id) for node in cluster.nodes if not alive[node.node_id]]
    if running and down:
        lines.append(f"nodes down: {', '.join(down)} (start with: moldau cluster start "
                     f"{down[0]} --data-dir {cluster.data_dir}, or moldau cluster up "
                     f"--data-dir {cluster.data_dir} for all)")
    try:
        view = cluster.metadata(args.timeout, ask=running) if running else None
        problem = "" if running else "no node is running"
    except ProbeError as exc:
        view, problem = None, str(exc)
    if view is None:
        print("\n".join(lines))
        print(f"Error: no node answers: {problem}", file=sys.stderr)
        return EXIT_ERROR
    try:
        quorum = cluster.quorum(args.timeout)
    except ProbeError:
        quorum = None
    if quorum is not None and quorum.leader_id >= 0:
        lines.append(f"active controller: {quorum.leader_id} (DescribeQuorum via "
                     f"{quorum.answered_by}: epoch {quorum.leader_epoch}, high watermark "
                     f"{quorum.high_watermark}, voters "
                     f"{', '.join(map(str, quorum.voters)) or '-'})")
    elif view.controller_id >= 0:
        lines.append(f"active controller: {view.controller_id} (Metadata via "
                     f"{view.answered_by})")
    else:
        lines.append("active controller: none")
    expected = len(cluster.nodes)
    ids = ", ".join(str(broker.node_id) for broker in view.brokers) or "none"
    lines.append(f"registered brokers: {len(view.brokers)}/{expected} ({ids})")
    under, offline = view.under_replicated, view.offline
    lines.append(f"partitions: {len(view.partitions)}, under-replicated: {len(under)}, "
                 f"offline: {len(offline)}")
    for label, parts in (("under-replicated", under), ("offline", offline)):
        for part in parts[:LISTED_PARTITIONS]:
            lines.append(f"  {label}: {part} leader {part.leader} replicas "
                         f"{list(part.replicas)} isr {list(part.isr)}")
        if len(parts) > LISTED_PARTITIONS:
            lines.append(f"  ... and {len(parts) - LISTED_PARTITIONS} more {label}")
    print("\n".join(lines))
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    from moldau.cluster.launcher import LocalCluster

    if LocalCluster.read_state(args.data_dir) is None:
        _progress(f"no cluster recorded in {Path(args.data_dir).resolve()}; nothing to stop")
        return EXIT_OK
    cluster = LocalCluster.load(args.data_dir, progress=_progress)
    running = cluster.alive_nodes()
    if not running:
        cluster.stop(args.timeout)  # forgets stale pids
        print(f"no node of the cluster in {cluster.data_dir} is running")
        return EXIT_OK
    killed = cluster.stop(args.timeout)
    summary = f"stopped {len(running)} node{'s' if len(running) != 1 else ''}"
    if killed:
        summary += f" ({', '.join(map(str, killed))} killed after {args.timeout:g} s)"
    print(summary)
    return EXIT_OK
