"""The transactional workload (txn_checker.py checks it), driven by librdkafka.

A few workers, each a transactional producer with a transactional.id of its own and a
read_committed consumer that reads every partition of the topic (manual assignment, from the
offsets its group last committed). A transaction polls what is there, writes two or three
unique values `w<worker>-<n>-<i>` to distinct partitions, commits the consumer's position
with them (send_offsets_to_transaction, as e2e/eos_processor.py does) and commits or, one
time in four, aborts. Every outcome is recorded (txn_checker's COMMITTED, ABORTED, UNKNOWN)
with what the transaction read and wrote. A worker whose producer cannot go on (fenced, a
fatal error, an outcome left open) starts a new producer with the same transactional.id,
whose init_transactions fences the old one and ends what it left open.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from e2e.chaos.clients import ClientThreads, create_replicated_topic
from e2e.chaos.txn_checker import ABORTED, COMMITTED, UNKNOWN, Txn, TxnHistory
from e2e.support import ck_end_offsets, ck_records

CALL_TIMEOUT_S = 20.0  # init, send offsets, commit, abort
TRANSACTION_TIMEOUT_MS = 10000  # what a replaced producer leaves open is aborted after this
ABORT_SHARE = 0.25
RETRY_COMMITS = 3
# Longer than the transaction timeout, so that what a dead producer left open is ended.
SETTLE_TIMEOUT_S = 60.0


class Restart(Exception):
    """The worker's producer cannot go on; a new one takes over its transactional.id."""


@dataclass
class TxnWorkload(ClientThreads):
    bootstrap: str
    topic: str
    partitions: int = 4
    workers: int = 3
    history: TxnHistory = field(default_factory=TxnHistory)
    restarts: int = 0
    settled_after_s: float = 0.0  # how long the final read waited for open transactions
    # Transactions under way: id -> (reads, writes, start), filled in as they go.
    _open: dict[str, tuple[list, list, float]] = field(default_factory=dict)

    def create_topic(self) -> None:
        create_replicated_topic(self.bootstrap, self.topic, self.partitions)

    def start(self) -> TxnWorkload:
        for worker in range(self.workers):
            self._spawn(self._work, worker, name=f"txn-worker-{worker}")
        return self

    def stop(self, timeout: float = (RETRY_COMMITS + 2) * CALL_TIMEOUT_S) -> None:
        """Stop the workers; the transaction of one still blocked (librdkafka's
        send_offsets_to_transaction can outlast its timeout while the group coordinator is
        unreachable) goes into the history with an unknown outcome."""
        super().stop(timeout)
        with self._lock:
            for txn_id, (reads, writes, started) in self._open.items():
                self.history.txns.append(Txn(txn_id, tuple(reads), tuple(writes), UNKNOWN,
                                             "still running at the stop", started))
            self._open.clear()

    def committed(self) -> int:
        with self._lock:
            return sum(1 for txn in self.history.txns if txn.outcome == COMMITTED)

    def final_read(self, settle_timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Every partition read_committed from the beginning, once no transaction is open
        on any: EndTxn is answered when the commit is prepared and the markers follow, and
        a transaction left open by a replaced producer ends by its timeout. A partition
        still holding an open transaction after `settle_timeout` goes into the history's
        `open_at_end` (last stable offset, high watermark), and the read stops there."""
        def open_partitions() -> dict[int, tuple[int, int]]:
            stable = ck_end_offsets(self.bootstrap, self.topic, self.partitions,
                                    "read_committed")
            high = ck_end_offsets(self.bootstrap, self.topic, self.partitions,
                                  "read_uncommitted")
            return {p: (stable[p], high[p]) for p in high if stable[p] < high[p]}

        started = time.monotonic()
        while (still_open := open_partitions()) and \
                time.monotonic() < started + settle_timeout:
            time.sleep(0.5)
        self.settled_after_s = time.monotonic() - started
        self.history.open_at_end = still_open
        stored = ck_records(self.bootstrap, self.topic, self.partitions, "read_committed",
                            timeout=120)
        self.history.final = {partition: [(offset, value.decode()) for offset, value in rows]
                              for partition, rows in stored.items()}

    # ------------------------------------------------------------------ workers

    def _work(self, worker: int) -> None:
        rng = random.Random(f"{self.topic}-{worker}")
        numbers = itertools.count()
        while not self._stop.is_set():
            try:
                self._session(worker, rng, numbers)
            except (Restart, KafkaException) as exc:
                self._error(f"worker {worker}: new producer after {exc}")
                with self._lock:
                    self.restarts += 1
                self._stop.wait(0.5)

    def _session(self, worker: int, rng: random.Random, numbers: itertools.count) -> None:
        """One producer's life: transactions until the workload stops or it cannot go on."""
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": f"{self.topic}-w{worker}",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "linger.ms": 5,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: self._error(f"producer {worker}: {err}")})
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-g{worker}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "enable.partition.eof": False, "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: self._error(f"consumer {worker}: {err}")})
        try:
            producer.init_transactions(CALL_TIMEOUT_S)
            wanted = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign([
                TopicPartition(self.topic, tp.partition,
                               tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in consumer.committed(wanted, CALL_TIMEOUT_S)])
            while not self._stop.is_set():
                self._transaction(f"w{worker}-{next(numbers)}", rng, producer, consumer)
        finally:
            consumer.close()
            # Not left to the garbage collector: a producer kept alive by a traceback would
            # go on reconnecting to these addresses, which a later run's nodes may take.
            producer.close()

    def _transaction(self, txn_id: str, rng: random.Random, producer: Producer,
                     consumer: Consumer) -> None:
        reads: list[tuple[int, int, str]] = []
        writes: list[tuple[int, str]] = []
        committing = False
        started = time.time()
        with self._lock:
            self._open[txn_id] = (reads, writes, started)
        producer.poll(0)  # serve the delivery reports left (of purged messages)
        try:
            producer.begin_transaction()
            for message in consumer.consume(50, timeout=0.2):
                if message.error() is None:
                    reads.append((message.partition(), message.offset(),
                                  message.value().decode()))
            for index, partition in enumerate(rng.sample(range(self.partitions),
                                                          rng.randint(2, 3))):
                value = f"{txn_id}-{index}"
                producer.produce(self.topic, value.encode(), partition=partition,
                                 on_delivery=self._delivered)
                writes.append((partition, value))
            positions = [tp for tp in consumer.position(consumer.assignment())
                         if tp.offset >= 0]
            if positions:
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
            if rng.random() < ABORT_SHARE:
                producer.abort_transaction(CALL_TIMEOUT_S)
                outcome, error = ABORTED, ""
            else:
                committing = True
                producer.commit_transaction(CALL_TIMEOUT_S)
                outcome, error = COMMITTED, ""
        except (KafkaException, BufferError) as exc:
            outcome, error = self._after_error(exc, producer, committing)
        with self._lock:
            del self._open[txn_id]
            self.history.txns.append(Txn(txn_id, tuple(reads), tuple(writes), outcome, error,
                                         started, time.time()))
        if error and outcome != COMMITTED:
            # Whatever failed may fail the next transaction too; a new producer starts clean.
            raise Restart(f"{txn_id} {outcome}: {error}")

    def _delivered(self, err: KafkaError | None, message: Message) -> None:
        with self._lock:
            self.history.deliveries[message.value().decode()] = (
                f"{message.partition()}:{message.offset()}" if err is None else str(err))

    def _after_error(self, exc: KafkaException | BufferError, producer: Producer,
                     committing: bool) -> tuple[str, str]:
        """The outcome of a transaction that raised. Without a commit request it cannot have
        committed: aborted, whether the abort gets through or the coordinator ends it (a new
        producer's init_transactions, or the transaction timeout). A commit that failed is
        committed only when a retry of it succeeds, else unknown."""
        err = exc.args[0] if isinstance(exc, KafkaException) else None
        error = str(err if err is not None else exc)
        if not committing:
            if err is None or not err.fatal():
                try:
                    producer.abort_transaction(CALL_TIMEOUT_S)
                except KafkaException as again:
                    error += f"; abort: {again.args[0]}"
            return ABORTED, error
        if err is not None and err.retriable() and not err.txn_requires_abort():
            for _ in range(RETRY_COMMITS):  # librdkafka lets a timed-out commit be retried
                try:
                    producer.commit_transaction(CALL_TIMEOUT_S)
                    return COMMITTED, error
                except KafkaException as again:
                    error += f"; retry: {again.args[0]}"
                    if not again.args[0].retriable():
                        break
        return UNKNOWN, error


