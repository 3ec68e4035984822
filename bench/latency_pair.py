"""End-to-end latency at a fixed rate: a librdkafka producer and consumer in two processes.

    python -m bench.latency_pair consume --bootstrap H:P --topic T --count N --skip S
    python -m bench.latency_pair produce --bootstrap H:P --topic T --count N --rate R --size B

The producer stamps each value with CLOCK_MONOTONIC (shared by all processes of the machine)
at the moment it hands the record to librdkafka, paced open-loop at R records/s; the
consumer subtracts that stamp from its own clock when poll() returns the record. Separate
processes keep the two from competing for one interpreter lock. The consumer prints "ready"
once it has issued fetches, and at the end one JSON line with the percentiles.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

STAMP = struct.Struct(">qq")  # send time (ns), sequence number


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def consume(bootstrap: str, topic: str, count: int, skip: int, idle: float) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    # A second of empty polls: connection set up, first fetch outstanding at the broker.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        consumer.poll(0.1)
    print("ready", flush=True)
    latencies: list[float] = []
    received = 0
    last = time.monotonic()
    while received < count and time.monotonic() - last < idle:
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            continue
        now = time.monotonic_ns()
        last = time.monotonic()
        sent, sequence = STAMP.unpack_from(message.value())
        received += 1
        if sequence >= skip:  # the first second warms caches and connections
            latencies.append((now - sent) / 1e6)
    consumer.close()
    latencies.sort()
    return {"received": received, "samples": len(latencies),
            "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
            "p999": percentile(latencies, 0.999),
            "max": latencies[-1] if latencies else math.nan}


def produce(bootstrap: str, topic: str, count: int, rate: float, size: int) -> None:
    # linger.ms=0: a record leaves as soon as it is handed over, so the figure is the broker's.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                         "enable.idempotence": False})
    producer.list_topics(topic, timeout=30)
    padding = b"x" * max(0, size - STAMP.size)
    start = time.monotonic()
    for sequence in range(count):
        delay = start + sequence / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, STAMP.pack(time.monotonic_ns(), sequence) + padding,
                         partition=0)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        raise SystemExit(f"{left} records not delivered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["consume", "produce"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--idle", type=float, default=15.0)
    args = parser.parse_args()
    if args.role == "consume":
        result = consume(args.bootstrap, args.topic, args.count, args.skip, args.idle)
        print(json.dumps(result), flush=True)
    else:
        produce(args.bootstrap, args.topic, args.count, args.rate, args.size)
    sys.exit(0)


if __name__ == "__main__":
    main()
