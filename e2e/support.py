"""Shared helpers: test data, record comparison, and thin wrappers over each real client.

Every wrapper turns what a client returns into `Rec`, so tests compare records from any client
against the records they sent, field by field and byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from moldau.records.batch import BatchHeader
from moldau.records.codec import iter_batches

if TYPE_CHECKING:
    from moldau.cluster import LocalCluster

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CONSUME_TIMEOUT = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def now_ms() -> int:
    return int(time.time() * 1000)


def moldau_cache_dir(name: str, override_env: str) -> Path:
    """$override_env, else <XDG_CACHE_HOME or ~/.cache>/moldau/<name>: where the set-up
    scripts (java/fetch-kafka.sh, e2e/kube/deps.sh) keep what they fetch and build."""
    explicit = os.environ.get(override_env)
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "moldau" / name


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


@contextlib.contextmanager
def running_cluster(directory: Path, brokers: int, overrides: dict[str, str]
                    ) -> Iterator[LocalCluster]:
    """A started LocalCluster of `brokers` combined nodes, stopped on the way out."""
    from moldau.cluster import ClusterError, LocalCluster, free_base_port

    local = LocalCluster(directory, brokers=brokers, base_port=free_base_port(brokers),
                         overrides=overrides)
    try:
        local.start()
        yield local
    finally:
        with contextlib.suppress(ClusterError):
            local.stop(timeout=20)


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


def _ck_high_watermark(consumer, partition, timeout: float = 30.0) -> int:
    """The partition's high watermark. A broker's metadata may not hold a partition yet (one
    just restarted, or just created): librdkafka answers "Unknown partition", so ask again."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=15)[1]
        except KafkaException as exc:
            unknown = exc.args[0].code() in (KafkaError._UNKNOWN_PARTITION,
                                             KafkaError.UNKNOWN_TOPIC_OR_PART)
            if not unknown or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def ck_consume_all(bootstrap: str, topic: str, partitions: Iterable[int] = (0,),
                   raw: bool = False, **config: object) -> list:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = ck_consumer(bootstrap, **config)
    try:
        partitions = list(partitions)
        ends = {p: _ck_high_watermark(consumer, TopicPartition(topic, p))
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


def ck_values(bootstrap: str, topic: str, partitions: int, isolation: str,
              timeout: float = CONSUME_TIMEOUT) -> dict[int, list[bytes]]:
    """Every value of each partition from the log start to the high watermark, read with
    `isolation` (read_committed must find no transaction open, else it waits for one)."""
    return {partition: [value for _, value in records] for partition, records in
            ck_records(bootstrap, topic, partitions, isolation, timeout).items()}


def ck_end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str
                   ) -> dict[int, int]:
    """Each partition's end as a consumer with `isolation` sees it: the high watermark, or
    for read_committed the last stable offset (below the first open transaction)."""
    from confluent_kafka import TopicPartition

    consumer = ck_consumer(bootstrap, **{"isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def ck_records(bootstrap: str, topic: str, partitions: int, isolation: str,
               timeout: float = CONSUME_TIMEOUT) -> dict[int, list[tuple[int, bytes]]]:
    """ck_values with each value's offset: partition -> [(offset, value)]."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = ck_consumer(bootstrap, **{"isolation.level": isolation})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout

        def behind() -> list[int]:
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            return [tp.partition for tp in positions if tp.offset < ends[tp.partition]]

        while behind():
            assert time.monotonic() < deadline, f"{topic} stuck; read {out}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out[message.partition()].append((message.offset(), message.value()))
        return out
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


# --------------------------------------------------------------------------- group consumers
#
# A consumer group member in its own process, so a test can close it, kill -9 it, or let it
# stall, and several client libraries can share one group. The process reports what happens
# as JSON lines on stdout and takes commands on stdin:
#
#   events   {"ev": "ready" | "assignment" | "assigned" | "revoked" | "lost" | "batch" |
#             "committed" | "commit_failed" | "error" | "closed", "t": time.monotonic(), ...}
#            "assignment" carries the partitions the consumer holds after a change, "batch"
#            the records it processed ([topic, partition, offset, value]), "committed" the
#            offsets of a batch acknowledged by the broker ([topic, partition, next offset]).
#   commands "close" (close the consumer as an application would, then exit 0),
#            "die-after-batch" (process the next non-empty batch, then SIGKILL itself before
#            committing it), "stall SECONDS" (stop polling that long).

WORKER_SCRIPT = "from e2e.support import group_worker_main; group_worker_main()"
REPO_ROOT = Path(__file__).resolve().parents[1]


class GroupWorker:
    """One consumer process (see above) and the events it has reported so far."""

    def __init__(self, spec: dict, workdir: Path) -> None:
        self.spec = spec
        self.name = spec.get("client_id") or spec["client"]
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"{self.name}-{uuid.uuid4().hex[:6]}.stderr"
        self.events: list[dict] = []
        self._cond = threading.Condition()
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT, json.dumps(spec)], cwd=REPO_ROOT,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"ev": "exit", "t": time.monotonic()})
            self._cond.notify_all()

    # --- observing

    def of(self, kind: str) -> list[dict]:
        with self._cond:
            return [e for e in self.events if e["ev"] == kind]

    def wait_for(self, predicate: Callable[[dict], object], timeout: float, what: str) -> dict:
        """The first event (already seen or still to come) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name}: no {what} within {timeout} s; events: "
                                         f"{self.summary()}\n{self.tail()}")
                self._cond.wait(left)

    def assignment(self) -> set[tuple[str, int]]:
        """The partitions held according to the last report."""
        reports = self.of("assignment")
        return {tuple(tp) for tp in reports[-1]["tps"]} if reports else set()

    def wait_assignment(self, predicate: Callable[[set], object], timeout: float,
                        what: str, after: float = 0.0) -> dict:
        """The first assignment report after `after` (monotonic time) that fits."""
        return self.wait_for(
            lambda e: e["ev"] == "assignment" and e["t"] >= after and
            predicate({tuple(tp) for tp in e["tps"]}), timeout, what)

    def summary(self) -> str:
        with self._cond:
            events = list(self.events)
        keep = [e for e in events if e["ev"] not in ("batch", "committed")]
        return json.dumps(keep[-25:]) + f" (+{len(events) - len(keep)} batch/commit events)"

    def tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace").splitlines()
        return f"--- stderr of {self.name}:\n" + "\n".join(text[-lines:])

    # --- controlling

    def send(self, command: str) -> None:
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self, timeout: float = 30) -> None:
        """Ask the consumer to close itself (as an application shutting down does)."""
        self.send("close")
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not close within {timeout} s\n"
                                 + self.tail()) from None
        assert code == 0, f"{self.name} exited with {code}\n{self.tail()}"

    def kill(self) -> None:
        """kill -9: no LeaveGroup, no commit, sockets just vanish."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class WorkerPool:
    """Starts workers with common defaults; `shutdown()` kills whatever is left."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workers: list[GroupWorker] = []

    def start(self, client: str, bootstrap: str, group: str, topics: list[str],
              **spec: object) -> GroupWorker:
        full = {"client": client, "bootstrap": bootstrap, "group": group, "topics": topics,
                "client_id": f"{client}-{len(self.workers)}", "session_ms": 6000,
                "heartbeat_ms": 500, "max_poll_ms": 30000, "commit": "batch",
                "assignor": None, "instance_id": None, "config": {}}
        full.update(spec)
        worker = GroupWorker(full, self.workdir)
        self.workers.append(worker)
        return worker

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.kill()


def group_worker_main() -> None:
    spec = json.loads(sys.argv[1])
    commands: queue.Queue[str] = queue.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("close")  # the test process went away

    threading.Thread(target=read_commands, daemon=True).start()
    runner = {"kp": _kp_worker, "aio": _aio_worker, "ck": _ck_worker}[spec["client"]]
    runner(spec, commands)


def _emit(kind: str, **fields: object) -> None:
    fields.update(ev=kind, t=time.monotonic())
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class _Loop:
    """What every worker does around its client: commands, assignment reports, batches."""

    def __init__(self, spec: dict, commands: queue.Queue) -> None:
        self.spec = spec
        self.commands = commands
        self.reported: list = []
        self.die_after_batch = False
        self.errors: set[str] = set()

    def next_command(self) -> str | None:
        """Handle commands that need no client; return "close" or None."""
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return None
            if command == "close":
                return command
            if command == "die-after-batch":
                self.die_after_batch = True
            elif command.startswith("stall "):
                _emit("stalled", seconds=float(command.split()[1]))
                time.sleep(float(command.split()[1]))
                _emit("resumed")

    def report_assignment(self, tps: Iterable) -> None:
        current = sorted({(tp[0], tp[1]) for tp in tps})
        if current != self.reported:
            self.reported = current
            _emit("assignment", tps=current)

    def processed(self, recs: list[list]) -> None:
        _emit("batch", recs=recs)
        if self.die_after_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    def error(self, text: str, **fields: object) -> None:
        if text not in self.errors:
            self.errors.add(text)
            _emit("error", error=text, **fields)


def _next_offsets(recs: list[list]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset, _ in recs:
        out[(topic, partition)] = max(out.get((topic, partition), -1), offset + 1)
    return out


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


def _kp_worker(spec: dict, commands: queue.Queue) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor,
                 "cooperative-sticky": CooperativeStickyAssignor}
    config = {"bootstrap_servers": spec["bootstrap"], "group_id": spec["group"],
              "client_id": spec["client_id"], "auto_offset_reset": "earliest",
              "enable_auto_commit": spec["commit"] == "auto",
              "session_timeout_ms": spec["session_ms"],
              "heartbeat_interval_ms": spec["heartbeat_ms"],
              "max_poll_interval_ms": spec["max_poll_ms"],
              "group_instance_id": spec["instance_id"]}
    if spec["assignor"]:
        config["partition_assignment_strategy"] = [assignors[n] for n in spec["assignor"]]
    config.update(spec["config"])
    loop = _Loop(spec, commands)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked) -> None:
            _emit("revoked", tps=sorted((tp.topic, tp.partition) for tp in revoked))

        def on_partitions_assigned(self, assigned) -> None:
            _emit("assigned", tps=sorted((tp.topic, tp.partition) for tp in assigned))

        def on_partitions_lost(self, lost) -> None:
            _emit("lost", tps=sorted((tp.topic, tp.partition) for tp in lost))

    consumer = KafkaConsumer(**config)
    consumer.subscribe(spec["topics"], listener=Listener())
    _emit("ready")
    while loop.next_command() != "close":
        try:
            polled = consumer.poll(timeout_ms=200)
        except KafkaError as exc:
            loop.error(type(exc).__name__, detail=str(exc))
            time.sleep(0.2)
            continue
        loop.report_assignment((tp.topic, tp.partition) for tp in consumer.assignment())
        recs = [[m.topic, m.partition, m.offset, _text(m.value)]
                for msgs in polled.values() for m in msgs]
        if not recs:
            continue
        loop.processed(recs)
        if spec["commit"] != "batch":
            continue
        offsets = _next_offsets(recs)
        try:
            consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                             for (t, p), o in offsets.items()})
        except KafkaError as exc:
            _emit("commit_failed", error=type(exc).__name__, detail=str(exc))
        else:
            _emit("committed", offsets=[[t, p, o] for (t, p), o in offsets.items()])
    consumer.close(autocommit=False)
    _emit("closed")


def _aio_worker(spec: dict, commands: queue.Queue) -> None:
    asyncio.run(_aio_worker_main(spec, commands))


async def _aio_worker_main(spec: dict, commands: queue.Queue) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    config = {"bootstrap_servers": spec["bootstrap"], "group_id": spec["group"],
              "client_id": spec["client_id"], "auto_offset_reset": "earliest",
              "enable_auto_commit": spec["commit"] == "auto",
              "session_timeout_ms": spec["session_ms"],
              "heartbeat_interval_ms": spec["heartbeat_ms"],
              "max_poll_interval_ms": spec["max_poll_ms"],
              "group_instance_id": spec["instance_id"]}
    if spec["assignor"]:
        config["partition_assignment_strategy"] = tuple(assignors[n] for n in spec["assignor"])
    config.update(spec["config"])
    loop = _Loop(spec, commands)
    # Process-and-commit and revocation exclude each other, so a batch is committed (or its
    # commit fails) before its partitions can move: the pattern aiokafka documents.
    lock = asyncio.Lock()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked) -> None:
            async with lock:
                _emit("revoked", tps=sorted((tp.topic, tp.partition) for tp in revoked))

        async def on_partitions_assigned(self, assigned) -> None:
            _emit("assigned", tps=sorted((tp.topic, tp.partition) for tp in assigned))

    consumer = AIOKafkaConsumer(**config)
    await consumer.start()
    consumer.subscribe(spec["topics"], listener=Listener())
    _emit("ready")

    while loop.next_command() != "close":
        try:
            polled = await consumer.getmany(timeout_ms=200)
        except KafkaError as exc:
            loop.error(type(exc).__name__, detail=str(exc))
            await asyncio.sleep(0.2)
            continue
        # No await between getmany returning and taking the lock: the records are still ours.
        async with lock:
            loop.report_assignment((tp.topic, tp.partition) for tp in consumer.assignment())
            recs = [[m.topic, m.partition, m.offset, _text(m.value)]
                    for msgs in polled.values() for m in msgs]
            if not recs:
                continue
            loop.processed(recs)
            if spec["commit"] != "batch":
                continue
            offsets = _next_offsets(recs)
            try:
                await consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
            except KafkaError as exc:
                _emit("commit_failed", error=type(exc).__name__, detail=str(exc))
            else:
                _emit("committed", offsets=[[t, p, o] for (t, p), o in offsets.items()])
    await consumer.stop()
    _emit("closed")


def _ck_worker(spec: dict, commands: queue.Queue) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
              "client.id": spec["client_id"], "auto.offset.reset": "earliest",
              "enable.auto.commit": spec["commit"] == "auto",
              "session.timeout.ms": spec["session_ms"],
              "heartbeat.interval.ms": spec["heartbeat_ms"],
              "max.poll.interval.ms": spec["max_poll_ms"]}
    if spec["assignor"]:
        config["partition.assignment.strategy"] = ",".join(spec["assignor"])
    if spec["instance_id"]:
        config["group.instance.id"] = spec["instance_id"]
    config.update(spec["config"])
    loop = _Loop(spec, commands)

    def tps(partitions: list) -> list:
        return sorted((tp.topic, tp.partition) for tp in partitions)

    def on_assign(consumer, partitions: list) -> None:
        _emit("assigned", tps=tps(partitions))

    def on_revoke(consumer, partitions: list) -> None:
        _emit("revoked", tps=tps(partitions))

    def on_lost(consumer, partitions: list) -> None:
        _emit("lost", tps=tps(partitions))

    consumer = Consumer(config)
    consumer.subscribe(spec["topics"], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_lost)
    _emit("ready")
    while loop.next_command() != "close":
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        loop.report_assignment((tp.topic, tp.partition) for tp in consumer.assignment())
        recs = []
        for m in msgs:
            if m.error():
                err = m.error()
                loop.error(err.name(), code=err.code(), fatal=err.fatal(), detail=err.str())
            else:
                recs.append([m.topic(), m.partition(), m.offset(), _text(m.value())])
        if not recs:
            continue
        loop.processed(recs)
        if spec["commit"] != "batch":
            continue
        offsets = _next_offsets(recs)
        try:
            result = consumer.commit(offsets=[TopicPartition(t, p, o)
                                              for (t, p), o in offsets.items()],
                                     asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            _emit("commit_failed", error=err.name(), detail=err.str())
            continue
        failed = [(tp.topic, tp.partition, tp.error.name()) for tp in result if tp.error]
        if failed:
            _emit("commit_failed", error=failed[0][2], detail=str(failed))
        else:
            _emit("committed", offsets=[[t, p, o] for (t, p), o in offsets.items()])
    consumer.close()
    _emit("closed")


def wait_split(workers: list[GroupWorker], partitions: set[tuple[str, int]], timeout: float,
               hold: float = 1.0) -> list[set[tuple[str, int]]]:
    """Wait until the workers hold disjoint, non-empty sets of partitions that together are
    exactly `partitions`, unchanged for `hold` seconds; return those sets."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    last: list[set] | None = None
    while True:
        current = [w.assignment() for w in workers]
        fits = all(current) and sum(map(len, current)) == len(partitions) and \
            set().union(*current) == partitions
        now = time.monotonic()
        if fits and current == last:
            assert since is not None
            if now - since >= hold:
                return current
        elif fits:
            since, last = now, current
        else:
            since, last = None, None
        if now > deadline:
            raise AssertionError(
                f"no stable split of {len(partitions)} partitions within {timeout} s: "
                + "; ".join(f"{w.name}={sorted(a)}" for w, a in zip(workers, current, strict=True))
                + "\n" + "\n".join(w.summary() for w in workers))
        time.sleep(0.1)


def ck_produce_numbered(bootstrap: str, topic: str, numbers: Iterable[int], partitions: int,
                        rate: float | None = None, stop: threading.Event | None = None
                        ) -> dict[tuple[int, int], int]:
    """Produce the value str(n) to partition n % partitions for each n (at most `rate` per
    second, until `stop` is set); return {(partition, offset): n} from the delivery reports."""
    producer = ck_producer(bootstrap)
    delivered: dict[tuple[int, int], int] = {}
    errors: list[str] = []

    def report(n: int) -> Callable:
        def callback(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered[(msg.partition(), msg.offset())] = n
        return callback

    started = time.monotonic()
    for index, n in enumerate(numbers):
        if stop is not None and stop.is_set():
            break
        if rate:
            ahead = started + index / rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        producer.produce(topic, value=str(n).encode(), partition=n % partitions,
                         on_delivery=report(n))
        producer.poll(0)
    assert producer.flush(30) == 0, "records not delivered within 30 s"
    assert not errors, f"delivery errors: {errors[:3]}"
    return delivered


def ck_describe_group(bootstrap: str, group: str):
    return ck_admin(bootstrap).describe_consumer_groups([group], request_timeout=15)[group] \
        .result(timeout=20)


def ck_committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as the admin API lists them."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = ck_admin(bootstrap).list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=15)[group]
    result = future.result(timeout=20)
    for tp in result.topic_partitions:
        assert tp.error is None, f"{tp.topic}[{tp.partition}]: {tp.error}"
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def segment_batches(data_dir: Path, topic: str, partition: int = 0
                    ) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every record batch in a (stopped) node's segment files for the partition, in offset
    order, as stored."""
    for path in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        for position, header in iter_batches(data):
            yield header, data[position:position + header.size]
