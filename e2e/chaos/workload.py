"""Jepsen's Kafka queue workload, driven by librdkafka from the root namespace.

Producers (acks=all, idempotent) send unique values `p<producer>-<seq>` to partition
`seq % partitions` at a steady rate and record each send's outcome and, from librdkafka's
`eos` debug log, each bump of their producer epoch; consumers in one group
poll and record what they got, with a generation bumped on every assignment change. After
the faults are healed, `final_read` reads every partition from the beginning,
`in_sync_replicas` asks each partition's leader for its ISR, and `stored_replicas` decodes
the segment files of every replica (of a stopped cluster) for the replica check, for the
producer id and epoch that wrote each record read twice, and for how far the stored batches
reach where a broker refused a producer's batch as out of order. Everything
goes into a checker.History.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from e2e.chaos.checker import (
    FAIL,
    INFO,
    OK,
    EpochBump,
    History,
    Poll,
    Send,
    SequenceEnd,
    SequenceGap,
    Writer,
    duplicated,
)
from e2e.chaos.clients import ClientThreads, create_replicated_topic
from e2e.support import ck_consume_all, segment_batches, wait_until
from moldau.cluster.launcher import LocalCluster
from moldau.cluster.probe import ClusterView, ProbeError
from moldau.records.batch import NO_SEQUENCE
from moldau.records.codec import decode_records

MESSAGE_TIMEOUT_MS = 30000  # a send not acknowledged by then is indeterminate
ISR_READ_TIMEOUT = 30.0

# librdkafka's `eos` debug lines around an epoch bump: a batch refused as out of order behind
# a failed one (its partition, epoch and base sequence), the reason, then the new epoch.
_SKIPPED = re.compile(r"ProduceRequest for \S+ \[(\d+)\] with \d+ message\(s\) failed due to "
                      r"skipped sequence numbers \(PID\{Id:\d+,Epoch:(\d+)\}, base seq (\d+) ")
_BUMP_REASON = re.compile(r"epoch bump for \d+ partition\(s\)[^:]*: (.*)$")
_BUMPED = re.compile(r"bumped epoch to PID\{Id:(\d+),Epoch:(\d+)\}")


class StoredRecord(NamedTuple):
    offset: int
    value: str
    producer_id: int
    epoch: int
    sequence: int  # -1 when the batch has none


class EpochBumpLog(logging.Handler):
    """Turns one producer's librdkafka `eos` debug log into EpochBumps."""

    def __init__(self, producer: int, record: Callable[[EpochBump], None]) -> None:
        super().__init__(logging.DEBUG)
        self.producer, self.record = producer, record
        self.reasons: list[str] = []
        self.gaps: list[SequenceGap] = []

    def emit(self, entry: logging.LogRecord) -> None:
        line = entry.getMessage()
        if (skipped := _SKIPPED.search(line)) is not None:
            self.gaps.append(SequenceGap(*map(int, skipped.groups())))
        elif (found := _BUMP_REASON.search(line)) is not None:
            if found.group(1) not in self.reasons:
                self.reasons.append(found.group(1))
        elif (bumped := _BUMPED.search(line)) is not None:
            self.record(EpochBump(self.producer, int(bumped.group(1)), int(bumped.group(2)),
                                  tuple(self.reasons), tuple(self.gaps)))
            self.reasons, self.gaps = [], []


@dataclass
class QueueWorkload(ClientThreads):
    bootstrap: str
    topic: str
    partitions: int = 3
    producers: int = 2
    consumers: int = 2
    rate: float = 50.0  # sends per second per producer
    history: History = field(default_factory=History)

    def create_topic(self) -> None:
        create_replicated_topic(self.bootstrap, self.topic, self.partitions)

    def start(self) -> QueueWorkload:
        for index in range(self.producers):
            self._spawn(self._produce, index, name=f"producer-{index}")
        for index in range(self.consumers):
            self._spawn(self._consume, index, name=f"consumer-{index}")
        return self

    def stop(self, timeout: float = MESSAGE_TIMEOUT_MS / 1000 + 60) -> None:
        super().stop(timeout)

    def acknowledged(self) -> int:
        with self._lock:
            return sum(1 for send in self.history.sends if send.status == OK)

    def _record(self, event: Send | Poll | EpochBump) -> None:
        with self._lock:
            if isinstance(event, Send):
                self.history.sends.append(event)
            elif isinstance(event, Poll):
                self.history.polls.append(event)
            else:
                self.history.epoch_bumps.append(event)

    # ------------------------------------------------------------------ producers

    def _produce(self, producer_id: int) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: self.errors.append(f"producer {producer_id}: {err}"),
            "debug": "eos"}, logger=self._bump_logger(producer_id))
        started = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            ahead = started + seq / self.rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
                continue
            value, partition = f"p{producer_id}-{seq}", seq % self.partitions
            try:
                producer.produce(self.topic, value.encode(), partition=partition,
                                 on_delivery=self._delivered(producer_id, seq, value,
                                                             partition))
            except (BufferError, KafkaException) as exc:  # never queued: not written
                self._record(Send(producer_id, seq, value, partition, FAIL, error=str(exc)))
                producer.poll(0.1)
            seq += 1
            producer.poll(0)
        producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10)

    def _bump_logger(self, producer_id: int) -> logging.Logger:
        logger = logging.getLogger(f"e2e.chaos.librdkafka.{self.topic}.producer{producer_id}")
        logger.handlers[:] = [EpochBumpLog(producer_id, self._record)]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # the debug log is for the epoch bumps only
        return logger

    def _delivered(self, producer_id: int, seq: int, value: str, partition: int):
        def report(err: KafkaError | None, msg: object) -> None:
            if err is None:
                # librdkafka may report a delivery without its offset (None).
                offset = msg.offset()  # type: ignore[attr-defined]
                self._record(Send(producer_id, seq, value, partition, OK,
                                  -1 if offset is None else offset))
            else:  # a timed-out or failed batch may still have been stored
                self._record(Send(producer_id, seq, value, partition, INFO, error=str(err)))
        return report

    # ------------------------------------------------------------------ consumers

    def _consume(self, consumer_id: int) -> None:
        generation = [0]

        def reassigned(_consumer: Consumer, _partitions: list) -> None:
            generation[0] += 1

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-readers",
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 500, "session.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: self.errors.append(f"consumer {consumer_id}: {err}")})
        consumer.subscribe([self.topic], on_assign=reassigned, on_revoke=reassigned,
                           on_lost=reassigned)
        try:
            while not self._stop.is_set():
                records = tuple((m.partition(), m.offset(), m.value().decode())
                                for m in consumer.consume(200, timeout=0.2)
                                if m.error() is None)
                if records:
                    self._record(Poll(consumer_id, generation[0], records))
        finally:
            consumer.close()

    # ------------------------------------------------------------------ after healing

    def final_read(self) -> dict[int, int]:
        """Read every partition from the beginning into the history; return the high
        watermarks."""
        records = ck_consume_all(self.bootstrap, self.topic, range(self.partitions))
        for partition in range(self.partitions):
            self.history.final[partition] = sorted(
                (rec.offset, rec.value.decode()) for rec in records
                if rec.partition == partition)
        return {p: (self.history.final[p][-1][0] + 1 if self.history.final[p] else 0)
                for p in range(self.partitions)}

    def in_sync_replicas(self, cluster: LocalCluster,
                         timeout: float = ISR_READ_TIMEOUT) -> dict[int, tuple[int, ...]]:
        """partition -> its ISR, read after the final read and before the cluster stops: the
        replicas that must hold every record below the high watermark. Each ISR is asked of
        the partition's leader, which changes it; another broker's metadata may still show
        a follower the leader has already dropped."""
        isrs: dict[int, tuple[int, ...]] = {}
        problems: list[str] = []

        def read() -> bool:
            try:
                for leader, partition in self._leaders(cluster.metadata()):
                    if partition not in isrs:
                        isrs.update(self._isrs_led_by(leader, cluster.metadata(ask=[leader])))
            except ProbeError as exc:
                problems[:] = [str(exc)]
            return len(isrs) == self.partitions

        try:
            wait_until(read, timeout, f"the ISRs of {self.topic} from their leaders")
        except AssertionError as exc:
            missing = sorted(set(range(self.partitions)) - set(isrs))
            raise AssertionError(f"{exc}; no ISR for partitions {missing}"
                                 + (f" ({problems[0]})" if problems else "")) from None
        return isrs

    def _leaders(self, view: ClusterView) -> list[tuple[int, int]]:
        """(leader, partition) of this topic's partitions that have a leader."""
        return [(state.leader, state.partition) for state in view.partitions
                if state.topic == self.topic and state.leader >= 0]

    def _isrs_led_by(self, leader: int, view: ClusterView) -> dict[int, tuple[int, ...]]:
        """The ISRs in `leader`'s own answer of the partitions it still leads."""
        return {state.partition: state.isr for state in view.partitions
                if state.topic == self.topic and state.leader == leader}

    def stored_replicas(self, cluster: LocalCluster) -> dict[tuple[int, int],
                                                               list[StoredRecord]]:
        """(node, partition) -> the records in that replica's segment files; the cluster must
        be stopped."""
        return {(node.node_id, partition): stored_records(cluster, node.node_id, self.topic,
                                                          partition)
                for node in cluster.nodes for partition in range(self.partitions)}

    def record_writers(self, replicas: dict[tuple[int, int], list[StoredRecord]]) -> None:
        """Note in the history who wrote each copy of a value read more than once."""
        wanted = {position for where in duplicated(self.history).values()
                  for position in where}
        found: dict[tuple[int, int], Writer] = {}
        for (_, partition), records in sorted(replicas.items()):
            for rec in records:
                if (partition, rec.offset) in wanted and (partition, rec.offset) not in found:
                    found[(partition, rec.offset)] = Writer(partition, rec.offset,
                                                            rec.producer_id, rec.epoch,
                                                            rec.sequence)
        self.history.writers = [found[p] for p in sorted(found)]

    def record_sequence_ends(self, replicas: dict[tuple[int, int], list[StoredRecord]]) -> None:
        """Note in the history how far the stored batches reach under each epoch in which a
        broker refused a batch as out of order, on that batch's partition, over every
        replica: a sequence stored by any of them means the refusal may have been wrong."""
        ends = {(gap.partition, bump.producer_id, gap.epoch): NO_SEQUENCE
                for bump in self.history.epoch_bumps for gap in bump.gaps}
        for (_, partition), records in replicas.items():
            for rec in records:
                key = (partition, rec.producer_id, rec.epoch)
                if key in ends:
                    ends[key] = max(ends[key], rec.sequence)
        self.history.sequence_ends = [SequenceEnd(*key, end)
                                      for key, end in sorted(ends.items())]


def stored_records(cluster: LocalCluster, node_id: int, topic: str,
                   partition: int) -> list[StoredRecord]:
    """Every data record in a stopped node's segment files for the partition, with its
    writer."""
    out = []
    for header, batch in segment_batches(cluster.node(node_id).data_dir, topic, partition):
        if header.is_control:
            continue
        for record in decode_records(batch):
            sequence = (NO_SEQUENCE if header.base_sequence == NO_SEQUENCE
                        else header.base_sequence + record.offset_delta)
            out.append(StoredRecord(header.base_offset + record.offset_delta,
                                    record.value.decode() if record.value is not None else "",
                                    header.producer_id, header.producer_epoch, sequence))
    return out
