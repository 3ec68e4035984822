"""The RF 3 rows: workloads against a three-node cluster of one broker at a time.

Every topic has three replicas and min.insync.replicas=2. The throughput rows run
ProducerPerformance with acks=all, as the RF 1 rows do, and check the acknowledged count with
ListOffsets. The failover row keeps a librdkafka producer writing while the partition's leader
is killed with SIGKILL; the controlled-shutdown row sends SIGTERM to the broker leading every
partition of a topic and polls Metadata from another broker. In both, the broker chosen is
not the active controller, so that what is timed is the partition leadership moving, not
also a new metadata quorum leader taking over.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from bench import clusters, tools
from bench.report import Row, fmt
from bench.workloads import (
    BATCHED,
    FAILOVER_RATE,
    FAILOVER_SIZE,
    QUIET,
    RF3_TOPIC,
    SHUTDOWN_PARTITIONS,
    Plan,
    Recorder,
    Throughput,
    WorkloadFailed,
    admin_client,
    check_count,
)
from moldau.cluster.probe import ClusterView, PartitionState, ProbeError

TOPIC_TIMEOUT = 60.0
MOVE_TIMEOUT = 120.0  # a leadership that has not moved by then will not


class ClusterRun(Recorder):
    """Starts one kind's three-node cluster, fills the RF 3 rows, kills the cluster."""

    def __init__(self, key: str, cluster: clusters.BenchCluster, plan: Plan,
                 rows: dict[str, Row], progress: Callable[[str], None]) -> None:
        super().__init__(key, plan, rows, progress)
        self.cluster = cluster
        self.name = f"{cluster.name} (3 nodes)"

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def attempt(self, row_ids: list[str], what: str, body: Callable[[], None]) -> None:
        self.progress(f"{self.name}: {what}")
        down = [i for i in clusters.NODE_IDS if not self.cluster.alive(i)]
        if down:
            self.fail(row_ids, f"nodes {down} not running")
            return
        try:
            body()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            down = [i for i in clusters.NODE_IDS if not self.cluster.alive(i)]
            if down:
                reason += f"; nodes {down} not running"
            self.fail(row_ids, reason)

    def run(self, row_ids: list[str]) -> None:
        self.progress(f"{self.name}: start-up")
        try:
            seconds = self.cluster.start()
        except Exception as exc:
            self.fail(row_ids, f"the cluster did not start: {exc}")
            return
        self.progress(f"  all 3 brokers registered after {seconds:.1f} s")
        self._warmup()
        for tag, size, count in (("1k", 1024, self.plan.rf3_1k), ("100", 100, self.plan.rf3_100)):
            row_id = f"p{tag}_rf3"
            if row_id in row_ids:
                self.attempt([row_id], f"produce {size} B acks=all, RF 3 (ProducerPerformance)",
                             lambda r=row_id, s=size, c=count: self._produce(r, s, c))
        # The controlled shutdown first: the broker it stops is started again afterwards,
        # while the broker killed for the failover stays dead until the cluster is killed.
        if "ctl_shutdown" in row_ids:
            self.attempt(["ctl_shutdown"], "controlled shutdown of a leader (SIGTERM)",
                         self._controlled_shutdown)
        if "failover" in row_ids:
            self.attempt(["failover"], "leader failover (kill -9 under acks=all produce)",
                         self._failover)

    # ---------------------------------------------------------------- topics

    def _create(self, topic: str, assignment: list[list[int]] | None = None) -> None:
        """A topic with three replicas per partition (one partition unless `assignment`
        places them), returned once every partition has a leader and three in sync."""
        admin = admin_client(self.bootstrap)
        partitions = len(assignment) if assignment else 1
        # librdkafka wants the partition count along with an assignment.
        new = (NewTopic(topic, partitions, replica_assignment=assignment, config=RF3_TOPIC)
               if assignment else NewTopic(topic, 1, clusters.SIZE, config=RF3_TOPIC))
        admin.create_topics([new], operation_timeout=TOPIC_TIMEOUT,
                            request_timeout=TOPIC_TIMEOUT)[topic].result(TOPIC_TIMEOUT)
        self._wait(topic, lambda view: _complete(view, topic, partitions),
                   f"{topic}: {partitions} partitions with a leader and 3 replicas in sync")

    def _wait(self, topic: str, done: Callable[[ClusterView], bool], what: str,
              ask: list[int] | None = None, timeout: float = TOPIC_TIMEOUT,
              pause: float = 0.05) -> ClusterView:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                view = self.cluster.metadata(ask)
                if done(view):
                    return view
                last = ", ".join(f"{p.partition}: leader {p.leader} isr {list(p.isr)}"
                                 for p in _partitions(view, topic)) or "topic not listed"
            except ProbeError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise WorkloadFailed(f"{what}: not so after {timeout:g} s ({last})")
            time.sleep(pause)

    # ---------------------------------------------------------------- throughput

    def _warmup(self) -> None:
        """Unmeasured acks=all traffic first, as for the single node: three fresh JVMs (or
        interpreters) are not measured while still cold."""
        count = self.plan.rf3_warmup
        self.progress(f"{self.name}: warm-up, {count:,} records of 1 KiB, acks=all, RF 3 "
                      "(not measured)")
        try:
            self._create("warmup-rf3")
            tools.producer_perf(self.bootstrap, "warmup-rf3", count, 1024,
                                {"acks": "all", **BATCHED})
        except Exception as exc:  # the workloads will fail on their own if this matters
            self.progress(f"  !! warm-up failed: {type(exc).__name__}: {exc}")

    def _produce(self, row_id: str, size: int, count: int) -> None:
        results: list[Throughput] = []
        for topic in self._topics(row_id.replace("_", "-")):
            self._create(topic)
            results.append(tools.producer_perf(self.bootstrap, topic, count, size,
                                               {"acks": "all", **BATCHED}))
            check_count(self.bootstrap, topic, 1, count)
        self._throughput(row_id, results)

    # ---------------------------------------------------------------- leadership moves

    def _pick_leader(self) -> tuple[int, list[int]]:
        """The lowest node id that is not the active controller, and the other two."""
        controller = self.cluster.active_controller()
        leader = min(i for i in clusters.NODE_IDS if i != controller)
        return leader, [i for i in clusters.NODE_IDS if i != leader]

    def _controlled_shutdown(self) -> None:
        topic = "shutdown"
        leader, others = self._pick_leader()
        # Every partition led by `leader`, the other two alternating as first follower, so
        # that the new leaderships can spread over both.
        assignment = [[leader, *(others if p % 2 == 0 else others[::-1])]
                      for p in range(SHUTDOWN_PARTITIONS)]
        self._create(topic, assignment)
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", **QUIET})
        for partition in range(SHUTDOWN_PARTITIONS):
            producer.produce(topic, b"x" * 100, partition=partition)
        if producer.flush(30):
            raise WorkloadFailed("records for the shutdown topic not acknowledged")
        self._wait(topic, lambda view: all(p.leader == leader
                                           for p in _partitions(view, topic)),
                   f"{topic}: node {leader} leading every partition")
        self.progress(f"  SIGTERM to node {leader}, leader of {SHUTDOWN_PARTITIONS} "
                      "partitions")
        started = time.monotonic()
        self.cluster.terminate(leader)
        view = self._wait(topic, lambda view: _moved(view, topic, leader, SHUTDOWN_PARTITIONS),
                          f"{topic}: leaderships away from node {leader}", ask=others,
                          timeout=MOVE_TIMEOUT, pause=0.005)
        moved = time.monotonic() - started
        if not self.cluster.wait_exit(leader, 60):
            self.cluster.kill9(leader)
            raise WorkloadFailed(f"node {leader} still running 60 s after SIGTERM")
        exited = time.monotonic() - started
        now = sorted({p.leader for p in _partitions(view, topic)})
        self.ok("ctl_shutdown", moved, f"{fmt(moved, 's')} (exited after {fmt(exited, 's')}; "
                f"now led by {'+'.join(map(str, now))})")
        self.progress(f"  starting node {leader} again")
        self.cluster.restart(leader)

    def _failover(self) -> None:
        topic = "failover"
        leader, followers = self._pick_leader()
        self._create(topic, [[leader, *followers]])
        writer = PacedProducer(self.bootstrap, topic, FAILOVER_RATE, FAILOVER_SIZE)
        with writer:
            writer.wait_acks(2 * FAILOVER_RATE, 30)  # two seconds of steady acks first
            self.progress(f"  kill -9 of node {leader}, leader of {topic}-0")
            writer.mark()
            started = time.monotonic()
            self.cluster.kill9(leader)
            # Also when a surviving broker's Metadata names the new leader, to tell the
            # broker's part from the client's.
            view = self._wait(topic, lambda view: _moved(view, topic, leader, 1),
                              f"{topic}: a leader other than node {leader}", ask=followers,
                              timeout=MOVE_TIMEOUT, pause=0.01)
            elected = time.monotonic() - started
            acked_at = writer.wait_watched(MOVE_TIMEOUT)
            writer.wait_acks(FAILOVER_RATE // 2, 30)  # keeps going on the new leader
        elapsed = acked_at - started
        if writer.failed:
            raise WorkloadFailed(f"{len(writer.failed)} records failed: {writer.failed[:3]}")
        if writer.acked != writer.sent:
            raise WorkloadFailed(f"{writer.acked} of {writer.sent} records acknowledged")
        check_count(self.bootstrap, topic, 1, writer.acked)
        [now] = [p.leader for p in _partitions(view, topic)]
        self.ok("failover", elapsed, f"{fmt(elapsed, 's')} (node {now} leader in Metadata "
                f"after {fmt(elected, 's')})")


def _partitions(view: ClusterView, topic: str) -> list[PartitionState]:
    return [p for p in view.partitions if p.topic == topic]


def _complete(view: ClusterView, topic: str, partitions: int) -> bool:
    found = _partitions(view, topic)
    return len(found) == partitions and all(
        p.leader >= 0 and len(p.replicas) == clusters.SIZE and len(p.isr) == clusters.SIZE
        for p in found)


def _moved(view: ClusterView, topic: str, old: int, partitions: int) -> bool:
    found = _partitions(view, topic)
    return len(found) == partitions and all(p.leader >= 0 and p.leader != old for p in found)


class PacedProducer:
    """An idempotent acks=all librdkafka producer sending `rate` records a second from a
    thread. Each value starts with its sequence number, so the delivery report says which
    record it was: the time of the first acknowledgment of a record sent after some moment."""

    def __init__(self, bootstrap: str, topic: str, rate: int, size: int) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "message.timeout.ms": 300_000, **QUIET})
        self.topic = topic
        self.rate = rate
        self.padding = b"x" * (size - 8)
        self.sent = 0
        self.acked = 0
        self.failed: list[str] = []
        self._watch: int | None = None  # records numbered from here on are watched for
        self.watched_ack: float | None = None  # when the first of them was acknowledged
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: object, msg: object) -> None:
        now = time.monotonic()
        with self._cond:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked += 1
                number = struct.unpack(">q", msg.value()[:8])[0]  # type: ignore[attr-defined]
                if (self._watch is not None and number >= self._watch
                        and self.watched_ack is None):
                    self.watched_ack = now
            self._cond.notify_all()

    def _run(self) -> None:
        interval = 1 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= due:
                with self._cond:
                    number = self.sent
                    self.sent += 1
                self.producer.produce(self.topic, struct.pack(">q", number) + self.padding,
                                      partition=0, on_delivery=self._delivered)
                due += interval
                if due < now - 1:  # fell behind by a second: do not burst to catch up
                    due = now
            self.producer.poll(max(0.0, min(due - time.monotonic(), 0.001)))

    def __enter__(self) -> PacedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(120)

    def wait_acks(self, count: int, timeout: float) -> None:
        """Until `count` more records are acknowledged."""
        with self._cond:
            target = self.acked + count
            if not self._cond.wait_for(lambda: self.acked >= target or bool(self.failed),
                                       timeout):
                raise WorkloadFailed(f"{self.acked} of {target} records acknowledged after "
                                     f"{timeout:g} s")
            if self.failed:
                raise WorkloadFailed(f"produce failed: {self.failed[:3]}")

    def mark(self) -> None:
        """From now on, watch for the first acknowledgment of a record sent from now on."""
        with self._cond:
            self._watch = self.sent
            self.watched_ack = None

    def wait_watched(self, timeout: float) -> float:
        """When the first record sent after `mark()` was acknowledged."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.watched_ack is not None
                                       or bool(self.failed), timeout):
                raise WorkloadFailed(f"no record sent after the kill acknowledged within "
                                     f"{timeout:g} s")
            if self.failed:
                raise WorkloadFailed(f"produce failed: {self.failed[:3]}")
            assert self.watched_ack is not None
            return self.watched_ack
