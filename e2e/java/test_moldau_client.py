"""The Moldau client against Moldau and against Apache Kafka: what it produces, a consumer
group of Moldau consumers reads exactly once, with commits the admin client sees. Passing
against Kafka shows the client speaks the protocol as Kafka's broker expects, not only as
Moldau's does."""

from __future__ import annotations

import threading
import time

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Target
from e2e.support import unique
from moldau.client import Admin, Consumer, NewTopic, Producer, TopicPartition

pytestmark = pytest.mark.timeout(180)
BROKER_OVERRIDES = BROKER_SETTINGS

PARTITIONS = 4
RECORDS = 2000


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_moldau_group_reads_moldau_producer_exactly_once(target: Target, strategy: str):
    topic, group = unique("mc"), unique("mg")
    with Admin({"bootstrap.servers": target.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    with Producer({"bootstrap.servers": target.bootstrap, "compression.type": "lz4"}) as p:
        for i in range(RECORDS):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i)])
        p.flush(30)
    settings = {"bootstrap.servers": target.bootstrap, "group.id": group,
                "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                "heartbeat.interval.ms": 300, "enable.auto.commit": False}
    seen: list = []
    lock = threading.Lock()
    stop = threading.Event()
    owned: dict[str, set[TopicPartition]] = {}

    def member(name: str) -> None:
        with Consumer(settings, key_deserializer="str", value_deserializer="str") as c:
            c.subscribe([topic])
            while not stop.is_set():
                records = c.poll(0.2)
                with lock:
                    seen.extend(records)
                    owned[name] = c.assignment()
                if records:
                    c.commit()

    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    # Ownership as seen when the group was split and everything read; once members stop,
    # the first to close hands its partitions to the other, so later views differ.
    settled: dict[str, set[TopicPartition]] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                split = sorted(len(tps) for tps in owned.values()) == [2, 2]
                done = len({(r.partition, r.offset) for r in seen}) == RECORDS
                settled = dict(owned)
            if split and done:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert sorted(len(tps) for tps in settled.values()) == [2, 2], settled
    assert set().union(*settled.values()) == {TopicPartition(topic, p)
                                              for p in range(PARTITIONS)}
    positions = [(r.partition, r.offset) for r in seen]
    assert len(positions) == len(set(positions)) == RECORDS, "each record exactly once"
    assert sorted(int(r.value[1:]) for r in seen) == list(range(RECORDS))
    assert all(r.key == "k" + r.value[1:] and r.headers == [("i", r.value[1:].encode())]
               for r in seen)
    ends: dict[int, int] = {}
    for r in seen:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    with Admin({"bootstrap.servers": target.bootstrap}) as admin:
        committed = admin.list_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in committed.items()} == ends
