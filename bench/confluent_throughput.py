"""Produce and fetch throughput with confluent-kafka (librdkafka) against one Moldau broker.

    .venv/bin/python -m bench.confluent_throughput [--records 200000] [--size 1024]

Starts a broker on a free loopback port with a temporary log dir, produces fixed-size
records with acks=1 (batched by librdkafka), reads them all back from the beginning, and
prints records/s and MB/s for both, with the broker's resident memory at rest and after.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_broker(data_dir: str, port: int) -> subprocess.Popen[str]:
    moldau = os.path.join(os.path.dirname(sys.executable), "moldau")
    process = subprocess.Popen(
        [moldau, "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data_dir}", "--override", "http.listener=",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "moldau broker ready" not in line:
        raise SystemExit(f"broker did not start: {line!r}")
    return process


def produce(bootstrap: str, topic: str, records: int, size: int,
            client: dict[str, object] | None = None) -> float:
    """Seconds to produce and flush; `client` adds settings (security, say)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "batch.size": 1048576, "queue.buffering.max.kbytes": 1048576,
                         "enable.idempotence": False, **(client or {})})
    payload = os.urandom(size)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    return elapsed


def consume(bootstrap: str, topic: str, records: int,
            client: dict[str, object] | None = None) -> float:
    """Seconds to read `records` from the start of partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760, **(client or {})})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        # No more than are left: consume() waits out its timeout for a batch it cannot fill.
        batch = consumer.consume(min(10000, records - seen), timeout=10)
        if not batch:
            raise SystemExit(f"consumer stalled at {seen} records")
        seen += sum(1 for message in batch if message.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="moldau-bench-") as data_dir:
        port = free_port()
        broker = start_broker(data_dir, port)
        bootstrap = f"127.0.0.1:{port}"
        try:
            time.sleep(1)
            idle_rss = rss_mib(broker.pid)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(30)
            megabytes = args.records * args.size / 1e6
            produce_s = produce(bootstrap, "bench", args.records, args.size)
            consume_s = consume(bootstrap, "bench", args.records)
            loaded_rss = rss_mib(broker.pid)
        finally:
            broker.send_signal(signal.SIGTERM)
            broker.wait(60)
    print(f"records: {args.records} x {args.size} B on one partition, acks=1")
    print(f"produce: {args.records / produce_s:,.0f} records/s, {megabytes / produce_s:.1f} MB/s")
    print(f"fetch:   {args.records / consume_s:,.0f} records/s, {megabytes / consume_s:.1f} MB/s")
    print(f"broker RSS: {idle_rss:.1f} MiB at rest, {loaded_rss:.1f} MiB after the run")


if __name__ == "__main__":
    main()
