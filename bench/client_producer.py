"""Produce throughput of the Moldau producer against kafka-python and aiokafka.

    .venv/bin/python -m bench.client_producer [--bootstrap HOST:PORT] [--records 300000]
        [--batch-size 16384] [--linger-ms 5] [--sizes 100 1024] [--repeat 3]

Starts a broker on a free loopback port (unless --bootstrap is given), then for each record
size sends the same number of fixed-size records with each client to a fresh one-partition
topic and reports records/s and MB/s. Every client gets the same settings: acks=all,
idempotence on, the given linger.ms and batch.size. Each measurement runs in its own
process, after a warm-up record, and covers the sends plus the final flush; with --repeat,
clients take turns and each one's best run counts (the broker shares the machine, so single
runs are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from bench.confluent_throughput import free_port, start_broker

CLIENTS = ["moldau", "moldau-async", "kafka-python", "aiokafka"]
MB = 1024 * 1024


# ----------------------------------------------------------------------------- workers


def run_moldau(bootstrap: str, topic: str, count: int, payload: bytes,
               settings: dict[str, int]) -> float:
    from moldau.client import Producer

    with Producer({"bootstrap.servers": bootstrap, "acks": "all",
                   "enable.idempotence": True, "linger.ms": settings["linger_ms"],
                   "batch.size": settings["batch_size"]}) as producer:
        producer.send(topic, payload).get(30)
        send = producer.send
        started = time.perf_counter()
        for _ in range(count):
            send(topic, payload)
        producer.flush()
        return time.perf_counter() - started


def run_moldau_async(bootstrap: str, topic: str, count: int, payload: bytes,
                     settings: dict[str, int]) -> float:
    from moldau.client import AsyncProducer

    async def main() -> float:
        async with AsyncProducer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True,
                                  "linger.ms": settings["linger_ms"],
                                  "batch.size": settings["batch_size"]}) as producer:
            await (await producer.send(topic, payload))
            send = producer.send
            started = time.perf_counter()
            for _ in range(count):
                await send(topic, payload)
            await producer.flush()
            return time.perf_counter() - started
    return asyncio.run(main())


def run_kafka_python(bootstrap: str, topic: str, count: int, payload: bytes,
                     settings: dict[str, int]) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=settings["linger_ms"],
                             batch_size=settings["batch_size"])
    try:
        producer.send(topic, payload).get(30)
        send = producer.send
        started = time.perf_counter()
        for _ in range(count):
            send(topic, payload)
        producer.flush()
        return time.perf_counter() - started
    finally:
        producer.close()


def run_aiokafka(bootstrap: str, topic: str, count: int, payload: bytes,
                 settings: dict[str, int]) -> float:
    from aiokafka import AIOKafkaProducer

    async def main() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=True,
                                    linger_ms=settings["linger_ms"],
                                    max_batch_size=settings["batch_size"])
        await producer.start()
        try:
            await (await producer.send(topic, payload))
            send = producer.send
            started = time.perf_counter()
            for _ in range(count):
                await send(topic, payload)
            await producer.flush()
            return time.perf_counter() - started
        finally:
            await producer.stop()
    return asyncio.run(main())


WORKERS: dict[str, Callable[[str, str, int, bytes, dict[str, int]], float]] = {
    "moldau": run_moldau, "moldau-async": run_moldau_async,
    "kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
}


def worker(args: argparse.Namespace) -> None:
    payload = bytes(65 + (i * 7) % 26 for i in range(args.size))  # letters, like Kafka's tool
    settings = {"linger_ms": args.linger_ms, "batch_size": args.batch_size}
    elapsed = WORKERS[args.worker](args.bootstrap, args.topic, args.records, payload, settings)
    print(json.dumps({"elapsed": elapsed}))


# ----------------------------------------------------------------------------- driver


def create_topic(bootstrap: str, topic: str) -> None:
    from moldau.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1, 1)


def measure(client: str, bootstrap: str, size: int, records: int,
            args: argparse.Namespace) -> tuple[float, float]:
    topic = f"bench-{client}-{size}-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.client_producer", "--worker", client,
         "--bootstrap", bootstrap, "--topic", topic, "--size", str(size),
         "--records", str(records), "--batch-size", str(args.batch_size),
         "--linger-ms", str(args.linger_ms)],
        capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{client} failed:\n{proc.stderr[-2000:]}")
    elapsed = json.loads(proc.stdout.strip().splitlines()[-1])["elapsed"]
    return records / elapsed, records * size / elapsed / MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--records", type=int, default=300000,
                        help="records per measurement (a third of it for sizes >= 1 KiB)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--clients", nargs="+", default=CLIENTS, choices=CLIENTS)
    parser.add_argument("--repeat", type=int, default=1, help="runs per client (best counts)")
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    broker = None
    with tempfile.TemporaryDirectory(prefix="moldau-bench-") as data_dir:
        bootstrap = args.bootstrap
        if bootstrap is None:
            port = free_port()
            broker = start_broker(data_dir, port)
            bootstrap = f"127.0.0.1:{port}"
        try:
            print(f"broker {bootstrap}; acks=all, idempotence on, linger.ms={args.linger_ms}, "
                  f"batch.size={args.batch_size}")
            print(f"{'client':<14}{'record':>8}{'records':>10}{'records/s':>13}{'MB/s':>9}")
            for size in args.sizes:
                records = args.records if size < 1024 else max(args.records // 3, 1)
                best: dict[str, tuple[float, float]] = {}
                for _ in range(max(args.repeat, 1)):
                    for client in args.clients:
                        result = measure(client, bootstrap, size, records, args)
                        if client not in best or result[0] > best[client][0]:
                            best[client] = result
                for client in args.clients:
                    rate, mbps = best[client]
                    print(f"{client:<14}{size:>7}B{records:>10}{rate:>13,.0f}{mbps:>9.1f}",
                          flush=True)
        finally:
            if broker is not None:
                broker.send_signal(signal.SIGTERM)
                broker.wait(30)


if __name__ == "__main__":
    main()
