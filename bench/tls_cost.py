"""What TLS costs a Moldau broker: produce and fetch over PLAINTEXT and SSL listeners of one
broker, with librdkafka (confluent-kafka) as the client.

    python -m bench.tls_cost [RECORDS] [RECORD_BYTES]   (defaults: 200000 records of 1000 B)

Fetch over TLS cannot use sendfile: the broker reads each log region and writes it through
the TLS transport. Each row is one run: the machine's load moves the figures, so compare rows
of one run, not runs of different days.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from e2e.certs import CertAuthority
from e2e.conftest import Broker
from e2e.support import free_port


def _produce(config: dict[str, object], topic: str, count: int, size: int) -> float:
    producer = Producer({**config, "linger.ms": 5, "batch.size": 262144, "acks": "1",
                         "compression.type": "none"})
    value = b"x" * size
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.monotonic() - started


def _fetch(config: dict[str, object], topic: str, count: int) -> float:
    consumer = Consumer({**config, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    started = time.monotonic()
    while seen < count:
        seen += sum(1 for m in consumer.consume(10000, timeout=1) if m.error() is None)
    elapsed = time.monotonic() - started
    consumer.close()
    return elapsed


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 200000
    size = int(argv[1]) if len(argv) > 1 else 1000
    work = Path(tempfile.mkdtemp(prefix="moldau-tls-bench-"))
    ca = CertAuthority()
    keystore = ca.write_pem_keystore(ca.issue("localhost", server=True), work / "k.pem")
    ca_file = str(ca.write_ca(work / "ca.pem"))
    plain, tls = free_port(), free_port()
    broker = Broker(work / "broker", {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}, port=plain)
    broker.start()
    try:
        megabytes = count * size / 1e6
        print(f"{count} records of {size} B ({megabytes:.0f} MB), one partition")
        for name, config in (
                ("PLAINTEXT", {"bootstrap.servers": f"127.0.0.1:{plain}"}),
                ("SSL", {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                         "ssl.ca.location": ca_file})):
            topic = f"bench-{name.lower()}"
            produce_s = _produce(config, topic, count, size)
            fetch_s = _fetch(config, topic, count)
            print(f"{name:10} produce {megabytes / produce_s:7.1f} MB/s   "
                  f"fetch {megabytes / fetch_s:7.1f} MB/s")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
