"""`moldau perf produce`: producer throughput and latency, reported as Kafka's
ProducerPerformance reports them (a progress line per interval, then totals and latency
percentiles from up to 500000 samples)."""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from moldau.client.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    load_properties_file,
    parse_pairs,
)
from moldau.client.producer import Producer
from moldau.client.types import RecordMetadata

MB = 1024 * 1024
MAX_SAMPLES = 500000


class Stats:
    """Totals, a reporting window and a sample of latencies for the percentiles.

    Completions are recorded on the producer's loop thread, once per record, so the
    bookkeeping there is kept to a few local operations; sums per window are plain lists."""

    def __init__(self, records: int, interval_ms: int, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.start = time.monotonic()
        self.interval = interval_ms / 1000
        self.sampling = max(records // min(max(records, 1), MAX_SAMPLES), 1)
        self.samples: list[float] = []
        self.count = 0
        self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.errors = 0
        # The current window: [start, count, bytes, total latency, max latency].
        self.window = [self.start, 0, 0, 0.0, 0.0]

    def callback(self, index: int, sent: float, size: int
                 ) -> Callable[[RecordMetadata | None, Exception | None], None]:
        sampled = index % self.sampling == 0

        def done(metadata: RecordMetadata | None, error: Exception | None) -> None:
            if error is not None:
                self.failed(error)
                return
            now = time.monotonic()
            latency = (now - sent) * 1000
            window = self.window
            window[1] += 1
            window[2] += size
            window[3] += latency
            if latency > window[4]:
                window[4] = latency
            if sampled:
                self.samples.append(latency)
            if now - window[0] >= self.interval:
                self.close_window(now)
        return done

    def failed(self, error: Exception) -> None:
        self.errors += 1
        if self.errors <= 5:
            print(f"Error: {error}", file=sys.stderr)

    def _fold(self, window: list) -> None:
        self.count += window[1]
        self.bytes += window[2]
        self.total_latency += window[3]
        self.max_latency = max(self.max_latency, window[4])

    def close_window(self, now: float) -> None:
        window = self.window
        self.window = [now, 0, 0, 0.0, 0.0]
        self._fold(window)
        elapsed = max(now - window[0], 1e-9)
        count = window[1]
        print(f"{count} records sent, {count / elapsed:.1f} records/sec "
              f"({window[2] / elapsed / MB:.2f} MB/sec), "
              f"{window[3] / max(count, 1):.1f} ms avg latency, "
              f"{window[4]:.1f} ms max latency.", file=self.out, flush=True)

    def summary(self) -> str:
        self._fold(self.window)
        self.window = [time.monotonic(), 0, 0, 0.0, 0.0]
        elapsed = max(time.monotonic() - self.start, 1e-9)
        ordered = sorted(self.samples)

        def percentile(fraction: float) -> int:
            if not ordered:
                return 0
            return int(ordered[min(int(len(ordered) * fraction), len(ordered) - 1)])

        return (f"{self.count} records sent, {self.count / elapsed:f} records/sec "
                f"({self.bytes / elapsed / MB:.2f} MB/sec), "
                f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, "
                f"{self.max_latency:.2f} ms max latency, {percentile(0.5)} ms 50th, "
                f"{percentile(0.95)} ms 95th, {percentile(0.99)} ms 99th, "
                f"{percentile(0.999)} ms 99.9th.")


class Throttler:
    """Sleeps as needed to keep the send rate at `throughput` records/s (<0: no limit)."""

    MIN_SLEEP = 0.002

    def __init__(self, throughput: float, start: float) -> None:
        self.throughput = throughput
        self.start = start

    def pace(self, sent: int) -> None:
        if self.throughput < 0:
            return
        if self.throughput == 0:
            raise UsageError("--throughput 0 would never send anything")
        ahead = sent / self.throughput - (time.monotonic() - self.start)
        if ahead >= self.MIN_SLEEP:
            time.sleep(ahead)


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file:
        try:
            with open(args.payload_file, "rb") as handle:
                lines = [line.rstrip(b"\r\n") for line in handle]
        except OSError as exc:
            raise UsageError(f"Cannot read {args.payload_file}: {exc.strerror}") from None
        lines = [line for line in lines if line]
        if not lines:
            raise UsageError(f"{args.payload_file} has no payloads")
        return lines
    if args.record_size is None or args.record_size < 0:
        raise UsageError("--record-size must be zero or more")
    # Random upper-case letters, as Kafka's tool uses: compressible like text.
    rng = random.Random()
    return [bytes(rng.randrange(65, 91) for _ in range(args.record_size))]


def produce(args: argparse.Namespace) -> int:
    if args.num_records < 0:
        raise UsageError("--num-records must be zero or more")
    config: dict[str, Any] = dict(load_properties_file(args.producer_config))
    config.update(parse_pairs(args.producer_props, "--producer-props"))
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    if not config.get("bootstrap.servers"):
        raise UsageError("Give the brokers with --bootstrap-server or "
                         "--producer-props bootstrap.servers=HOST:PORT")
    payloads = _payloads(args)
    single = payloads[0] if len(payloads) == 1 else None
    producer = Producer(config)
    clean = False
    try:
        stats = Stats(args.num_records, args.reporting_interval)
        throttler = Throttler(args.throughput, stats.start)
        send = producer.send
        topic = args.topic
        clock = time.monotonic
        for index in range(args.num_records):
            payload = single if single is not None else random.choice(payloads)
            send(topic, payload, callback=stats.callback(index, clock(), len(payload)))
            throttler.pace(index + 1)
        producer.flush()
        clean = True
    finally:
        producer.close(None if clean else 0)
    print(stats.summary(), flush=True)
    return EXIT_ERROR if stats.errors else EXIT_OK
