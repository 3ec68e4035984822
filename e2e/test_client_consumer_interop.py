"""The Moldau consumer and producer against other clients, through a real broker process.

- Every codec: records written by the Moldau producer are read back exactly (partition,
  offset, key, value, headers, timestamp) by confluent-kafka (librdkafka) and kafka-python
  consumers, and records written by confluent-kafka and kafka-python producers are read back
  exactly by the Moldau consumer (the synchronous face, and once the asyncio one).
- Keyed records from the Moldau producer land in the partitions librdkafka's murmur2_random
  partitioner (the Java client's) picks.
- Moldau and confluent-kafka consumers share one group under range, roundrobin and
  cooperative-sticky: once stable every partition has exactly one owner, and with commits
  every record is consumed exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from dataclasses import replace

import pytest

from e2e.support import (
    CODECS,
    CONSUME_TIMEOUT,
    Rec,
    assert_codec,
    assert_records_equal,
    ck_committed,
    ck_consume_all,
    ck_describe_group,
    ck_produce,
    ck_produce_numbered,
    ck_producer,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    stored_batches,
    unique,
    wait_until,
    with_offsets,
)
from moldau.client import (
    AsyncConsumer,
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    Producer,
    TopicPartition,
)
from moldau.client.errors import SerializationError
from moldau.client.producer.partitioner import partition_for_key

pytestmark = pytest.mark.timeout(120)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}

PARTITIONS = 2
BIG = 100 * 1024


@pytest.fixture
def bootstrap(module_broker) -> str:
    return module_broker.bootstrap


def interop_records(seed: int) -> list[Rec]:
    """make_records' variety (keys, null keys, an empty and a null value, repeated and
    empty headers, explicit timestamps) plus null header values and three ~100 KiB values,
    one incompressible and two repetitive."""
    rng = random.Random(seed)
    out = []
    for i, rec in enumerate(make_records(36, partitions=PARTITIONS, seed=seed)):
        if i % 5 == 4:
            rec = replace(rec, headers=(*rec.headers, ("null", None), ("after-null", b"x")))
        if i == 9:
            rec = replace(rec, value=rng.randbytes(BIG))
        elif i in (16, 29):
            rec = replace(rec, value=(b"moldau-%d-" % i * (BIG // 9 + 1))[:BIG])
        out.append(rec)
    assert any(value is None for _, value in (h for r in out for h in r.headers))
    return out


def consumer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "fetch.max.wait.ms": 100,
            "request.timeout.ms": 15000, **extra}


def moldau_rec(record: ConsumerRecord) -> Rec:
    assert record.timestamp_type == 0, f"timestamp type {record.timestamp_type} (CreateTime)"
    assert record.serialized_key_size == (-1 if record.key is None else len(record.key))
    assert record.serialized_value_size == (-1 if record.value is None else len(record.value))
    return Rec(record.partition, record.key, record.value, tuple(record.headers),
               record.timestamp, record.offset)


def moldau_consume_all(bootstrap: str, topic: str, partitions: int = PARTITIONS
                       ) -> list[Rec]:
    """Everything from the log start to the current end of each partition."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(consumer_config(bootstrap)) as consumer:
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"Moldau consumer stuck at {[consumer.position(tp) for tp in tps]}, "
                f"ends {ends}")
            out.extend(consumer.poll(0.5))
        return [moldau_rec(r) for r in out]


async def moldau_consume_all_async(bootstrap: str, topic: str, partitions: int = PARTITIONS
                                   ) -> list[Rec]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with AsyncConsumer(consumer_config(bootstrap)) as consumer:
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            assert time.monotonic() < deadline, f"AsyncConsumer stuck at {positions}, ends {ends}"
            out.extend(await consumer.poll(0.5))
        return [moldau_rec(r) for r in out]


def moldau_produce(bootstrap: str, topic: str, records: list[Rec], codec: str) -> list[int]:
    with Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                   "linger.ms": 20, "request.timeout.ms": 15000}) as producer:
        futures = [producer.send(topic, r.value, key=r.key, headers=list(r.headers),
                                 partition=r.partition, timestamp_ms=r.timestamp)
                   for r in records]
        return [future.get(30).offset for future in futures]


def check_codec(bootstrap: str, topic: str, codec: str) -> None:
    """The batches are stored compressed as asked, so the reader really decompressed."""
    if codec != "none":
        for partition in range(PARTITIONS):
            assert_codec(stored_batches(bootstrap, topic, partition), codec)


# ----------------------------------------------------------------------------- records


@pytest.mark.parametrize("codec", CODECS)
def test_moldau_producer_records_are_read_exactly_by_confluent_and_kafka_python(
        bootstrap, codec):
    topic = unique(f"to-others-{codec}")
    kp_create_topic(bootstrap, topic, PARTITIONS)
    records = interop_records(seed=len(codec))
    offsets = moldau_produce(bootstrap, topic, records, codec)
    expected = with_offsets(records)
    assert offsets == [r.offset for r in expected]
    check_codec(bootstrap, topic, codec)
    assert_records_equal(ck_consume_all(bootstrap, topic, range(PARTITIONS)), expected)
    assert_records_equal(kp_consume_all(bootstrap, topic, range(PARTITIONS)), expected)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", ["confluent", "kafka-python"])
def test_other_producers_records_are_read_exactly_by_moldau(bootstrap, producer, codec):
    topic = unique(f"from-{producer}-{codec}")
    kp_create_topic(bootstrap, topic, PARTITIONS)
    records = interop_records(seed=len(codec) + len(producer))
    if producer == "confluent":
        offsets = ck_produce(bootstrap, topic, records, **{"compression.type": codec})
    else:
        # kafka-python's producer takes no null header values ("(str, bytes) tuples").
        records = [replace(r, headers=tuple(h for h in r.headers if h[1] is not None))
                   for r in records]
        offsets = kp_produce(bootstrap, topic, records,
                             compression_type=None if codec == "none" else codec)
    expected = with_offsets(records)
    assert offsets == [r.offset for r in expected]
    check_codec(bootstrap, topic, codec)
    assert_records_equal(moldau_consume_all(bootstrap, topic), expected)


def test_async_consumer_reads_confluent_records_exactly(bootstrap):
    topic = unique("from-confluent-async")
    kp_create_topic(bootstrap, topic, PARTITIONS)
    records = interop_records(seed=11)
    offsets = ck_produce(bootstrap, topic, records, **{"compression.type": "zstd"})
    expected = with_offsets(records)
    assert offsets == [r.offset for r in expected]
    assert_records_equal(asyncio.run(moldau_consume_all_async(bootstrap, topic)), expected)


def test_undecodable_value_stops_the_str_consumer_at_that_record(bootstrap):
    """Records before it are returned, then SerializationError at its offset until the
    application seeks past it; nothing else is skipped."""
    topic = unique("undecodable")
    kp_create_topic(bootstrap, topic, 1)
    values = [b"ok-0", b"ok-1", b"\xff\xfe not UTF-8", b"ok-3"]
    kp_produce(bootstrap, topic, [Rec(0, None, v, (), now) for v, now in
                                  zip(values, range(1_700_000_000_000, 1_700_000_000_004),
                                      strict=True)], linger_ms=50)
    tp = TopicPartition(topic, 0)
    with Consumer(consumer_config(bootstrap), value_deserializer="str") as consumer:
        consumer.assign([tp])
        got: list[tuple[int, str]] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            got.extend((r.offset, r.value) for r in consumer.poll(0.5))
        assert got == [(0, "ok-0"), (1, "ok-1")]
        for _ in range(2):
            with pytest.raises(SerializationError, match="offset 2"):
                consumer.poll(2.0)
            assert consumer.position(tp) == 2
        consumer.seek(tp, 3)
        assert [(r.offset, r.value) for r in consumer.poll(5.0)] == [(3, "ok-3")]


def test_keys_land_where_librdkafka_murmur2_random_puts_them(bootstrap):
    topic = unique("keys")
    partitions = 7
    kp_create_topic(bootstrap, topic, partitions)
    rng = random.Random(5)
    keys = [b"user-%d" % i for i in range(60)] + \
        [rng.randbytes(rng.randint(1, 40)) for _ in range(60)] + \
        ["ключ-ü".encode(), b"\x00", b"\xff\xfe\xfd", b"k" * 1000]
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        futures = [producer.send(topic, b"moldau-%d" % i, key=key) for i, key in enumerate(keys)]
        acknowledged = [future.get(30).partition for future in futures]
    librdkafka = ck_producer(bootstrap, partitioner="murmur2_random")
    for i, key in enumerate(keys):
        librdkafka.produce(topic, value=b"confluent-%d" % i, key=key)
        librdkafka.poll(0)
    assert librdkafka.flush(30) == 0

    where = {r.value: r.partition for r in moldau_consume_all(bootstrap, topic, partitions)}
    assert len(where) == 2 * len(keys)
    moldau = [where[b"moldau-%d" % i] for i in range(len(keys))]
    confluent = [where[b"confluent-%d" % i] for i in range(len(keys))]
    assert moldau == acknowledged
    mismatches = [(keys[i], moldau[i], confluent[i]) for i in range(len(keys))
                  if moldau[i] != confluent[i]]
    assert not mismatches, f"keys placed differently (key, moldau, confluent): {mismatches[:5]}"
    assert moldau == [partition_for_key(key, partitions) for key in keys]
    assert len(set(moldau)) == partitions, "the keys spread over every partition"


# ----------------------------------------------------------------------------- groups

GROUP_PARTITIONS = 8
HEARTBEAT_MS = 200


class Member(threading.Thread):
    """A group member with its own poll loop: it processes each batch, commits it at once
    (and again before giving partitions up), and notes its current assignment."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, strategy: str,
                 stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group, self.topic, self.strategy = bootstrap, group, topic, strategy
        self.stop_event = stop
        self.processed: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.assignment: set[int] = set()
        self.errors: list[str] = []
        self.commit_failures: list[str] = []

    def run(self) -> None:
        try:
            self.consume()
        except Exception as exc:  # reported by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def consume(self) -> None:
        raise NotImplementedError


class MoldauMember(Member):
    def consume(self) -> None:
        consumer = Consumer(consumer_config(
            self.bootstrap, **{"group.id": self.group, "client.id": self.name,
                               "partition.assignment.strategy": self.strategy,
                               "heartbeat.interval.ms": HEARTBEAT_MS,
                               "session.timeout.ms": 10000}))
        member = self

        class CommitOnRevoke(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
                if revoked:
                    try:
                        consumer.commit()
                    except Exception as exc:
                        member.commit_failures.append(f"on revoke: {exc!r}")

        try:
            consumer.subscribe([self.topic], listener=CommitOnRevoke())
            while not self.stop_event.is_set():
                records = consumer.poll(0.1)
                self.processed.extend((r.partition, r.offset, r.value) for r in records)
                if records:
                    try:
                        consumer.commit()
                    except Exception as exc:
                        self.commit_failures.append(repr(exc))
                self.assignment = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()


class ConfluentMember(Member):
    def consume(self) -> None:
        from confluent_kafka import Consumer as CkConsumer
        from confluent_kafka import KafkaError, KafkaException

        def commit(consumer: CkConsumer, when: str) -> None:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    self.commit_failures.append(f"{when}: {exc.args[0]}")

        def on_revoke(consumer: CkConsumer, partitions: list) -> None:
            if partitions:
                commit(consumer, "on revoke")

        consumer = CkConsumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "client.id": self.name, "partition.assignment.strategy": self.strategy,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10000,
            "fetch.wait.max.ms": 100, "enable.partition.eof": False})
        try:
            consumer.subscribe([self.topic], on_revoke=on_revoke)
            while not self.stop_event.is_set():
                messages = consumer.consume(num_messages=500, timeout=0.1)
                for message in messages:
                    if message.error() is not None:
                        self.errors.append(str(message.error()))
                    else:
                        self.processed.append((message.partition(), message.offset(),
                                               message.value()))
                if messages:
                    commit(consumer, "after a batch")
                self.assignment = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()


def wait_stable_split(members: list[Member], timeout: float, hold: float = 1.0
                      ) -> list[set[int]]:
    """Until the members hold disjoint sets that together are every partition, unchanged
    for `hold` seconds."""
    everything = set(range(GROUP_PARTITIONS))
    deadline = time.monotonic() + timeout
    since, last = time.monotonic(), None
    while True:
        current = [set(m.assignment) for m in members]
        fits = all(current) and sum(map(len, current)) == GROUP_PARTITIONS and \
            set().union(*current) == everything
        now = time.monotonic()
        if not fits or current != last:
            since, last = now, current if fits else None
        elif now - since >= hold:
            return current
        errors = [e for m in members for e in m.errors]
        assert not errors, errors
        assert now < deadline, "no stable split: " + "; ".join(
            f"{m.name}={sorted(a)}" for m, a in zip(members, current, strict=True))
        time.sleep(0.05)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_mixed_group_owns_each_partition_once_and_consumes_each_record_once(
        bootstrap, strategy):
    topic, group = unique(f"mixed-{strategy}"), unique("g-mixed")
    kp_create_topic(bootstrap, topic, GROUP_PARTITIONS)
    produced: dict[tuple[int, int], int] = {}
    producing_failed: list[BaseException] = []

    def produce() -> None:
        try:
            produced.update(ck_produce_numbered(bootstrap, topic, range(1600),
                                                GROUP_PARTITIONS, rate=400))
        except BaseException as exc:  # reported by the test
            producing_failed.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    stop = threading.Event()
    members: list[Member] = []
    try:
        # Records keep coming while the members join one by one, so partitions move
        # between Moldau and confluent-kafka members with records in flight, and each new
        # owner must start from what the previous one committed.
        for name, kind in (("moldau-1", MoldauMember), ("confluent-1", ConfluentMember),
                           ("moldau-2", MoldauMember), ("confluent-2", ConfluentMember)):
            member = kind(name, bootstrap, group, topic, strategy, stop)
            members.append(member)
            member.start()
            time.sleep(0.6)
        producer.join(40)
        assert not producer.is_alive() and not producing_failed, producing_failed
        assert len(produced) == 1600
        split = wait_stable_split(members, timeout=40)
        assert [len(owned) for owned in split] == [2] * 4, split
        wait_until(lambda: sum(len(m.processed) for m in members) >= len(produced), 20,
                   "every record consumed")

        description = ck_describe_group(bootstrap, group)
        assert description.partition_assignor == strategy
        assert str(description.state).endswith("STABLE"), description.state
        described = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
                     for m in description.members}
        assert described == {m.name: m.assignment for m in members}
    finally:
        stop.set()
        for member in members:
            member.join(30)
    assert not any(m.is_alive() for m in members), "a member did not stop"
    errors = [f"{m.name}: {e}" for m in members for e in m.errors]
    assert not errors, errors

    # Every record exactly once, across members and rebalances.
    seen = collections.Counter((p, o) for m in members for p, o, _ in m.processed)
    duplicates = {k: n for k, n in seen.items() if n > 1}
    failures = [f"{m.name}: {f}" for m in members for f in m.commit_failures]
    assert not duplicates, f"read twice: {sorted(duplicates)[:10]}; commit failures {failures}"
    assert set(seen) == set(produced), f"missing {sorted(set(produced) - set(seen))[:10]}"
    for m in members:
        for p, o, value in m.processed:
            assert value == str(produced[(p, o)]).encode()
    readers = collections.defaultdict(set)
    for m in members:
        for p, _, _ in m.processed:
            readers[p].add(m.name)
    assert any(len(names) > 1 for names in readers.values()), (
        f"no partition changed hands while records were read: {dict(readers)}")
    ends: dict[int, int] = {}
    for p, o in produced:
        ends[p] = max(ends.get(p, 0), o + 1)
    assert ck_committed(bootstrap, group) == {(topic, p): end for p, end in ends.items()}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_member_resumes_where_moldau_committed_in_its_revoke_listener(
        bootstrap, strategy):
    """Kafka's idiom: commit in on_partitions_revoked, while the partitions are still
    assigned. A confluent-kafka member joining later starts right after those offsets."""
    from confluent_kafka import Consumer as CkConsumer

    topic, group = unique(f"revoke-{strategy}"), unique("g-revoke")
    kp_create_topic(bootstrap, topic, 4)
    ck_produce_numbered(bootstrap, topic, range(400), 4)
    settings = {"group.id": group, "partition.assignment.strategy": strategy,
                "heartbeat.interval.ms": HEARTBEAT_MS}
    moldau = Consumer(consumer_config(bootstrap, **settings))
    in_listener: list[tuple[set[int], set[int]]] = []

    class CommitOnRevoke(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            if revoked:
                in_listener.append(({tp.partition for tp in revoked},
                                    {tp.partition for tp in moldau.assignment()}))
                moldau.commit()

    moldau_read: list[tuple[int, int]] = []
    stop = threading.Event()

    def keep_polling() -> None:  # `moldau` belongs to this thread from now on
        while not stop.is_set():
            moldau_read.extend((r.partition, r.offset) for r in moldau.poll(0.1))

    ck = CkConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "partition.assignment.strategy": strategy, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "heartbeat.interval.ms": HEARTBEAT_MS,
                     "fetch.wait.max.ms": 100})
    ck_read: list[tuple[int, int]] = []
    poller = threading.Thread(target=keep_polling, daemon=True)
    try:
        moldau.subscribe([topic], listener=CommitOnRevoke())
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while len(moldau_read) < 400:
            assert time.monotonic() < deadline, f"read {len(moldau_read)} of 400"
            moldau_read.extend((r.partition, r.offset) for r in moldau.poll(0.5))
        assert ck_committed(bootstrap, group) == {}, "nothing committed before the rebalance"
        poller.start()
        ck.subscribe([topic])
        more_sent = False
        deadline = time.monotonic() + 30
        while len(ck.assignment()) != 2 or len(ck_read) + len(moldau_read) < 440:
            assert time.monotonic() < deadline, (
                f"confluent owns {ck.assignment()}, read {len(ck_read)} + "
                f"{len(moldau_read)} of 440")
            for message in ck.consume(num_messages=100, timeout=0.1):
                assert message.error() is None, message.error()
                ck_read.append((message.partition(), message.offset()))
            if len(ck.assignment()) == 2 and not more_sent:
                ck_produce_numbered(bootstrap, topic, range(400, 440), 4)  # 10 more each
                more_sent = True
    finally:
        stop.set()
        if poller.is_alive():
            poller.join(20)
        ck.close()
        moldau.close()
    # The listener saw the partitions it gave up as still assigned, and its commit held.
    assert in_listener and all(revoked <= owned for revoked, owned in in_listener), in_listener
    assert ck_read and all(offset >= 100 for _, offset in ck_read), sorted(ck_read)[:5]
    assert sorted(moldau_read + ck_read) == sorted({*moldau_read, *ck_read}), "read twice"
    assert len(moldau_read) + len(ck_read) == 440
