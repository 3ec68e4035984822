"""What TLS and SASL cost: produce and fetch over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512)
listeners of one Moldau broker and of one Apache Kafka broker (the release e2e/kafka_dist.py
fetches), with librdkafka (confluent-kafka) as the client.

    python -m bench.tls_cost [RECORDS] [RECORD_BYTES ...] [--repeats N]
    (defaults: 200000 records, of 1000 B and of 100 B, 3 repeats)

Both brokers run side by side with the settings of bench/brokers.py and the same PKCS12
keystore (an EC P-256 certificate); every row is measured on one broker and then on the
other, the order swapped each repeat, so load from elsewhere on the machine falls on both
alike. Produce is acks=1 into a topic of one partition created beforehand; fetch reads the
same records back from offset 0, page cache hot. Fetch over TLS cannot use sendfile: the
broker reads each log region and writes it through the TLS transport. Figures are medians
of the repeats with [lowest-highest]; MB is 10^6 bytes of record values.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench import brokers, machine, procs
from bench.confluent_throughput import consume, produce
from e2e.certs import PASSWORD, CertAuthority
from e2e.kafka_dist import add_scram_user, ensure_artifacts, kafka_version

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER, USER_PASSWORD = "bench", "bench-secret"
READY_TIMEOUT = 60.0


@dataclass
class Result:
    """One workload on one broker over the repeats: seconds per run."""

    records: int
    size: int
    seconds: list[float] = field(default_factory=list)

    def rates(self) -> list[float]:
        return sorted(self.records / s for s in self.seconds)

    def median(self) -> float:
        return statistics.median(self.rates())

    def show(self) -> str:
        megabytes = [rate * self.size / 1e6 for rate in self.rates()]
        low, high = megabytes[0], megabytes[-1]
        return (f"{self.median() * self.size / 1e6:,.1f} MB/s · {self.median() / 1e3:,.1f} k "
                f"rec/s [{low:,.1f}–{high:,.1f}]")


def broker_settings(keystore: Path) -> dict[str, str]:
    """What the SSL and SASL_SSL listeners need, in Kafka's names (both brokers read them)."""
    return {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": PASSWORD, "sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"}


def client_settings(protocol: str, ca_file: str) -> dict[str, object]:
    settings: dict[str, object] = {"security.protocol": protocol}
    if protocol != "PLAINTEXT":
        settings["ssl.ca.location"] = ca_file
    if protocol == "SASL_SSL":
        settings |= {"sasl.mechanisms": MECHANISM, "sasl.username": USER,
                     "sasl.password": USER_PASSWORD}
    return settings


@dataclass
class Target:
    """A started broker and how a client reaches each of its listeners."""

    broker: brokers.BenchBroker
    ports: dict[str, int]
    clients: dict[str, dict[str, object]]

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def wait_ready(self) -> None:
        """Until every listener answers Metadata (SCRAM credentials reach the listener through
        the metadata log, a moment after kafka-configs returns)."""
        deadline = time.monotonic() + READY_TIMEOUT
        for protocol in PROTOCOLS:
            admin = AdminClient({"bootstrap.servers": self.bootstrap(protocol),
                                 **self.clients[protocol]})
            while True:
                try:
                    admin.list_topics(timeout=5)
                    break
                except KafkaException as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.broker.name} {protocol} listener not "
                                           f"answering: {exc}") from None
                    time.sleep(0.5)

    def create(self, topics: list[str]) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap("PLAINTEXT")})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            future.result(60)


def start(broker: brokers.BenchBroker, settings: dict[str, str], ca_file: str) -> Target:
    ports = {"PLAINTEXT": broker.port,
             **broker.add_listeners(["SSL", "SASL_SSL"], settings)}
    broker.start()
    answer = add_scram_user(broker.bootstrap, USER, USER_PASSWORD, MECHANISM)
    assert answer == f"Completed updating config for user {USER}.", answer
    target = Target(broker, ports, {p: client_settings(p, ca_file) for p in PROTOCOLS})
    target.wait_ready()
    return target


def measure(targets: list[Target], sizes: list[int], count: int, repeats: int
            ) -> dict[tuple[str, str, int, str], Result]:
    """(broker, protocol, size, produce|fetch) -> its runs."""
    results: dict[tuple[str, str, int, str], Result] = {}
    for target in targets:
        target.create([f"{p.lower()}-{size}-{rep}" for p in PROTOCOLS for size in sizes
                       for rep in range(repeats)])
    for size in sizes:
        for rep in range(repeats):
            order = targets if rep % 2 == 0 else targets[::-1]
            for protocol in PROTOCOLS:
                topic = f"{protocol.lower()}-{size}-{rep}"
                for target in order:
                    name, bootstrap = target.broker.name, target.bootstrap(protocol)
                    client = target.clients[protocol]
                    runs = {"produce": produce(bootstrap, topic, count, size, client),
                            "fetch": consume(bootstrap, topic, count, client)}
                    for op, seconds in runs.items():
                        results.setdefault((name, protocol, size, op),
                                           Result(count, size)).seconds.append(seconds)
                        print(f"  {name:6} {protocol:9} {size:5} B {op:7} run {rep + 1}: "
                              f"{count / seconds:,.0f} rec/s", flush=True)
    return results


def table(results: dict[tuple[str, str, int, str], Result], sizes: list[int]) -> str:
    header = ["Workload", "Moldau", "Kafka", "Moldau/Kafka", "Moldau vs PLAINTEXT",
              "Kafka vs PLAINTEXT"]
    rows = []
    for size in sizes:
        for op in ("produce", "fetch"):
            for protocol in PROTOCOLS:
                moldau, kafka = (results[(b, protocol, size, op)] for b in ("Moldau", "Kafka"))
                plain = [results[(b, "PLAINTEXT", size, op)].median()
                         for b in ("Moldau", "Kafka")]
                rows.append([f"{op.capitalize()} {size} B over {protocol}", moldau.show(),
                             kafka.show(), f"{moldau.median() / kafka.median():.2f}×",
                             f"{moldau.median() / plain[0]:.0%}",
                             f"{kafka.median() / plain[1]:.0%}"])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(  # noqa: E731
        c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def _loads(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=int, nargs="?", default=200000)
    parser.add_argument("sizes", type=int, nargs="*", metavar="RECORD_BYTES")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = args.sizes or [1000, 100]
    ensure_artifacts()
    work = Path(tempfile.mkdtemp(prefix="moldau-tls-bench-"))
    ca = CertAuthority()
    keystore = ca.write_pkcs12(ca.issue("localhost", server=True), work / "server.p12")
    ca_file = str(ca.write_ca(work / "ca.pem"))
    settings = broker_settings(keystore)
    started: list[brokers.BenchBroker] = []
    before = machine.load_average()
    began = time.monotonic()
    try:
        targets = []
        for broker in (brokers.MoldauBroker(work / "moldau"),
                       brokers.KafkaBroker(work / "kafka")):
            started.append(broker)
            targets.append(start(broker, settings, ca_file))
        print(f"{args.records} records a run, {args.repeats} runs; Moldau and Apache Kafka "
              f"{kafka_version()} side by side, one partition, acks=1", flush=True)
        results = measure(targets, sizes, args.records, args.repeats)
    finally:
        for broker in started:
            try:
                broker.stop()
            except RuntimeError:
                broker.kill9()
        procs.kill_all()
        brokers.remove(work)
    after = machine.load_average()
    print(f"\n{table(results, sizes)}\n")
    print(f"{time.monotonic() - began:.0f} s on {os.cpu_count()} cores; load average "
          f"(1/5/15 min) before {_loads(before)}, after {_loads(after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
