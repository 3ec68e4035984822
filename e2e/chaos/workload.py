"""Jepsen's Kafka queue workload, driven by librdkafka from the root namespace.

Producers (acks=all, idempotent) send unique values `p<producer>-<seq>` to partition
`seq % partitions` at a steady rate and record each send's outcome; consumers in one group
poll and record what they got, with a generation bumped on every assignment change. After
the faults are healed, `final_read` reads every partition from the beginning, and
`stored_replicas` decodes the segment files of every replica (of a stopped cluster) for the
replica check. Everything goes into a checker.History.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from e2e.chaos.checker import FAIL, INFO, OK, History, Poll, Send
from e2e.chaos.clients import ClientThreads, create_replicated_topic
from e2e.support import ck_consume_all
from e2e.test_cluster_failover import replica_records
from moldau.cluster.launcher import LocalCluster

MESSAGE_TIMEOUT_MS = 30000  # a send not acknowledged by then is indeterminate


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

    def _record(self, send: Send | Poll) -> None:
        with self._lock:
            if isinstance(send, Send):
                self.history.sends.append(send)
            else:
                self.history.polls.append(send)

    # ------------------------------------------------------------------ producers

    def _produce(self, producer_id: int) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: self.errors.append(f"producer {producer_id}: {err}")})
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

    def stored_replicas(self, cluster: LocalCluster) -> dict[tuple[int, int],
                                                               list[tuple[int, str]]]:
        """(node, partition) -> the (offset, value)s in that replica's segment files; the
        cluster must be stopped."""
        return {(node.node_id, partition): [
                    (offset, value.decode() if value is not None else "")
                    for offset, value in replica_records(cluster, node.node_id, self.topic,
                                                         partition)]
                for node in cluster.nodes for partition in range(self.partitions)}
