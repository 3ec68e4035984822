"""Consume throughput of the Moldau consumer against kafka-python, aiokafka and confluent-kafka.

    .venv/bin/python -m bench.client_consumer [--bootstrap HOST:PORT] [--records 300000]
        [--sizes 100 1024] [--batch-size 16384] [--repeat 3] [--profile DIR]

Starts a broker on a free loopback port (unless --bootstrap is given). For each record size
it fills a one-partition topic once with fixed-size records (confluent-kafka, batch.size
16 KiB, linger.ms 5, no compression), then each client reads all of them from offset 0:
assign, seek to the beginning, and poll until the last offset is reached, without a group
(no join time is measured). Every client gets the same fetch settings where it has them
(fetch.min.bytes 1, max.partition.fetch.bytes 1 MiB) and polls with its usual batch call
and default batch limit: Moldau `poll()` (max.poll.records 500), kafka-python
`poll(timeout_ms, max_records=500)`, aiokafka `getmany()`, confluent-kafka
`consume(num_messages=500)`. Every record's value is touched (records and bytes counted
and checked), so lazy record objects gain nothing. Each measurement runs in its own process
and starts after the client has connected (an end-offset look-up); with --repeat, clients
take turns and each one's best run counts (the broker shares the machine, so single runs
are noisy). confluent-kafka (librdkafka, in C) is the native reference.

With --profile DIR, the Python clients' workers run under cProfile and leave
DIR/<client>-<size>.pstats behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from bench.confluent_throughput import free_port, start_broker

CLIENTS = ["moldau", "moldau-async", "kafka-python", "aiokafka", "confluent-kafka"]
MB = 1024 * 1024
PARTITION_FETCH_BYTES = 1048576
POLL_RECORDS = 500

# (elapsed seconds, records seen, value bytes seen)
Result = tuple[float, int, int]


# ----------------------------------------------------------------------------- workers


def run_moldau(bootstrap: str, topic: str, end: int) -> Result:
    from moldau.client import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                   "fetch.min.bytes": 1,
                   "max.partition.fetch.bytes": PARTITION_FETCH_BYTES}) as consumer:
        assert consumer.end_offsets([tp])[tp] == end
        count = total = 0
        last = -1
        started = time.perf_counter()
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        poll = consumer.poll
        while last < end - 1:
            for record in poll(1.0):
                count += 1
                total += len(record.value)
                last = record.offset
        return time.perf_counter() - started, count, total


def run_moldau_async(bootstrap: str, topic: str, end: int) -> Result:
    from moldau.client import AsyncConsumer, TopicPartition

    async def main() -> Result:
        tp = TopicPartition(topic, 0)
        async with AsyncConsumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                                  "fetch.min.bytes": 1,
                                  "max.partition.fetch.bytes": PARTITION_FETCH_BYTES}
                                 ) as consumer:
            assert (await consumer.end_offsets([tp]))[tp] == end
            count = total = 0
            last = -1
            started = time.perf_counter()
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            poll = consumer.poll
            while last < end - 1:
                for record in await poll(1.0):
                    count += 1
                    total += len(record.value)
                    last = record.offset
            return time.perf_counter() - started, count, total
    return asyncio.run(main())


def run_kafka_python(bootstrap: str, topic: str, end: int) -> Result:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_min_bytes=1,
                             max_partition_fetch_bytes=PARTITION_FETCH_BYTES)
    try:
        assert consumer.end_offsets([tp])[tp] == end
        count = total = 0
        last = -1
        started = time.perf_counter()
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        poll = consumer.poll
        while last < end - 1:
            for records in poll(timeout_ms=1000, max_records=POLL_RECORDS).values():
                for record in records:
                    count += 1
                    total += len(record.value)
                    last = record.offset
        return time.perf_counter() - started, count, total
    finally:
        consumer.close(autocommit=False)


def run_aiokafka(bootstrap: str, topic: str, end: int) -> Result:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> Result:
        tp = TopicPartition(topic, 0)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, fetch_min_bytes=1,
                                    max_partition_fetch_bytes=PARTITION_FETCH_BYTES)
        await consumer.start()
        try:
            assert (await consumer.end_offsets([tp]))[tp] == end
            count = total = 0
            last = -1
            started = time.perf_counter()
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            getmany = consumer.getmany
            while last < end - 1:
                for records in (await getmany(timeout_ms=1000)).values():
                    for record in records:
                        count += 1
                        total += len(record.value)
                        last = record.offset
            return time.perf_counter() - started, count, total
        finally:
            await consumer.stop()
    return asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, end: int) -> Result:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    # group.id is mandatory in the Python binding; nothing joins or commits.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.min.bytes": 1,
                         "max.partition.fetch.bytes": PARTITION_FETCH_BYTES})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1] == end
        count = total = 0
        last = -1
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        consume = consumer.consume
        while last < end - 1:
            for message in consume(num_messages=POLL_RECORDS, timeout=1.0):
                if message.error() is not None:
                    raise SystemExit(f"consume failed: {message.error()}")
                count += 1
                total += len(message.value())
                last = message.offset()
        return time.perf_counter() - started, count, total
    finally:
        consumer.close()


WORKERS: dict[str, Callable[[str, str, int], Result]] = {
    "moldau": run_moldau, "moldau-async": run_moldau_async,
    "kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
    "confluent-kafka": run_confluent,
}


def worker(args: argparse.Namespace) -> None:
    run = WORKERS[args.worker]
    if args.profile and args.worker != "confluent-kafka":
        import cProfile

        profiler = cProfile.Profile()
        result = profiler.runcall(run, args.bootstrap, args.topic, args.records)
        profiler.dump_stats(os.path.join(args.profile, f"{args.worker}-{args.size}.pstats"))
    else:
        result = run(args.bootstrap, args.topic, args.records)
    elapsed, count, total = result
    print(json.dumps({"elapsed": elapsed, "records": count, "bytes": total}))


# ----------------------------------------------------------------------------- driver


def fill(bootstrap: str, topic: str, records: int, size: int, batch_size: int) -> None:
    """A fresh one-partition topic holding `records` records of `size` bytes."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": batch_size, "compression.type": "none",
                         "queue.buffering.max.kbytes": 1048576})
    payload = bytes(65 + (i * 7) % 26 for i in range(size))  # letters, like Kafka's tool
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) or failures:
        raise SystemExit(f"filling {topic} failed: {failures[:3]}")


def measure(client: str, bootstrap: str, topic: str, size: int, records: int,
            args: argparse.Namespace) -> tuple[float, float]:
    command = [sys.executable, "-m", "bench.client_consumer", "--worker", client,
               "--bootstrap", bootstrap, "--topic", topic, "--size", str(size),
               "--records", str(records)]
    if args.profile:
        command += ["--profile", args.profile]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{client} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if (result["records"], result["bytes"]) != (records, records * size):
        raise SystemExit(f"{client} read {result['records']} records and {result['bytes']} "
                         f"bytes, want {records} and {records * size}")
    elapsed = result["elapsed"]
    return records / elapsed, records * size / elapsed / MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--records", type=int, default=300000, help="records per topic")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--batch-size", type=int, default=16384,
                        help="batch.size of the producer that fills the topics")
    parser.add_argument("--clients", nargs="+", default=CLIENTS, choices=CLIENTS)
    parser.add_argument("--repeat", type=int, default=1, help="runs per client (best counts)")
    parser.add_argument("--profile", help="write cProfile stats of the workers here")
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        args.profile = os.path.abspath(args.profile)

    broker = None
    with tempfile.TemporaryDirectory(prefix="moldau-bench-") as data_dir:
        bootstrap = args.bootstrap
        if bootstrap is None:
            port = free_port()
            broker = start_broker(data_dir, port)
            bootstrap = f"127.0.0.1:{port}"
        try:
            print(f"broker {bootstrap}; {args.records} records per size on one partition, "
                  f"written in {args.batch_size}-byte batches; fetch.min.bytes=1, "
                  f"max.partition.fetch.bytes={PARTITION_FETCH_BYTES}")
            rows: list[tuple[str, int, float, float]] = []
            for size in args.sizes:
                topic = f"bench-consume-{size}-{uuid.uuid4().hex[:6]}"
                fill(bootstrap, topic, args.records, size, args.batch_size)
                best: dict[str, tuple[float, float]] = {}
                for _ in range(max(args.repeat, 1)):
                    for client in args.clients:
                        result = measure(client, bootstrap, topic, size, args.records, args)
                        if client not in best or result[0] > best[client][0]:
                            best[client] = result
                rows.extend((client, size, *best[client]) for client in args.clients)
            reference = {size: rate for client, size, rate, _ in rows if client == "moldau"}
            print(f"{'client':<17}{'record':>8}{'records/s':>13}{'MB/s':>9}{'vs moldau':>11}")
            for client, size, rate, mbps in rows:
                ratio = f"{rate / reference[size]:.2f}x" if size in reference else "-"
                print(f"{client:<17}{size:>7}B{rate:>13,.0f}{mbps:>9.1f}{ratio:>11}",
                      flush=True)
        finally:
            if broker is not None:
                broker.send_signal(signal.SIGTERM)
                broker.wait(30)


if __name__ == "__main__":
    main()
