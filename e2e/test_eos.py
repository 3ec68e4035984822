"""Exactly-once consume-transform-produce under kill -9, on a 3-node cluster.

A processor process (e2e/eos_processor.py: librdkafka's transactional producer and a
read_committed consumer in a group, offsets sent to the transaction) copies topic A to topic
B (both replication factor 3, min.insync.replicas 2) while a seeded schedule kills with
SIGKILL, at random times, the processor (started again at once), the broker coordinating
its transactional id and the leader of an output partition (both started again after a
while). Afterwards a read_committed consumer of B must see every record of A exactly once,
in input order per partition, and nothing aborted.

A few schedules run in the normal suite; `EOS_SCHEDULES=20` (or `make eos-soak`) runs more,
`EOS_SEED=n` one of them. Each prints a line "eos seed=..." with what it did.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.conftest import FAST_FAILOVER
from e2e.support import (
    REPO_ROOT,
    ck_consumer,
    ck_producer,
    ck_values,
    kp_consumer,
    unique,
    wait_until,
)
from e2e.test_cluster_failover import create_topic, partition_state
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC
from moldau.cluster.launcher import LocalCluster, free_base_port

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 3
RECORDS_PER_PARTITION = 120
STATE_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default
WINDOW_S = 12.0  # the kills fall in the first seconds of processing
PAUSE_S = 0.2  # between the processor's transactions, so the run outlasts the window
TIMEOUT = 180.0
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
KINDS = ("processor", "coordinator", "leader")
# Fast failover, but with Kafka's session and lag timeouts: on a loaded machine 3 s and 4 s
# fence and drop live brokers over and over, and ISRs of 1 stall min.insync.replicas 2.
CLUSTER_OVERRIDES = {**FAST_FAILOVER, "broker.session.timeout.ms": 9000,
                     "broker.heartbeat.interval.ms": 1000, "replica.lag.time.max.ms": 30000}


def seeds() -> list[int]:
    if os.environ.get("EOS_SEED"):
        return [int(os.environ["EOS_SEED"])]
    return list(range(1, int(os.environ.get("EOS_SCHEDULES", "2")) + 1))


@dataclass(frozen=True)
class Kill:
    at_s: float  # after the processor first started
    kind: str  # one of KINDS
    partition: int  # the output partition whose leader dies ("leader")
    down_s: float  # how long a killed broker stays down


def schedule(seed: int) -> list[Kill]:
    """Each kind of kill once, in a seeded order at seeded times."""
    rng = random.Random(seed)
    kinds = rng.sample(KINDS, len(KINDS))
    times = sorted(rng.uniform(0.5, WINDOW_S) for _ in kinds)
    return [Kill(at, kind, rng.randrange(PARTITIONS), rng.uniform(0.5, 3.0))
            for at, kind in zip(times, kinds, strict=True)]


class Processor:
    """The processor's process, started again whenever it is killed or exits."""

    def __init__(self, args: list[str], workdir: Path) -> None:
        self.args = args
        self.stdout = workdir / "processor.out"
        self.stderr = workdir / "processor.err"
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.stdout, "ab") as out, open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "e2e.eos_processor", *self.args], cwd=REPO_ROOT,
                stdout=out, stderr=err, start_new_session=True)
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def keep_running(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            self.start()

    @property
    def transactions(self) -> int:
        return self.stdout.read_text().count('"committed"')


@pytest.fixture(scope="module")
def eos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("eos") / "cluster", brokers=3,
                         base_port=free_base_port(3), overrides=CLUSTER_OVERRIDES)
    local.start(timeout=60)
    try:
        yield local
    finally:
        local.stop(timeout=30)


def produce_input(bootstrap: str, topic: str) -> None:
    producer = ck_producer(bootstrap, acks="all")
    for sequence in range(RECORDS_PER_PARTITION):
        for partition in range(PARTITIONS):
            producer.produce(topic, f"{partition}:{sequence}".encode(),
                             f"key-{partition}".encode(), partition=partition)
    assert producer.flush(60) == 0


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[int] | None:
    from confluent_kafka import KafkaException, TopicPartition

    consumer = ck_consumer(bootstrap, **{"group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=10)
        return [tp.offset for tp in found]
    except KafkaException:
        return None  # pending offsets, or the coordinator moving
    finally:
        consumer.close()


def unstable_committed(bootstrap: str, group: str, topic: str) -> list[int | None]:
    """What kafka-python reads (OffsetFetch without require_stable): the last committed."""
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap, group_id=group)
    try:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)]
    finally:
        consumer.close(autocommit=False)


def kill_broker(cluster: LocalCluster, node_id: int, kill: Kill, sink: str) -> None:
    cluster.kill(node_id)
    time.sleep(kill.down_s)
    cluster.start_node(node_id, timeout=60)
    # The next broker kill finds every replica back in the ISR, as min.insync.replicas 2
    # with one broker down needs.
    def states() -> list[tuple[int, list[int]]]:
        return [partition_state(cluster, sink, p) for p in range(PARTITIONS)]
    try:
        wait_until(lambda: all(len(isr) == 3 for _, isr in states()), TIMEOUT,
                   f"{sink}'s full ISRs")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: (leader, isr) {states()}; broker {node_id} "
                             f"restarted:\n{cluster.node(node_id).tail(40)}") from None


def run_schedule(cluster: LocalCluster, processor: Processor, kills: list[Kill], sink: str,
                 transactional_id: str) -> list[str]:
    done: list[str] = []
    started = time.monotonic()
    for kill in kills:
        while time.monotonic() - started < kill.at_s:
            processor.keep_running()
            time.sleep(0.05)
        if kill.kind == "processor":
            processor.kill()
            processor.start()
            done.append(f"processor@{kill.at_s:.1f}s")
            continue
        if kill.kind == "coordinator":
            node_id = partition_state(cluster, TRANSACTION_TOPIC, partition_for(
                transactional_id, STATE_PARTITIONS))[0]
        else:
            node_id = partition_state(cluster, sink, kill.partition)[0]
        if node_id < 0:
            continue  # no leader just now: nothing to kill
        kill_broker(cluster, node_id, kill, sink)
        done.append(f"{kill.kind}:broker-{node_id}@{kill.at_s:.1f}s")
    done.append(f"schedule-done@{time.monotonic() - started:.1f}s")
    return done


@pytest.mark.parametrize("seed", seeds())
def test_exactly_once_through_kills(eos_cluster: LocalCluster, tmp_path: Path,
                                    seed: int) -> None:
    cluster = eos_cluster
    cluster.start_stopped_nodes(timeout=60)
    bootstrap = cluster.bootstrap_servers
    source, sink = unique(f"eos-in-{seed}"), unique(f"eos-out-{seed}")
    group, transactional_id = unique(f"eos-group-{seed}"), unique(f"eos-txn-{seed}")
    for topic in (source, sink):
        create_topic(bootstrap, topic, PARTITIONS, 3, TOPIC_CONFIGS)
    produce_input(bootstrap, source)

    processor = Processor([bootstrap, source, sink, group, transactional_id, str(PAUSE_S)],
                          tmp_path)
    started = time.monotonic()
    try:
        kills = run_schedule(cluster, processor, schedule(seed), sink, transactional_id)

        last: list[list[int] | None] = [None]

        def finished() -> bool:
            processor.keep_running()
            last[0] = committed_offsets(bootstrap, group, source)
            return last[0] == [RECORDS_PER_PARTITION] * PARTITIONS
        try:
            wait_until(finished, TIMEOUT, "the processor to commit every input offset")
        except AssertionError as exc:
            raise AssertionError(
                f"seed {seed}: {exc}; stable committed {last[0]}, last committed (not "
                f"stable) {unstable_committed(bootstrap, group, source)}, "
                f"{processor.transactions} transactions; {kills}") from None
        kills.append(f"all-committed@{time.monotonic() - started:.1f}s")
    finally:
        processor.kill()

    committed = ck_values(bootstrap, sink, PARTITIONS, "read_committed", TIMEOUT)
    everything = ck_values(bootstrap, sink, PARTITIONS, "read_uncommitted", TIMEOUT)
    aborted = sum(map(len, everything.values())) - sum(map(len, committed.values()))
    print(f"eos seed={seed} records={PARTITIONS * RECORDS_PER_PARTITION} kills={kills} "
          f"processor_starts={processor.starts} transactions={processor.transactions} "
          f"aborted_records_in_log={aborted}")
    for partition in range(PARTITIONS):
        expected = [f"{partition}:{n}".encode() for n in range(RECORDS_PER_PARTITION)]
        assert committed[partition] == expected, (
            f"seed {seed}, {sink}-{partition}: {len(committed[partition])} records, "
            f"first difference at {first_difference(committed[partition], expected)}")


def first_difference(got: list[bytes], expected: list[bytes]) -> str:
    for index, (seen, wanted) in enumerate(zip(got, expected, strict=False)):
        if seen != wanted:
            return f"#{index}: {seen!r} instead of {wanted!r}"
    return f"#{min(len(got), len(expected))}: the shorter list ends"
