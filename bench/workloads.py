"""The workloads, each run against one broker at a time, filling the rows of the table.

Every workload creates its own topics explicitly (one partition unless said otherwise,
replication factor 1) and checks afterwards that the broker holds what was acknowledged, so a
fast figure from a broker that dropped records cannot pass unnoticed. The rows of the
`cluster` group (replication factor 3) are defined here and run by bench/cluster_workloads.py.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench import brokers, confluent_throughput, machine, procs, tools
from bench.report import Cell, Row, fmt, rate
from bench.report import size as size_text

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * MIB
# Batched producer settings for the throughput workloads (stated in the table).
KCAT = shutil.which("kcat")  # Debian's kcat package (`make tools`)
BATCHED = {"batch.size": "262144", "linger.ms": "5"}
# The consumers of the consume workload: row-id suffix, name, settings.
CONSUMERS = (
    ("", "ConsumerPerformance", "consumer defaults"),
    ("_rdk", "librdkafka in Python", "confluent-kafka, max.partition.fetch.bytes=10485760"),
    ("_kcat", "kcat", "librdkafka in C, values to /dev/null, "
     "max.partition.fetch.bytes=10485760"),
    ("_raw", "bare Fetch reader", "bench/raw_fetch.py: Fetch v4, one socket, 50 MiB a request, "
     "records not decoded"),
)
RAW_PASSES = 4  # the bare reader reads a hot partition this many times (one pass is ~0.2 s)
# The last group runs against a three-node cluster of each broker instead of the single node.
CLUSTER_GROUP = "cluster"
GROUPS = ("startup", "produce", "consume", "latency", "connections", "partitions", "recovery",
          "transactions", CLUSTER_GROUP)
# How long each transaction of the transactional produce row stays open.
TRANSACTION_MS = 100
# The RF 3 rows: topics with three replicas, acks=all needing two of them in sync.
RF3_TOPIC = {"min.insync.replicas": "2"}
FAILOVER_RATE = 1000  # records/s of the producer that keeps writing through a leader's death
FAILOVER_SIZE = 100
SHUTDOWN_PARTITIONS = 10  # all led by the broker that is shut down


@dataclass
class Plan:
    """Sizes of a run: the default fits in ~20 minutes on two cores, --quick in a few."""

    quick: bool
    produce_1k: int
    produce_100: int
    client_records: int
    warmup_records: int
    latency_seconds: int
    latency_warmup: int
    latency_rate: int
    e2e_records: int
    partitions: int
    partition_records: int
    connections: int
    recovery_bytes: int
    disk_bytes: int
    loopback_seconds: float
    rf3_1k: int
    rf3_100: int
    rf3_warmup: int
    # Throughput and latency runs are repeated and the median reported: on a machine shared
    # with other work, one run can land on a burst of someone else's load.
    repeats: int

    @classmethod
    def make(cls, quick: bool) -> Plan:
        common = {"latency_rate": 1000, "partitions": 1000, "connections": 1000,
                  "disk_bytes": GIB}
        if quick:
            return cls(True, produce_1k=200_000, produce_100=500_000, client_records=100_000,
                       warmup_records=50_000, latency_seconds=10, latency_warmup=3,
                       e2e_records=2_000, partition_records=50_000, recovery_bytes=300 * MIB,
                       loopback_seconds=2.0, rf3_1k=50_000, rf3_100=150_000,
                       rf3_warmup=30_000, repeats=1, **common)
        return cls(False, produce_1k=500_000, produce_100=1_500_000, client_records=300_000,
                   warmup_records=250_000, latency_seconds=30, latency_warmup=5,
                   e2e_records=10_000, partition_records=200_000, recovery_bytes=2 * GIB,
                   loopback_seconds=4.0, rf3_1k=100_000, rf3_100=300_000, rf3_warmup=200_000,
                   repeats=3, **common)


def define_rows(plan: Plan, moldau_perf: bool) -> list[Row]:
    batched = f"batch.size={BATCHED['batch.size']} linger.ms={BATCHED['linger.ms']}"
    rows = [
        Row("startup", "startup", "Start-up: process start to first ApiVersions", "s", "lower",
            "empty log dir (Kafka's storage format done beforehand)"),
        Row("rss_rest", "startup", "RSS at rest", "MiB", "lower",
            "3 s after start-up, no clients, no topics"),
        Row("shutdown", "startup", "Clean shutdown: SIGTERM to exit", "s", "lower",
            "at the end of the run, with every workload's topics"),
        Row("rss_load", "produce", "RSS under load (peak)", "MiB", "lower",
            "sampled every 200 ms during produce 1 KiB acks=1"),
    ]
    for size, count in ((1024, plan.produce_1k), (100, plan.produce_100)):
        name = "1 KiB" if size == 1024 else "100 B"
        tag = "1k" if size == 1024 else "100"
        for acks in ("1", "all"):
            rows.append(Row(f"p{tag}_a{acks}", "produce",
                            f"Produce {name}, acks={acks}, RF 1 (ProducerPerformance)",
                            "MiB/s", "higher",
                            f"{count:,} records, 1 partition, {batched}, --throughput -1",
                            limit="disk_write"))
    for tag, name, count in (("1k", "1 KiB", plan.rf3_1k), ("100", "100 B", plan.rf3_100)):
        rows.append(Row(f"p{tag}_rf3", CLUSTER_GROUP,
                        f"Produce {name}, acks=all, RF 3 (ProducerPerformance)", "MiB/s",
                        "higher", f"{count:,} records, 3 brokers, 1 partition, "
                        f"min.insync.replicas=2, {batched}, --throughput -1"))
    rows.append(Row("p1k_rdk", "produce", "Produce 1 KiB, acks=1 (librdkafka)", "MiB/s",
                    "higher", f"{plan.client_records:,} records, 1 partition, "
                    "batch.size=1048576 linger.ms=5", limit="disk_write"))
    row = Row("p1k_mperf", "produce", "Produce 1 KiB, acks=1 (moldau perf produce)", "MiB/s",
              "higher", f"{plan.client_records:,} records, 1 partition, {batched}",
              limit="disk_write")
    if not moldau_perf:
        row.cells = {b: Cell(status="n/a", reason="`moldau perf` not available")
                     for b in row.cells}
    rows.append(row)
    data = f"{plan.produce_1k:,} x 1 KiB records, 1 partition"
    for cache in ("hot", "cold"):
        where = "segments read just before" if cache == "hot" else "after drop_caches"
        limit = "loopback" if cache == "hot" else "disk_read"
        for suffix, name, setting in CONSUMERS:
            rows.append(Row(f"c_{cache}{suffix}", "consume",
                            f"Consume, {cache} page cache ({name})", "MiB/s", "higher",
                            f"{data}, {where}; {setting}", limit=limit))
    pair = (f"{plan.latency_rate:,} msg/s, 1 KiB, acks=1, linger.ms=0; "
            f"{plan.latency_warmup} s warm-up, then {plan.latency_seconds} s measured")
    for tag, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
        rows.append(Row(f"lat_{tag}", "latency",
                        f"End-to-end latency {name} (librdkafka pair)", "ms", "lower", pair))
    rows += [
        Row("e2e", "latency", "End-to-end latency p50 / p99 / p99.9 (EndToEndLatency)", "ms",
            "lower", f"{plan.e2e_records:,} x 1 KiB, one in flight, acks=1; ratio on p99, "
            "the tool reports whole ms"),
        Row("conn_open", "connections", f"Open {plan.connections:,} idle connections", "s",
            "lower", "plain sockets, one ApiVersions each, then left open"),
        Row("conn_rss", "connections", f"RSS with {plan.connections:,} idle connections",
            "MiB", "lower", "after they are open (growth over before)"),
        Row("conn_lat", "connections",
            f"Produce round trip p50 / p99 with {plan.connections:,} idle connections", "ms",
            "lower", "200 x 100 B, one at a time, acks=1 (before: same, none open); "
            "ratio on p99"),
        Row("part_create", "partitions", f"Create a topic with {plan.partitions:,} partitions",
            "s", "lower", "CreateTopics until every partition has taken a write"),
        Row("part_produce", "partitions", f"Produce 1 KiB across {plan.partitions:,} partitions "
            "(ProducerPerformance)", "MiB/s", "higher",
            f"{plan.partition_records:,} records into the new topic, RoundRobinPartitioner, "
            "batch.size=16384 linger.ms=5, acks=1", limit="disk_write"),
        Row("rec_api", "recovery", "Restart after kill -9: to first ApiVersions", "s", "lower",
            f"log topped up to at least {size_text(plan.recovery_bytes)}, all workloads' topics"),
        Row("rec_data", "recovery", "Restart after kill -9: to all end offsets back", "s",
            "lower", "ListOffsets on every partition matches what was acknowledged"),
        Row("p1k_txn", "transactions",
            "Produce 1 KiB, transactional (ProducerPerformance --transactional-id)", "MiB/s",
            "higher", f"{plan.client_records:,} records, 1 partition, {batched}, a commit "
            f"every {TRANSACTION_MS} ms (--transaction-duration-ms), --throughput -1"),
        Row("c_txn", "transactions",
            "Consume 1 KiB, read_committed (ConsumerPerformance)", "MiB/s", "higher",
            f"the transactional row's {plan.client_records:,} records (a commit marker every "
            f"{TRANSACTION_MS} ms), isolation.level=read_committed, hot cache"),
        Row("failover", CLUSTER_GROUP,
            "Leader failover: kill -9 of the leader to the first acks=all produce", "s",
            "lower", f"3 brokers, RF 3, min.insync.replicas=2, leader not the active "
            f"controller; librdkafka, {FAILOVER_RATE:,} x {FAILOVER_SIZE} B/s, acks=all, "
            "idempotent; to the ack of the first record sent after the kill; "
            "broker.session.timeout.ms=9000"),
        Row("ctl_shutdown", CLUSTER_GROUP,
            "Controlled shutdown: SIGTERM of a leader to leaderships moved", "s", "lower",
            f"3 brokers, RF 3; {SHUTDOWN_PARTITIONS} partitions all led by one broker (not the "
            "active controller), until another broker's Metadata shows a new leader for each"),
    ]
    return rows


# --------------------------------------------------------------------------- client helpers


# The harness's own clients outlive a broker killed on purpose; their reconnect complaints
# would only clutter the progress output (failures still surface as exceptions).
QUIET = {"log_level": 2}


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "reconnect.backoff.max.ms": 200,
                        **QUIET})


def create_topic(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 120) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout,
                                  request_timeout=timeout)
    futures[topic].result(timeout)
    wait_leaders(admin, topic, partitions, timeout)


def wait_leaders(admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (meta is not None and meta.error is None and len(meta.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in meta.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: not every partition has a leader after {timeout} s")
        time.sleep(0.02)


def end_offsets(bootstrap: str, partitions: list[tuple[str, int]],
                timeout: float = 30) -> dict[tuple[str, int], int]:
    admin = admin_client(bootstrap)
    query = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
    futures = admin.list_offsets(query, request_timeout=timeout)
    return {(tp.topic, tp.partition): future.result(timeout).offset
            for tp, future in futures.items()}


def all_partitions(bootstrap: str) -> list[tuple[str, int]]:
    meta = admin_client(bootstrap).list_topics(timeout=30)
    return [(name, p) for name, topic in meta.topics.items() if not name.startswith("__")
            for p in topic.partitions]


def check_count(bootstrap: str, topic: str, partitions: int, expected: int) -> int:
    """Records the broker holds in `topic` (from offset 0); fails unless all are there."""
    offsets = end_offsets(bootstrap, [(topic, p) for p in range(partitions)])
    total = sum(offsets.values())
    if total != expected:
        raise RuntimeError(f"{topic}: broker holds {total} records, {expected} acknowledged")
    return sum(1 for offset in offsets.values() if offset > 0)


def produce_round_trips(bootstrap: str, topic: str, count: int = 200) -> list[float]:
    """Milliseconds for each of `count` produce requests sent one at a time."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                         "enable.idempotence": False, **QUIET})
    producer.list_topics(topic, timeout=30)
    value = b"x" * 100
    samples = []
    for index in range(count + 20):
        started = time.perf_counter()
        producer.produce(topic, value, partition=0)
        if producer.flush(10):
            raise RuntimeError("a produce request got no answer within 10 s")
        if index >= 20:  # warm-up requests
            samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)


def pct(ordered: list[float], fraction: float) -> float:
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)] if ordered else math.nan


# --------------------------------------------------------------------------- one broker's run


class WorkloadFailed(Exception):
    pass


class Throughput(Protocol):
    mib_per_s: float
    records_per_s: float


@dataclass
class Measured:
    mib_per_s: float
    records_per_s: float


class Recorder:
    """Fills one broker's cells of the shared rows, and says so on the terminal."""

    def __init__(self, key: str, plan: Plan, rows: dict[str, Row],
                 progress: Callable[[str], None]) -> None:
        self.key = key
        self.plan = plan
        self.rows = rows
        self.progress = progress

    def cell(self, row_id: str) -> Cell:
        return self.rows[row_id].cells[self.key]

    def ok(self, row_id: str, value: float, text: str = "",
           spread: tuple[float, float] | None = None) -> None:
        row = self.rows[row_id]
        row.cells[self.key] = Cell(value, text, "ok", spread=spread)
        self.progress(f"  -> {row.label}: {row.cells[self.key].show(row.unit)}")

    def fail(self, row_ids: list[str], reason: str) -> None:
        for row_id in row_ids:
            if self.cell(row_id).status == "not run":
                self.rows[row_id].cells[self.key] = Cell(status="failed", reason=reason)
        self.progress(f"  !! {', '.join(row_ids)} failed: {reason}")

    def _topics(self, base: str) -> list[str]:
        """One fresh topic per repetition, so that each run writes to an empty log."""
        return [base if rep == 0 else f"{base}-{rep + 1}" for rep in range(self.plan.repeats)]

    def _throughput(self, row_id: str, results: list[Throughput]) -> None:
        """The median run; with repetitions, [lowest–highest] MiB/s after it."""
        ordered = sorted(results, key=lambda r: r.mib_per_s)
        middle = ordered[len(ordered) // 2]
        text = f"{fmt(middle.mib_per_s, 'MiB/s')} · {rate(middle.records_per_s)}"
        low, high = ordered[0].mib_per_s, ordered[-1].mib_per_s
        if len(ordered) > 1:
            digits = 0 if low >= 100 else 1
            text += f" [{low:,.{digits}f}–{high:,.{digits}f}]"
        self.ok(row_id, middle.mib_per_s, text, (low, high) if len(ordered) > 1 else None)


class BrokerRun(Recorder):
    """The workloads against one running broker; results go into the shared rows."""

    def __init__(self, key: str, broker: brokers.BenchBroker, plan: Plan, rows: dict[str, Row],
                 progress: Callable[[str], None], moldau_perf: bool) -> None:
        super().__init__(key, plan, rows, progress)
        self.broker = broker
        self.moldau_perf = moldau_perf
        self.produced: dict[str, int] = {}
        self.probes = 0

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def attempt(self, row_ids: list[str], what: str, body: Callable[[], None]) -> None:
        """Run one workload; a failure marks its rows failed and the run goes on."""
        self.progress(f"{self.broker.name}: {what}")
        if not self.broker.alive():
            self.fail(row_ids, f"broker not running ({self.broker.describe_exit()})")
            return
        try:
            body()
        except (Exception, SystemExit) as exc:  # SystemExit: confluent_throughput's stalls
            reason = f"{type(exc).__name__}: {exc}"
            if not self.broker.alive():
                reason += f"; broker died ({self.broker.describe_exit()})"
            self.fail(row_ids, reason)

    # ---------------------------------------------------------------- start-up

    def startup(self) -> None:
        self.progress(f"{self.broker.name}: start-up")
        seconds = self.broker.start()
        self.ok("startup", seconds)
        time.sleep(3)  # let start-up work (JIT, background threads) settle before "at rest"
        self.ok("rss_rest", procs.rss_mib(self.broker.pid))

    # ---------------------------------------------------------------- warm-up

    def warmup(self) -> None:
        """Unmeasured produce and fetch traffic first, so that neither broker is measured
        while a JIT (Kafka's) or caches (both) are still cold."""
        count = self.plan.warmup_records

        def body() -> None:
            create_topic(self.bootstrap, "warmup")
            tools.producer_perf(self.bootstrap, "warmup", count, 1024, {"acks": "1", **BATCHED})
            tools.consumer_perf(self.bootstrap, "warmup", count, "warmup")

        self.progress(f"{self.broker.name}: warm-up, {count:,} records produced and consumed "
                      "(not measured)")
        try:
            body()
        except Exception as exc:  # the workloads will fail on their own if this matters
            self.progress(f"  !! warm-up failed: {type(exc).__name__}: {exc}")

    # ---------------------------------------------------------------- produce

    def produce(self) -> None:
        plan = self.plan
        for size, count in ((1024, plan.produce_1k), (100, plan.produce_100)):
            tag = "1k" if size == 1024 else "100"
            for acks in ("1", "all"):
                row_id = f"p{tag}_a{acks}"
                ids = [row_id, "rss_load"] if row_id == "p1k_a1" else [row_id]
                self.attempt(ids, f"produce {size} B acks={acks} (ProducerPerformance)",
                             lambda r=row_id, s=size, c=count, a=acks: self._perf(r, s, c, a))
        self.attempt(["p1k_rdk"], "produce 1 KiB acks=1 (librdkafka)", self._rdkafka_produce)
        if self.moldau_perf:
            self.attempt(["p1k_mperf"], "produce 1 KiB acks=1 (moldau perf produce)",
                         self._moldau_perf)

    def _perf(self, row_id: str, size: int, count: int, acks: str) -> None:
        topics = self._topics(row_id.replace("_", "-"))
        results: list[Throughput] = []
        with procs.RssSampler(self.broker.pid) as sampler:
            for topic in topics:
                create_topic(self.bootstrap, topic)
                results.append(tools.producer_perf(self.bootstrap, topic, count, size,
                                                   {"acks": acks, **BATCHED}))
                check_count(self.bootstrap, topic, 1, count)
                self.produced[topic] = count
        self._throughput(row_id, results)
        if row_id == "p1k_a1":
            self.ok("rss_load", sampler.peak)

    def transactions(self) -> None:
        written: list[str] = []
        self.attempt(["p1k_txn"], "transactional produce 1 KiB (ProducerPerformance)",
                     lambda: self._transactional_perf(written))
        if written:
            self.attempt(["c_txn"], "read_committed consume 1 KiB (ConsumerPerformance)",
                         lambda: self._read_committed(written))

    def _transactional_perf(self, written: list[str]) -> None:
        count = self.plan.client_records
        results: list[Throughput] = []
        for topic in self._topics("p1k-txn"):
            create_topic(self.bootstrap, topic)
            results.append(tools.producer_perf(
                self.bootstrap, topic, count, 1024, BATCHED,
                options=["--transactional-id", f"{topic}-id",
                         "--transaction-duration-ms", str(TRANSACTION_MS)]))
            # Commit markers take offsets too: the read_committed row checks the count.
            self.produced[topic] = count
            written.append(topic)
        self._throughput("p1k_txn", results)

    def _read_committed(self, topics: list[str]) -> None:
        count = self.plan.client_records
        results: list[Throughput] = []
        for index, topic in enumerate(topics):
            self._read_log_files(topic)
            results.append(tools.consumer_perf(
                self.bootstrap, topic, count, f"c-txn-{index}",
                config={"isolation.level": "read_committed"}))
        self._throughput("c_txn", results)

    def _rdkafka_produce(self) -> None:
        count = self.plan.client_records
        results: list[Throughput] = []
        for topic in self._topics("p1k-rdk"):
            create_topic(self.bootstrap, topic)
            elapsed = confluent_throughput.produce(self.bootstrap, topic, count, 1024)
            check_count(self.bootstrap, topic, 1, count)
            results.append(Measured(count * 1024 / elapsed / MIB, count / elapsed))
        self._throughput("p1k_rdk", results)

    def _moldau_perf(self) -> None:
        count = self.plan.client_records
        results: list[Throughput] = []
        for topic in self._topics("p1k-mperf"):
            create_topic(self.bootstrap, topic)
            results.append(tools.moldau_perf(self.bootstrap, topic, count, 1024,
                                             {"acks": "1", **BATCHED}))
            check_count(self.bootstrap, topic, 1, count)
        self._throughput("p1k_mperf", results)

    # ---------------------------------------------------------------- consume

    def _source_topic(self) -> tuple[str, int]:
        """The 1 KiB topic of the produce workload, written now if that workload did not run."""
        topic, count = "p1k-a1", self.plan.produce_1k
        if topic not in self.produced:
            self.progress(f"{self.broker.name}: writing {count:,} records to read back")
            create_topic(self.bootstrap, topic)
            tools.producer_perf(self.bootstrap, topic, count, 1024, {"acks": "1", **BATCHED})
            check_count(self.bootstrap, topic, 1, count)
            self.produced[topic] = count
        return topic, count

    def consume(self) -> None:
        source: list[tuple[str, int]] = []
        consume_rows = [f"c_{cache}{suffix}" for cache in ("hot", "cold")
                        for suffix, _name, _setting in CONSUMERS]
        self.attempt(consume_rows, "data to consume",
                     lambda: source.append(self._source_topic()))
        if not source:
            return
        topic, count = source[0]

        def java(group: str) -> Throughput:
            # A new group each time: no committed offset, so it reads from the beginning.
            return tools.consumer_perf(self.bootstrap, topic, count, group)

        def rdkafka(_group: str) -> Throughput:
            elapsed = confluent_throughput.consume(self.bootstrap, topic, count)
            return Measured(count * 1024 / elapsed / MIB, count / elapsed)

        def measure(row_id: str, consumer: Callable[[str], Throughput], cold: bool) -> None:
            results = []
            for rep in range(self.plan.repeats):
                if cold:
                    why = machine.drop_caches()
                    if why is not None:  # the machine does not allow it: not a failure
                        self.rows[row_id].cells[self.key] = Cell(status="n/a", reason=why)
                        return
                else:
                    self._read_log_files(topic)  # the page cache holds every segment
                results.append(consumer(f"{row_id}-{rep}"))
            self._throughput(row_id, results)

        def kcat(_group: str) -> Throughput:
            started = time.monotonic()
            code, _out, err = procs.run(
                [KCAT, "-C", "-b", self.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
                 "-c", str(count), "-e", "-q", "-X", "max.partition.fetch.bytes=10485760"],
                timeout=600, stdout=subprocess.DEVNULL)
            elapsed = time.monotonic() - started
            if code != 0:
                raise WorkloadFailed(f"kcat exited {code}: {procs.tail(err)}")
            return Measured(count * 1024 / elapsed / MIB, count / elapsed)

        def raw(group: str) -> Throughput:
            passes = 1 if group.startswith("c_cold") else RAW_PASSES
            code, out, err = procs.run(
                [sys.executable, "-m", "bench.raw_fetch", self.bootstrap, topic, str(count),
                 str(passes)], timeout=600)
            if code != 0:
                raise WorkloadFailed(f"the Fetch reader exited {code}: {procs.tail(err)}")
            received, elapsed = (float(v) for v in out.split())
            if received < count * passes * 1024:
                raise WorkloadFailed(f"the Fetch reader got only {received:,.0f} bytes")
            return Measured(count * passes * 1024 / elapsed / MIB, count * passes / elapsed)

        consumers = {"": java, "_rdk": rdkafka, "_kcat": kcat, "_raw": raw}
        for cache in ("hot", "cold"):
            for suffix, name, _setting in CONSUMERS:
                row_id = f"c_{cache}{suffix}"
                if suffix == "_kcat" and KCAT is None:
                    self.rows[row_id].cells[self.key] = Cell(status="n/a",
                                                             reason="kcat not installed")
                    continue
                self.attempt([row_id], f"consume, {cache} cache ({name})",
                             lambda r=row_id, c=consumers[suffix], k=cache == "cold":
                             measure(r, c, k))

    def _read_log_files(self, topic: str) -> None:
        for path in (self.broker.log_dir / f"{topic}-0").glob("*"):
            with open(path, "rb") as file:
                while file.read(MIB):
                    pass

    # ---------------------------------------------------------------- latency

    def latency(self) -> None:
        self.attempt(["lat_p50", "lat_p99", "lat_p999"],
                     f"end-to-end latency at {self.plan.latency_rate} msg/s (librdkafka pair)",
                     self._latency_pair)
        self.attempt(["e2e"], "end-to-end latency, one in flight (EndToEndLatency)",
                     self._end_to_end)

    def _latency_pair(self) -> None:
        plan = self.plan
        topic = "latency"
        # A JVM reaches its steady state only after its JIT has seen the hot paths for a
        # while, so the first seconds are dropped (for both brokers alike).
        skip = plan.latency_rate * plan.latency_warmup
        count = skip + plan.latency_rate * plan.latency_seconds
        runs = []
        for rep in range(plan.repeats):
            run = self._latency_run(f"{topic}-{rep}", count, skip)
            self.progress(f"  run {rep + 1}/{plan.repeats}: p50 {run['p50']:.2f}, p99 "
                          f"{run['p99']:.2f}, p99.9 {run['p999']:.2f}, max {run['max']:.1f} ms")
            runs.append(run)
        # The run with the median p99, reported whole (its p50 and p99.9 with it).
        runs.sort(key=lambda r: r["p99"])
        result = runs[len(runs) // 2]
        spread = ""
        if len(runs) > 1:
            spread = f" [{runs[0]['p99']:.2f}–{runs[-1]['p99']:.2f}]"
        self.ok("lat_p50", result["p50"])
        self.ok("lat_p99", result["p99"], f"{fmt(result['p99'], 'ms')}{spread}",
                (runs[0]["p99"], runs[-1]["p99"]) if len(runs) > 1 else None)
        self.ok("lat_p999", result["p999"])

    def _latency_run(self, topic: str, count: int, skip: int) -> dict:
        plan = self.plan
        create_topic(self.bootstrap, topic)
        pair = [sys.executable, "-m", "bench.latency_pair"]
        common = ["--bootstrap", self.bootstrap, "--topic", topic, "--count", str(count)]
        consumer = procs.spawn([*pair, "consume", *common, "--skip", str(skip)],
                               stderr=subprocess.STDOUT)
        try:
            first = procs.read_line(consumer, timeout=60)
            if first.strip() != b"ready":
                raise WorkloadFailed(f"latency consumer not ready: {procs.tail(first)}")
            code, out, err = procs.run(
                [*pair, "produce", *common, "--rate", str(plan.latency_rate), "--size", "1024"],
                timeout=count / plan.latency_rate * 3 + 60)
            if code != 0:
                raise WorkloadFailed(f"latency producer exited {code}: {procs.tail(out + err)}")
            out_bytes, _ = consumer.communicate(timeout=60)
        finally:
            procs.kill(consumer)
        result = json.loads(out_bytes.decode().strip().splitlines()[-1])
        if result["received"] != count:
            raise WorkloadFailed(f"consumer saw {result['received']} of {count} records")
        return result

    def _end_to_end(self) -> None:
        create_topic(self.bootstrap, "e2e")
        result = tools.end_to_end_latency(self.bootstrap, "e2e", self.plan.e2e_records, 1024)
        self.ok("e2e", result.p99_ms, f"{result.p50_ms:g} / {result.p99_ms:g} / "
                f"{result.p999_ms:g} ms")

    # ---------------------------------------------------------------- connections

    def connections(self) -> None:
        self.attempt(["conn_open", "conn_rss", "conn_lat"],
                     f"{self.plan.connections:,} idle connections", self._connections)

    def _connections(self) -> None:
        topic = "rtt"
        create_topic(self.bootstrap, topic)
        before = produce_round_trips(self.bootstrap, topic)
        rss_before = procs.rss_mib(self.broker.pid)
        socks: list[socket.socket] = []
        try:
            started = time.monotonic()
            for index in range(self.plan.connections):
                sock = socket.create_connection(("127.0.0.1", self.broker.port), timeout=10)
                socks.append(sock)
                sock.sendall(procs.api_versions_request(index))
                procs.check_api_versions(procs.read_frame(sock), index)
            opened = time.monotonic() - started
            time.sleep(1)  # let the broker's per-connection state settle before sampling
            rss_after = procs.rss_mib(self.broker.pid)
            during = produce_round_trips(self.bootstrap, topic)
            # Are they all still served, or did the broker drop some while idle?
            for index, sock in enumerate(socks):
                sock.sendall(procs.api_versions_request(10_000 + index))
            answered = 0
            for index, sock in enumerate(socks):
                try:
                    procs.check_api_versions(procs.read_frame(sock), 10_000 + index)
                    answered += 1
                except OSError:
                    pass
        finally:
            for sock in socks:
                sock.close()
        total = self.plan.connections
        self.ok("conn_open", opened, f"{fmt(opened, 's')} ({answered:,}/{total:,} still "
                "answering afterwards)")
        self.ok("conn_rss", rss_after, f"{fmt(rss_after, 'MiB')} "
                f"(+{rss_after - rss_before:.1f} MiB)")
        self.ok("conn_lat", pct(during, 0.99),
                f"{pct(during, 0.5):.2f} / {pct(during, 0.99):.2f} ms (before: "
                f"{pct(before, 0.5):.2f} / {pct(before, 0.99):.2f})")
        if answered != total:
            raise WorkloadFailed(f"only {answered} of {total} idle connections still answered")

    # ---------------------------------------------------------------- partitions

    def partitions(self) -> None:
        self.attempt(["part_create", "part_produce"],
                     f"create a topic with {self.plan.partitions:,} partitions", self._create_many)
        if self.cell("part_create").status == "ok":
            self.attempt(["part_produce"],
                         f"produce across {self.plan.partitions:,} partitions",
                         self._produce_many)

    def _create_many(self) -> None:
        partitions = self.plan.partitions
        started = time.monotonic()
        create_topic(self.bootstrap, "many", partitions, timeout=300)
        leaders = time.monotonic() - started
        # A leader in Metadata does not yet mean the broker has the log open (Kafka answers
        # NOT_LEADER_OR_FOLLOWER for a while): done when every partition took a record.
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "1", "linger.ms": 0,
                             "retry.backoff.ms": 10, "retry.backoff.max.ms": 50, **QUIET})
        failed: list[str] = []
        for partition in range(partitions):
            producer.produce("many", b"probe", partition=partition, on_delivery=lambda err, _m:
                             failed.append(str(err)) if err is not None else None)
            producer.poll(0)
        if producer.flush(300) or failed:
            raise WorkloadFailed(f"probe records not all written: {failed[:3]}")
        writable = time.monotonic() - started
        self.probes = partitions
        self.ok("part_create", writable, f"{fmt(writable, 's')} (leaders in Metadata after "
                f"{fmt(leaders, 's')})")

    def _produce_many(self) -> None:
        count, partitions = self.plan.partition_records, self.plan.partitions
        result = tools.producer_perf(self.bootstrap, "many", count, 1024, {
            "acks": "1", "batch.size": "16384", "linger.ms": "5",
            "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})
        written = check_count(self.bootstrap, "many", partitions, count + self.probes)
        self.ok("part_produce", result.mib_per_s,
                f"{fmt(result.mib_per_s, 'MiB/s')} · {rate(result.records_per_s)}, "
                f"{written:,}/{partitions:,} partitions written")

    # ---------------------------------------------------------------- recovery

    def recovery(self) -> None:
        self.attempt(["rec_api", "rec_data"], "restart recovery after kill -9", self._recovery)

    def _recovery(self) -> None:
        target = self.plan.recovery_bytes
        have = brokers.log_bytes(self.broker.log_dir)
        if have < target:
            count = (target - have) // KIB + 1
            self.progress(f"{self.broker.name}: writing {count:,} more records to reach "
                          f"{size_text(target)} of log")
            create_topic(self.bootstrap, "fill")
            tools.producer_perf(self.bootstrap, "fill", count, 1024, {"acks": "1", **BATCHED})
        expected = end_offsets(self.bootstrap, all_partitions(self.bootstrap))
        held = brokers.log_bytes(self.broker.log_dir)
        self.progress(f"{self.broker.name}: kill -9 with {size_text(held)} of log in "
                      f"{len(expected):,} partitions, then restart")
        self.broker.kill9()
        brokers.wait_gone(self.broker)
        started = time.monotonic()
        api = self.broker.start()
        deadline = started + 600
        while True:
            try:
                if end_offsets(self.bootstrap, list(expected), timeout=10) == expected:
                    break
            except (KafkaException, TimeoutError):
                pass  # partitions still loading: not an answer yet
            if time.monotonic() > deadline:
                raise WorkloadFailed("end offsets not back within 600 s of the restart")
            time.sleep(0.02)
        data = time.monotonic() - started
        note = size_text(held)
        self.ok("rec_api", api, f"{fmt(api, 's')} ({note})")
        self.ok("rec_data", data, f"{fmt(data, 's')} ({note})")
