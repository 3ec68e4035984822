"""Shared helpers: test data, record comparison, and thin wrappers over each real client.

Every wrapper turns what a client returns into `Rec`, so tests compare records from any client
against the records they sent, field by field and byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CONSUME_TIMEOUT = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               interval: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    offset: int = -1


def make_records(count: int, partitions: int = 1, seed: int = 1, ts_base: int | None = None,
                 step_ms: int = 1000, max_value: int = 3000) -> list[Rec]:
    """Varied records: binary values of many sizes (one empty, one null), keys (some null),
    headers (none, empty values, repeated names), strictly increasing explicit timestamps."""
    rng = random.Random(seed)
    if ts_base is None:
        ts_base = now_ms() - 3_600_000 // 2
    out = []
    for i in range(count):
        key = None if i % 7 == 3 else b"key-%d-" % i + rng.randbytes(rng.randint(0, 16))
        if i == 1:
            value = b""
        elif i == 2 and key is not None:
            value = None
        else:
            size = rng.randint(1, max_value)
            if i % 4 == 0:  # incompressible
                value = rng.randbytes(size)
            else:  # binary but repetitive, so every codec shrinks the batch
                value = (rng.randbytes(24) * (size // 24 + 1))[:size]
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("trace", b"t-%d" % i), ("empty", b""), ("trace", rng.randbytes(8)))
        elif i % 3 == 2:
            headers = (("bin", bytes(range(256))),)
        out.append(Rec(i % partitions, key, value, headers, ts_base + i * step_ms))
    return out


def with_offsets(records: Iterable[Rec], start: dict[int, int] | None = None) -> list[Rec]:
    """The records with the offsets a broker assigns when they are appended in this order."""
    next_offset = dict(start or {})
    out = []
    for rec in records:
        offset = next_offset.get(rec.partition, 0)
        next_offset[rec.partition] = offset + 1
        out.append(replace(rec, offset=offset))
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def assert_records_equal(actual: list[Rec], expected: list[Rec]) -> None:
    """Same records, same order per partition, every field equal."""
    def order(rec: Rec) -> tuple[int, int]:
        return rec.partition, rec.offset

    got = sorted(actual, key=order)
    want = sorted(expected, key=order)
    for index, (a, e) in enumerate(zip(got, want, strict=False)):
        if a != e:
            diffs = [f"{name}: got {_short(getattr(a, name))}, want {_short(getattr(e, name))}"
                     for name in ("partition", "offset", "key", "value", "headers", "timestamp")
                     if getattr(a, name) != getattr(e, name)]
            raise AssertionError(f"record #{index} (partition {e.partition}, offset {e.offset}) "
                                 f"differs: " + "; ".join(diffs))
    assert len(got) == len(want), (
        f"got {len(got)} records, want {len(want)}; offsets got "
        f"{[(r.partition, r.offset) for r in got][-5:]} want "
        f"{[(r.partition, r.offset) for r in want][-5:]}")


def expected_offset_for_time(records: list[Rec], partition: int, timestamp: int) -> int | None:
    """Kafka's answer to ListOffsets by timestamp: the first offset whose timestamp >= it."""
    for rec in sorted((r for r in records if r.partition == partition), key=lambda r: r.offset):
        if rec.timestamp >= timestamp:
            return rec.offset
    return None


# --------------------------------------------------------------------------- kafka-python


def kp_admin(bootstrap: str, **config: object):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000, **config)


def kp_create_topic(bootstrap: str, topic: str, partitions: int = 1,
                    configs: dict[str, str] | None = None) -> None:
    admin = kp_admin(bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1,
                                     "configs": configs or {}}}, wait_for_metadata=True)
    finally:
        admin.close()


def kp_produce(bootstrap: str, topic: str, records: list[Rec], **config: object) -> list[int]:
    """Send every record, wait for all acknowledgements, return the acknowledged offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000,
                             delivery_timeout_ms=30000, **config)
    try:
        futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                 partition=r.partition, timestamp_ms=r.timestamp)
                   for r in records]
        producer.flush(timeout=30)
        return [future.get(timeout=30).offset for future in futures]
    finally:
        producer.close(timeout=10)


def _kp_rec(msg) -> Rec:
    assert msg.timestamp_type == 0, f"timestamp type {msg.timestamp_type} (want CreateTime)"
    return Rec(msg.partition, msg.key, msg.value, tuple(tuple(h) for h in msg.headers or ()),
               msg.timestamp, msg.offset)


def kp_consumer(bootstrap: str, **config: object):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=15000, **config)


def kp_consume_all(bootstrap: str, topic: str, partitions: Iterable[int] = (0,),
                   raw: bool = False, **config: object) -> list:
    """Everything from the log start to the current high watermark of each partition."""
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap, **config)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps, timeout_ms=15000)
        consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while any(consumer.position(tp, timeout_ms=15000) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"kafka-python consumer stuck: positions "
                f"{[consumer.position(tp) for tp in tps]} ends {ends}")
            for msgs in consumer.poll(timeout_ms=500).values():
                out.extend(msgs)
        return out if raw else [_kp_rec(m) for m in out]
    finally:
        consumer.close(autocommit=False)


def kp_offsets_for_times(bootstrap: str, topic: str, query: dict[int, int]
                         ) -> dict[int, int | None]:
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap)
    try:
        result = consumer.offsets_for_times(
            {TopicPartition(topic, p): ts for p, ts in query.items()}, timeout_ms=15000)
        return {tp.partition: (None if found is None else found.offset)
                for tp, found in result.items()}
    finally:
        consumer.close(autocommit=False)


def kp_offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start offset, high watermark)."""
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        start = consumer.beginning_offsets([tp], timeout_ms=15000)[tp]
        end = consumer.end_offsets([tp], timeout_ms=15000)[tp]
        return start, end
    finally:
        consumer.close(autocommit=False)


# --------------------------------------------------------------------------- aiokafka


def run(coro):
    return asyncio.run(coro)


async def aio_create_topic(bootstrap: str, topic: str, partitions: int = 1,
                           configs: dict[str, str] | None = None) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        errors = [(t[0], t[1]) for t in response.topic_errors if t[1] != 0]
        assert not errors, f"CreateTopics errors: {errors}"
    finally:
        await admin.close()


async def aio_produce(bootstrap: str, topic: str, records: list[Rec], **config: object
                      ) -> list[int]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                       timestamp_ms=r.timestamp, headers=list(r.headers))
                   for r in records]
        results = await asyncio.wait_for(asyncio.gather(*futures), 30)
        return [m.offset for m in results]
    finally:
        await producer.stop()


def _aio_rec(msg) -> Rec:
    assert msg.timestamp_type == 0, f"timestamp type {msg.timestamp_type} (want CreateTime)"
    return Rec(msg.partition, msg.key, msg.value, tuple(tuple(h) for h in msg.headers or ()),
               msg.timestamp, msg.offset)


def _aio_consumer(bootstrap: str):
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                            auto_offset_reset="earliest", request_timeout_ms=15000)


async def aio_consume_all(bootstrap: str, topic: str, partitions: Iterable[int] = (0,)
                          ) -> list[Rec]:
    from aiokafka import TopicPartition

    consumer = _aio_consumer(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                return [_aio_rec(m) for m in out]
            assert time.monotonic() < deadline, (
                f"aiokafka consumer stuck: positions {positions} ends {ends}")
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(msgs)
    finally:
        await consumer.stop()


async def aio_offsets_for_times(bootstrap: str, topic: str, query: dict[int, int]
                                ) -> dict[int, int | None]:
    from aiokafka import TopicPartition

    consumer = _aio_consumer(bootstrap)
    await consumer.start()
    try:
        result = await consumer.offsets_for_times(
            {TopicPartition(topic, p): ts for p, ts in query.items()})
        return {tp.partition: (None if found is None else found.offset)
                for tp, found in result.items()}
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- confluent-kafka


_CK_ADMINS: dict[str, object] = {}


def ck_admin(bootstrap: str):
    """One AdminClient per broker address: a client must outlive the futures it returns."""
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _CK_ADMINS:
        _CK_ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _CK_ADMINS[bootstrap]


def forget_clients(bootstrap: str) -> None:
    """Drop cached clients of a broker that is gone for good."""
    _CK_ADMINS.pop(bootstrap, None)


def ck_create_topic(bootstrap: str, topic: str, partitions: int = 1,
                    configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    futures = ck_admin(bootstrap).create_topics(
        [NewTopic(topic, partitions, 1, config=configs or {})], request_timeout=15)
    futures[topic].result(timeout=20)


def ck_producer(bootstrap: str, **config: object):
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                "message.timeout.ms": 30000}
    settings.update(config)
    return Producer(settings)


def ck_produce(bootstrap: str, topic: str, records: list[Rec], **config: object) -> list[int]:
    """Produce through librdkafka; raise on the first failed delivery; return offsets."""
    producer = ck_producer(bootstrap, **config)
    results: list[object] = ["not delivered"] * len(records)

    def delivered(index: int) -> Callable:
        def callback(err, msg) -> None:
            # acks=0 reports no offset (None).
            results[index] = err if err is not None else msg.offset()
        return callback

    for index, r in enumerate(records):
        kwargs = {"headers": list(r.headers)} if r.headers else {}
        producer.produce(topic, value=r.value, key=r.key, partition=r.partition,
                         timestamp=r.timestamp, on_delivery=delivered(index), **kwargs)
        producer.poll(0)
    left = producer.flush(30)
    assert left == 0, f"{left} messages not delivered within 30 s"
    errors = [e for e in results if e is not None and not isinstance(e, int)]
    assert not errors, f"delivery errors: {errors[:3]}"
    return results  # type: ignore[return-value]


def ck_consumer(bootstrap: str, **config: object):
    """A librdkafka consumer for manual assignment: group.id is mandatory in the Python binding,
    but nothing is ever committed or joined, so no group coordinator is needed."""
    from confluent_kafka import Consumer

    settings = {"bootstrap.servers": bootstrap, "group.id": unique("e2e-unused-group"),
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": False}
    settings.update(config)
    return Consumer(settings)


def _ck_rec(msg) -> Rec:
    kind, ts = msg.timestamp()
    assert kind == 1, f"timestamp type {kind} (want CreateTime)"
    return Rec(msg.partition(), msg.key(), msg.value(), tuple(msg.headers() or ()), ts,
               msg.offset())


def ck_consume_all(bootstrap: str, topic: str, partitions: Iterable[int] = (0,),
                   raw: bool = False) -> list:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = ck_consumer(bootstrap)
    try:
        partitions = list(partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        positions = {p: -1 for p in partitions}
        out = []
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while any(positions[p] + 1 < ends[p] for p in partitions):
            assert time.monotonic() < deadline, (
                f"confluent consumer stuck: last offsets {positions} ends {ends}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                # Errors not tied to a partition of ours (e.g. the unused group) are not fatal.
                assert msg.topic() != topic and not msg.error().fatal(), str(msg.error())
                continue
            positions[msg.partition()] = msg.offset()
            out.append(msg)
        return out if raw else [_ck_rec(m) for m in out]
    finally:
        consumer.close()


def ck_offsets_for_times(bootstrap: str, topic: str, query: dict[int, int]
                         ) -> dict[int, int | None]:
    from confluent_kafka import TopicPartition

    consumer = ck_consumer(bootstrap)
    try:
        result = consumer.offsets_for_times(
            [TopicPartition(topic, p, ts) for p, ts in query.items()], timeout=15)
        for tp in result:
            assert tp.error is None, tp.error
        return {tp.partition: (None if tp.offset < 0 else tp.offset) for tp in result}
    finally:
        consumer.close()


# --------------------------------------------------------------------------- kcat


def kcat_path() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    assert path, "kcat is not installed (apt-get install -y kcat)"
    return path


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None, timeout: float = 60,
         check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([kcat_path(), "-b", bootstrap, *args], input=stdin,
                          capture_output=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, (
            f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return proc


def kcat_json_lines(output: bytes) -> list[dict]:
    return [json.loads(line) for line in output.decode().splitlines() if line.strip()]


# --------------------------------------------------------------------------- stored batches

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_batches(bootstrap: str, topic: str, partition: int = 0) -> list:
    from e2e import wire

    return wire.fetch_all_batches(bootstrap, topic, partition)


def assert_codec(batches: list, codec: str) -> None:
    """compression.type=producer keeps each batch as the producer compressed it. Clients send a
    batch uncompressed when the codec would not shrink it, so both may appear, but nothing else."""
    found = {b.attributes & 0x7 for b in batches}
    want = CODEC_IDS[codec]
    assert want in found and found <= {0, want}, (
        f"stored codecs {sorted(found)}, want {codec} ({want})")


def assert_idempotent_batches(batches: list, producers: int = 1) -> list[int]:
    """Batches of idempotent producers: a producer id and epoch on each, and per producer id
    sequence numbers that continue exactly from one batch to the next. Returns the ids in
    order of first appearance."""
    assert batches, "no batches stored"
    next_sequence: dict[int, int] = {}
    order = []
    for batch in batches:
        assert batch.crc_ok, f"batch at {batch.base_offset}: CRC mismatch"
        assert batch.producer_id >= 0 and batch.producer_epoch >= 0, (
            f"batch at {batch.base_offset} has producer id {batch.producer_id} epoch "
            f"{batch.producer_epoch}: not written idempotently")
        if batch.producer_id not in next_sequence:
            order.append(batch.producer_id)
            next_sequence[batch.producer_id] = 0
        assert batch.base_sequence == next_sequence[batch.producer_id], (
            f"batch at {batch.base_offset}: sequence {batch.base_sequence}, want "
            f"{next_sequence[batch.producer_id]}")
        next_sequence[batch.producer_id] += batch.record_count
    assert len(order) == producers, f"producer ids {order}, want {producers} distinct"
    return order
