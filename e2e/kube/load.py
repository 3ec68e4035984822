"""Load on a cluster while the operator changes it, from this host: an acks=all idempotent
producer and the consumers of one group (kafka-python, whose names resolve through
cluster_names.install), recorded into the queue checker's History (e2e/chaos/checker.py),
and a watch of every partition's ISR sampled throughout."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from e2e.chaos.checker import INFO, OK, History, Poll, Send
from e2e.support import kp_consume_all
from moldau.client import Admin
from moldau.client.admin import ConfigResource


@dataclass
class GroupLoad:
    bootstrap: str
    topic: str
    partitions: int = 3
    consumers: int = 2
    rate: float = 20.0  # sends per second
    history: History = field(default_factory=History)
    errors: list[str] = field(default_factory=list)
    _stop_producing: threading.Event = field(default_factory=threading.Event)
    _stop_consuming: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> GroupLoad:
        targets = [self._produce] + [lambda i=i: self._consume(i) for i in range(self.consumers)]
        for target in targets:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _record(self, item: Send | Poll) -> None:
        with self._lock:
            (self.history.sends if isinstance(item, Send) else self.history.polls).append(item)

    def acknowledged(self) -> set[str]:
        with self._lock:
            return {send.value for send in self.history.sends if send.status == OK}

    def consumed(self) -> Counter[str]:
        with self._lock:
            return Counter(value for poll in self.history.polls for _, _, value in poll.records)

    def _produce(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                 enable_idempotence=True, linger_ms=5,
                                 request_timeout_ms=15000, delivery_timeout_ms=120000,
                                 retry_backoff_ms=200)
        started = time.monotonic()
        seq = 0
        while not self._stop_producing.is_set():
            ahead = started + seq / self.rate - time.monotonic()
            if ahead > 0:
                time.sleep(min(ahead, 0.1))
                continue
            value, partition = f"p0-{seq}", seq % self.partitions
            future = producer.send(self.topic, value.encode(), partition=partition)
            future.add_callback(lambda meta, s=seq, v=value, p=partition: self._record(
                Send(0, s, v, p, OK, meta.offset)))
            future.add_errback(lambda exc, s=seq, v=value, p=partition: self._record(
                Send(0, s, v, p, INFO, error=str(exc))))
            seq += 1
        producer.flush(timeout=150)
        producer.close(timeout=30)

    def _consume(self, index: int) -> None:
        generation = [0]

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: object) -> None:
                generation[0] += 1

            def on_partitions_assigned(self, assigned: object) -> None:
                generation[0] += 1

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=f"{self.topic}-g",
                                 auto_offset_reset="earliest", enable_auto_commit=True,
                                 auto_commit_interval_ms=500,
                                 # Kafka's default session: a coordinator that moves while
                                 # a pod restarts (and DNS catches up) loses no member.
                                 session_timeout_ms=45000, heartbeat_interval_ms=3000,
                                 request_timeout_ms=30000)
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self._stop_consuming.is_set():
                batches = consumer.poll(timeout_ms=200)
                records = tuple((r.partition, r.offset, r.value.decode())
                                for batch in batches.values() for r in batch)
                if records:
                    self._record(Poll(index, generation[0], records))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"consumer {index}: {exc!r}")
        finally:
            consumer.close()

    def stop(self, catch_up: float = 120.0) -> None:
        """Stop producing; let the group read what was acknowledged (up to `catch_up`
        seconds); stop consuming."""
        self._stop_producing.set()
        self._threads[0].join(200)
        deadline = time.monotonic() + catch_up
        while time.monotonic() < deadline and not self.acknowledged() <= set(self.consumed()):
            time.sleep(0.5)
        self._stop_consuming.set()
        for thread in self._threads[1:]:
            thread.join(60)

    def final_read(self) -> None:
        records = kp_consume_all(self.bootstrap, self.topic, range(self.partitions))
        for partition in range(self.partitions):
            self.history.final[partition] = sorted(
                (r.offset, r.value.decode()) for r in records if r.partition == partition)

    def group_anomalies(self) -> list[str]:
        """What the group lost (acknowledged, never consumed) and read twice."""
        consumed = self.consumed()
        lost = sorted(self.acknowledged() - set(consumed))
        twice = sorted(value for value, count in consumed.items() if count > 1)
        return ([f"the group never read {len(lost)} acknowledged values: {lost[:5]}"]
                if lost else []) + \
            ([f"the group read {len(twice)} values twice: {twice[:5]}; "
              f"{self._reads_of(twice[:3])}"] if twice else [])

    def _reads_of(self, values: list[str]) -> str:
        """Who read each value: (consumer, generation, partition, offset) per read."""
        with self._lock:
            reads = {value: [(poll.consumer, poll.generation, partition, offset)
                             for poll in self.history.polls
                             for partition, offset, read in poll.records if read == value]
                     for value in values}
        return f"reads {reads}"


class IsrWatch:
    """Every partition's ISR of `topics`, sampled in a thread; the smallest size seen
    against each topic's min.insync.replicas."""

    def __init__(self, bootstrap: str, topics: list[str], interval: float = 0.5) -> None:
        self.bootstrap, self.topics, self.interval = bootstrap, topics, interval
        self.samples = 0
        self.smallest: dict[str, int] = {}
        self.under: list[str] = []  # "topic-partition isr=[..] at t" below min.insync.replicas
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with Admin({"bootstrap.servers": self.bootstrap,
                    "default.api.timeout.ms": 5000}) as admin:
            minimum = {}
            while not self._stop.is_set():
                try:
                    if not minimum:
                        found = admin.describe_configs([ConfigResource.topic(t)
                                                        for t in self.topics])
                        minimum = {r.name: int(entries["min.insync.replicas"].value)
                                   for r, entries in found.items()}
                    for name, topic in admin.describe_topics(self.topics).items():
                        for p in topic.partitions:
                            size = len(p.isr)
                            self.smallest[name] = min(self.smallest.get(name, size), size)
                            if size < minimum[name]:
                                self.under.append(f"{name}-{p.partition} isr={list(p.isr)} "
                                                  f"at {time.strftime('%H:%M:%S')}")
                    self.samples += 1
                except Exception:  # noqa: BLE001 - a broker restarting: the next sample counts
                    pass
                self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
