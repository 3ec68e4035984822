"""Moldau and Apache Kafka side by side on this machine: the same workloads, the same load
generators, one table.

    .venv/bin/python -m bench [--quick] [--only WORKLOAD ...] [--out docs/benchmarks.md]

Measures the machine's limits (loopback TCP, disk), then starts Moldau, runs every selected
workload, stops it, runs the RF 3 workloads (`cluster`) against a three-node Moldau cluster,
and does the same with Kafka. Progress goes to the terminal; the table goes to the terminal
and to --out. A run with --only writes --out only when it is given, so a partial run does not
replace the full table; `startup` comes with every single-node workload, `--only cluster`
starts no single node.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from bench import brokers, clusters, machine, procs, report, tools
from bench.cluster_workloads import ClusterRun
from bench.workloads import (
    CLUSTER_GROUP,
    GIB,
    GROUPS,
    MIB,
    RAW_PASSES,
    BrokerRun,
    Plan,
    define_rows,
)
from e2e import kafka_dist

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"
LIMIT_GROUP = "limits"


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        elapsed = int(time.monotonic() - self.started)
        print(f"[{elapsed // 60:2d}:{elapsed % 60:02d}] {message}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"workloads: {', '.join((LIMIT_GROUP, *GROUPS))}")
    parser.add_argument("--quick", action="store_true",
                        help="smaller volumes (a few minutes instead of ~20)")
    parser.add_argument("--only", nargs="+", metavar="WORKLOAD",
                        choices=(LIMIT_GROUP, *GROUPS), help="run only these workloads")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the table (default: {DEFAULT_OUT.relative_to(REPO)}"
                        " for a full run, nowhere with --only)")
    parser.add_argument("--repeats", type=int, default=None, metavar="N",
                        help="runs per throughput/latency figure, median reported "
                        "(default: 3, 1 with --quick)")
    parser.add_argument("--brokers", nargs="+", choices=("moldau", "kafka"),
                        default=["moldau", "kafka"], help="brokers to run (default: both)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="parent of the bench directory (default: the system temp dir); "
                        "both brokers' logs and the disk test go there")
    parser.add_argument("--broker-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for both brokers on top of the common ones (repeat "
                        "it), e.g. to measure what an authorizer costs")
    return parser.parse_args(argv)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for setting in args.broker_setting:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise SystemExit(f"--broker-setting {setting!r}: expected KEY=VALUE")
        brokers.COMMON_SETTINGS[key] = value
    signal.signal(signal.SIGTERM, _interrupt)
    # A thousand client sockets here, and as many in the broker (inherits the limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    plan = Plan.make(args.quick)
    if args.repeats is not None:
        plan = dataclasses.replace(plan, repeats=max(1, args.repeats))
    groups = select_groups(args.only)
    out = args.out if args.out is not None else (DEFAULT_OUT if args.only is None else None)
    progress = Progress()
    load_before = machine.load_average()
    busy_before = machine.busy_cpu_seconds()
    own_before = _own_cpu_seconds()
    date = datetime.datetime.now(datetime.UTC)
    commit = _git_commit()  # read now: the checkout may change while this runs
    bench_dir = Path(tempfile.mkdtemp(prefix="moldau-bench-", dir=args.workdir))
    description = machine.describe(bench_dir)
    limits: dict[str, float] = {}
    notes: list[str] = []
    rows: list[report.Row] = []
    interrupted = False
    try:
        progress("checking the Kafka distribution (java/fetch-kafka.sh)")
        kafka_dist.ensure_artifacts()
        moldau_perf = tools.moldau_perf_available()
        rows = [r for r in define_rows(plan, moldau_perf) if r.group in groups]
        by_id = {row.id: row for row in rows}
        needs = {row.limit for row in rows if row.limit}
        if args.only is None or LIMIT_GROUP in args.only:
            needs |= {"loopback", "disk_write", "disk_read"}
        limits = measure_limits(needs, bench_dir, plan, progress, notes)
        single = [g for g in groups if g != CLUSTER_GROUP]
        for kind in args.brokers:
            if single:
                run_broker(kind, plan, by_id, single, bench_dir, progress, moldau_perf)
            if CLUSTER_GROUP in groups:
                run_cluster(kind, plan, by_id, bench_dir, progress)
    except KeyboardInterrupt:
        interrupted = True
        progress("interrupted: stopping brokers and load generators")
    finally:
        procs.kill_all()
        clusters.kill_all()
        for leftover in list(kafka_dist._RUNNING):  # any Kafka node not yet stopped
            leftover.kill()
        brokers.remove(bench_dir)
    elapsed = time.monotonic() - progress.started
    other = (machine.busy_cpu_seconds() - busy_before - (_own_cpu_seconds() - own_before))
    load = {"before": load_before, "after": machine.load_average(),
            "others": max(0.0, other / elapsed)}
    text = report.table(rows, limits)
    found = report.targets({r.id: r for r in rows}, limits)
    print()
    print(text)
    print()
    print(report.targets_table(found))
    print(f"\n{_limits_line(limits)}")
    print(f"took {elapsed / 60:.1f} min; load average before {_load(load_before)}, after "
          f"{_load(load['after'])}; other processes used {load['others']:.2f} cores on average")
    if interrupted:
        print("interrupted: the table is incomplete and was not written")
        return 130
    if out is not None:
        command = " ".join([".venv/bin/python -m bench", *map(shlex.quote, argv)])
        out.write_text(page(text, found, limits, description, load, date, commit, elapsed,
                            command, plan, rows, notes, args.only))
        print(f"wrote {out}")
    return 0


def select_groups(only: list[str] | None) -> list[str]:
    """The workload groups to run, in table order: all of them, or those of --only, with
    `startup` (it starts the single node) whenever a single-node group is among them."""
    groups = [g for g in GROUPS if only is None or g in only]
    if any(g != CLUSTER_GROUP for g in groups) and "startup" not in groups:
        groups.insert(0, "startup")
    return groups


def _own_cpu_seconds() -> float:
    """CPU time of this process and of every child it has waited for (brokers, tools)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _load(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _limits_line(limits: dict[str, float]) -> str:
    if not limits:
        return "machine limits: not measured"
    return "machine limits: " + ", ".join(
        f"{report.LIMIT_NAMES[k]} {report.fmt(v, 'MiB/s')}" for k, v in limits.items())


def measure_limits(needs: set[str], bench_dir: Path, plan: Plan, progress: Progress,
                   notes: list[str]) -> dict[str, float]:
    limits: dict[str, float] = {}
    if "loopback" in needs:
        progress(f"machine: loopback TCP, two processes, {plan.loopback_seconds:g} s")
        with _noted(notes, "loopback"):
            limits["loopback"] = machine.loopback_mib_per_s(plan.loopback_seconds)
    if needs & {"disk_write", "disk_read"}:
        path = bench_dir / "disk-test.bin"
        size = plan.disk_bytes
        try:
            progress(f"machine: disk write {size / GIB:g} GiB in 1 MiB blocks, fsync at end")
            with _noted(notes, "disk write"):
                limits["disk_write"] = machine.disk_write_mib_per_s(path, size, dsync=False)
            progress(f"machine: disk write {size / GIB:g} GiB in 1 MiB blocks, O_DSYNC")
            with _noted(notes, "disk write with O_DSYNC"):
                limits["disk_dsync"] = machine.disk_write_mib_per_s(path, size, dsync=True)
            progress("machine: disk read after dropping the page cache")
            why = machine.drop_caches()
            if why is None:
                with _noted(notes, "disk read"):
                    limits["disk_read"] = machine.disk_read_mib_per_s(path)
            else:
                notes.append(f"disk read: {why}")
        finally:
            path.unlink(missing_ok=True)
    for name, value in limits.items():
        progress(f"  -> {report.LIMIT_NAMES[name]}: {report.fmt(value, 'MiB/s')}")
    return limits


@contextlib.contextmanager
def _noted(notes: list[str], what: str):  # type: ignore[no-untyped-def]
    try:
        yield
    except Exception as exc:  # a limit that cannot be measured leaves its column empty
        notes.append(f"{what}: not measured ({type(exc).__name__}: {exc})")


def run_broker(kind: str, plan: Plan, rows: dict[str, report.Row], groups: list[str],
               bench_dir: Path, progress: Progress, moldau_perf: bool) -> None:
    workdir = bench_dir / kind
    broker = brokers.make(kind, workdir)
    run = BrokerRun(kind, broker, plan, rows, progress, moldau_perf)
    try:
        _run_groups(run, broker, rows, groups, progress)
    except BaseException:
        broker.kill9()  # Ctrl-C or a bug: no graceful stop, just nothing left running
        brokers.remove(workdir)
        raise
    if broker.alive():
        progress(f"{broker.name}: stopping")
        try:
            run.ok("shutdown", broker.stop())
        except Exception as exc:
            run.fail(["shutdown"], str(exc))
    broker.kill9()
    brokers.remove(workdir)


def run_cluster(kind: str, plan: Plan, rows: dict[str, report.Row], bench_dir: Path,
                progress: Progress) -> None:
    """The RF 3 rows against a three-node cluster of `kind`, killed and removed afterwards."""
    workdir = bench_dir / f"{kind}-cluster"
    cluster = clusters.make(kind, workdir)
    run = ClusterRun(kind, cluster, plan, rows, progress)
    try:
        run.run([r.id for r in rows.values() if r.group == CLUSTER_GROUP])
    finally:
        progress(f"{run.name}: killing the cluster (not measured)")
        cluster.kill_all()
        brokers.remove(workdir)


def _run_groups(run: BrokerRun, broker: brokers.BenchBroker, rows: dict[str, report.Row],
                groups: list[str], progress: Progress) -> None:
    try:
        run.startup()
    except Exception as exc:
        run.fail(list(rows), f"{broker.name} did not start: {exc}")
        return
    if set(groups) - {"startup", "connections"}:
        run.warmup()
    for group in groups:
        if group == "startup":
            continue
        if not broker.alive():
            progress(f"{broker.name} is not running ({broker.describe_exit()}); restarting it")
            try:
                broker.start()
            except Exception as exc:
                run.fail([r.id for r in rows.values() if r.group == group], str(exc))
                continue
        getattr(run, group)()


# --------------------------------------------------------------------------- the page


def _git_commit() -> str:
    """The commit measured (read-only git commands), and whether the tree differed from it."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=30).stdout
        return f"{commit or '?'}{' (with uncommitted changes)' if dirty.strip() else ''}"
    return "?"


def page(text: str, found: list[report.Target], limits: dict[str, float],
         description: dict[str, str], load: dict, date: datetime.datetime, commit: str,
         elapsed: float,
         command: str, plan: Plan, rows: list[report.Row], notes: list[str],
         only: list[str] | None) -> str:
    cores = os.cpu_count() or 1
    # CPU that other processes took during the run is the direct measure; the load average
    # before it lags (it still counts whatever ran in the minute before).
    shared = load["others"] >= 0.25 or load["before"][0] >= cores
    failures = [(row, report.BROKERS.index(b), cell) for row in rows
                for b, cell in row.cells.items() if cell.status == "failed"]
    lines = [
        "# Benchmarks: Moldau next to Apache Kafka",
        "",
        "The same workloads, driven by the same load generators (Kafka's own tools, librdkafka, "
        "and a bare Fetch reader that shows the broker's side of a fetch), against a Moldau "
        f"broker and an Apache Kafka {kafka_dist.kafka_version()} broker started one after the "
        "other on one machine with equivalent settings. This page is written by the benchmark "
        "itself; to measure again:",
        "",
        "```sh",
        f"{command}    # or: make bench",
        "```",
        "",
        f"Last run: {date:%Y-%m-%d %H:%M} UTC, Moldau at commit {commit}, "
        f"{'quick' if plan.quick else 'default'} mode"
        f"{', workloads: ' + ', '.join(only) if only else ''}, {elapsed / 60:.1f} minutes.",
        "",
        "## Machine",
        "",
        f"- CPU: {description['cpu']}",
        f"- Memory: {description['memory']}",
        f"- Kernel: {description['kernel']}",
        f"- Disk (log directories and disk test): {description['disk']}",
        f"- Python {description['python']}; Java: {description['java']}",
        f"- Load average (1/5/15 min) before the run: {_load(load['before'])}, after: "
        f"{_load(load['after'])}; CPU used by other processes during the run: "
        f"{load['others']:.2f} cores on average",
    ]
    if shared:
        lines += ["", f"**These figures come from a shared machine**: other work was running "
                  f"on its {cores} cores during the run (see the load above), so absolute "
                  "figures are lower and noisier than on an idle machine; both brokers were "
                  "exposed to it, but not necessarily equally."]
    else:
        lines += ["", "Other processes took no significant CPU during the run; the load "
                  "generators share the machine with each broker in turn."]
    lines += [
        "",
        "## Results",
        "",
        "Ratios are Moldau's figure over Kafka's; the last column says whether higher or lower "
        "is better. Throughput in MiB/s (2^20 bytes) of record values. "
        + (f"Throughput and latency-pair figures are the median of {plan.repeats} runs, "
           "followed by [lowest–highest] over those runs." if plan.repeats > 1 else ""),
        "",
        text,
        "",
        _limits_line(limits) + " (measured in the same run).",
        "",
        "## Targets",
        "",
        report.targets_table(found),
        "",
    ]
    if failures or notes:
        lines += ["## Failures and gaps", ""]
        lines += [f"- {row.label}, {report.BROKERS[index].capitalize()}: "
                  f"{' '.join(cell.reason.split())[:1500]}" for row, index, cell in failures]
        lines += [f"- {note}" for note in notes]
        lines.append("")
    lines += METHOD.format(kafka=kafka_dist.kafka_version(), rate=plan.latency_rate,
                           conns=plan.connections, recovery=report.size(plan.recovery_bytes),
                           warmup=plan.warmup_records, lat_warmup=plan.latency_warmup,
                           disk=plan.disk_bytes / MIB, rf3_warmup=plan.rf3_warmup,
                           raw_passes=RAW_PASSES,
                           jvm=" ".join(kafka_dist.BROKER_JVM_OPTS),
                           tools_jvm=" ".join(tools.PERF_JVM_OPTS)).splitlines()
    return "\n".join(lines).rstrip() + "\n"


METHOD = """## Method

**Brokers.** Each broker runs alone: Moldau first, then Kafka. Both are a single node on
127.0.0.1 with their log directory under one temporary bench directory (the same disk as
the disk test), Kafka's default flush policy for both (no fsync forced by the broker; the
page cache and the kernel's write-back decide), `num.partitions=1`, replication factor 1,
`group.initial.rebalance.delay.ms=0` and `socket.send.buffer.bytes=1048576` (Kafka's
default, 100 KiB, paces a fetch of hundreds of MiB over loopback by the wake-ups needed to
refill the socket; with it the bare Fetch reader got about 2.0 GiB/s from Moldau and 2.5
from Kafka on this machine, with 1 MiB 3.4 and 3.2). Kafka {kafka} runs in KRaft mode as one
combined broker and controller (metadata version 4.0-IV3, the protocol Moldau implements) with the
JVM options `{jvm}`, through `e2e/kafka_dist.py`; Moldau runs as `moldau broker` with
`--override` for the same settings.

**Clusters.** The RF 3 rows run against three nodes of each broker, after its single node
has stopped: Moldau through `moldau.cluster.LocalCluster` (three `moldau broker` processes,
each broker and controller), Kafka as three combined broker and controller nodes, storage
formatted with one cluster id and a static three-voter `controller.quorum.voters`, each JVM
with the options above. Both on 127.0.0.1 under the bench directory, with the single node's
settings plus `broker.session.timeout.ms=9000` and `broker.heartbeat.interval.ms=2000`
(Kafka's defaults, the same names and defaults in Moldau) and replication factor 3 for the
internal topics. Each cluster gets {rf3_warmup:,} records of 1 KiB produced with acks=all into
an RF 3 topic as an unmeasured warm-up, and is killed when its workloads are done.

**Load generators.** Kafka's own `ProducerPerformance`, `ConsumerPerformance` and
`EndToEndLatency` (from kafka-tools, JVM options `{tools_jvm}`), and librdkafka: through
confluent-kafka (`bench/confluent_throughput.py`, `bench/latency_pair.py`), and as `kcat`
for reading without a Python loop per record. `moldau perf
produce`, Moldau's own Python client, is reported alongside when it is installed, never
instead of the others. Every produce workload checks afterwards, with ListOffsets, that the
broker holds exactly the records it acknowledged. Load generators and broker share the
machine's cores, as they would in any single-machine comparison. After start-up each broker
gets the same unmeasured warm-up ({warmup:,} records of 1 KiB produced and consumed), so
that Kafka's JIT compiler is not measured while it is still cold.

**Workloads.**
- *Start-up*: from just before the process is launched to the first ApiVersions answer
  (a probe every 5 ms). *RSS* is the resident memory of the broker's process tree:
  at rest 3 s after start-up, and the peak of samples taken every 200 ms during the
  1 KiB acks=1 produce run.
- *Produce*: `ProducerPerformance --throughput -1` into a new one-partition topic, 1 KiB
  and 100 B random values, with acks=1 and acks=all. With one node acks=all is RF 1. The
  RF 3 rows do the same with acks=all against a three-node cluster, into a one-partition
  topic with three replicas and `min.insync.replicas=2`, so every acknowledgment waits for
  a follower's fetch; fewer records than the RF 1 rows, to keep the run short.
- *Consume*: the 1 KiB acks=1 topic read back from offset 0 by each consumer in turn.
  Hot: every segment file read just before, so the page cache holds it. Cold: `sync` and
  `echo 3 > /proc/sys/vm/drop_caches` just before. ConsumerPerformance's `fetch.MB.sec`
  leaves out the group join; the others are timed from process or consumer start. The
  bare Fetch reader (`bench/raw_fetch.py`) is not a consumer: it sends Fetch v4 requests
  on a plain socket, one at a time, and takes each response into one buffer without
  decoding records, the receiving loop of the loopback test; it reads the hot partition
  {raw_passes} times over (once when cold), timed inside the process. It shows how fast the
  broker's fetch path is when the reader costs almost nothing. The hot-fetch target takes
  the fastest reader, since a slower one measures itself.
- *End-to-end latency*: a librdkafka producer (linger.ms=0, acks=1) paced open-loop at
  {rate} msg/s and a librdkafka consumer in another process; each value carries the
  producer's CLOCK_MONOTONIC at send time, and the consumer takes the difference when
  poll() returns it. The first {lat_warmup} s are dropped. `EndToEndLatency` sends one
  record at a time and waits for it.
- *Idle connections*: {conns} plain TCP connections, each sending one ApiVersions and
  then staying open; broker RSS with them open, and the round trip of single 100-byte
  produce requests (one at a time) with and without them. All of them must still answer an
  ApiVersions at the end.
- *1,000 partitions*: CreateTopics for 1,000 partitions, timed until every partition has
  accepted a first record (a leader in Metadata comes earlier: Kafka answers
  NOT_LEADER_OR_FOLLOWER until the partition's log is open); then ProducerPerformance into
  the fresh topic with a round-robin partitioner, so every request carries many small
  per-partition batches, and the first writes to each partition's files are part of it.
- *Leader failover*: a librdkafka producer (idempotent, acks=all, linger.ms=0) writes
  numbered records at a steady rate into a fresh RF 3 topic whose leader is not the active
  controller (so the metadata quorum keeps its leader); that leader's process gets SIGKILL.
  Timed from the signal to the acknowledgment of the first record sent after it; the cell
  also gives when a surviving broker's Metadata first named the new leader. The dead
  broker is noticed through its missed heartbeats, so the session timeout makes up most of
  the figure; afterwards the broker must hold exactly the records acknowledged.
- *Controlled shutdown*: a topic whose partitions all have the same leader (not the active
  controller) and three in-sync replicas; SIGTERM to that broker, then Metadata from another
  broker every 5 ms until every partition names a new leader. The cell also gives when the
  process exited. The broker is started again afterwards.
- *Restart recovery*: the broker's log (every topic written so far) is topped up to at
  least {recovery}, the broker killed with SIGKILL, and started again; timed to the first
  ApiVersions and to the moment ListOffsets on every partition returns the acknowledged end offsets.
- *Machine limits*: a plain socket sender and receiver in two processes over loopback
  (4 MiB writes); {disk:,.0f} MiB written in 1 MiB blocks with one fsync at the end and
  with O_DSYNC, then read back after dropping the page cache. Produce rows compare with
  the write limit (fsync at end); consume rows with loopback (hot) or disk read (cold).
  The disk figures come from one sequential reader or writer on a virtual disk whose host
  may cache it: a broker can exceed them, so they are a reference, not a ceiling.
"""
