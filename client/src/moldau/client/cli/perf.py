"""`moldau perf produce`: producer throughput and latency, reported as Kafka's
ProducerPerformance reports them (a progress line per interval, then totals and latency
percentiles from up to 500000 samples). `moldau perf consume`: consumer throughput, reported
as Kafka's ConsumerPerformance reports it (a header and one line of totals)."""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

from moldau.client.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    connected_consumer,
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


# Kafka's ProducerPerformance defaults for its transactional mode.
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"
DEFAULT_TRANSACTION_DURATION_MS = 3000


class Transactions:
    """The records in transactions of at most `duration` seconds each, as Kafka's tool
    runs them: a transaction begins with its first record and commits after the record
    that finds it old enough; the last one commits at the end."""

    def __init__(self, producer: Producer, duration: float) -> None:
        self.producer = producer
        self.duration = duration
        self.started: float | None = None
        producer.init_transactions()

    def before_send(self, now: float) -> None:
        if self.started is None:
            self.producer.begin_transaction()
            self.started = now

    def after_send(self, now: float) -> None:
        if self.started is not None and now - self.started >= self.duration:
            self.finish()

    def finish(self) -> None:
        if self.started is not None:
            self.producer.commit_transaction()
            self.started = None


def _transaction_duration(args: argparse.Namespace, config: dict[str, Any]) -> float | None:
    """Seconds per transaction, None without transactions (which a transactional id in
    the settings, --transactional-id or --transaction-duration-ms turns on)."""
    if args.transactional_id:
        config["transactional.id"] = args.transactional_id
    if args.transaction_duration_ms is None and not config.get("transactional.id"):
        return None
    config.setdefault("transactional.id", DEFAULT_TRANSACTIONAL_ID)
    duration_ms = args.transaction_duration_ms
    if duration_ms is None:
        duration_ms = DEFAULT_TRANSACTION_DURATION_MS
    if duration_ms <= 0:
        raise UsageError("--transaction-duration-ms should be greater than zero.")
    return duration_ms / 1000


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
    duration = _transaction_duration(args, config)
    payloads = _payloads(args)
    single = payloads[0] if len(payloads) == 1 else None
    producer = Producer(config)
    clean = False
    try:
        transactions = Transactions(producer, duration) if duration is not None else None
        stats = Stats(args.num_records, args.reporting_interval)
        throttler = Throttler(args.throughput, stats.start)
        send = producer.send
        topic = args.topic
        clock = time.monotonic
        for index in range(args.num_records):
            payload = single if single is not None else random.choice(payloads)
            if transactions is not None:
                transactions.before_send(clock())
            send(topic, payload, callback=stats.callback(index, clock(), len(payload)))
            if transactions is not None:
                transactions.after_send(clock())
            throttler.pace(index + 1)
        if transactions is not None:
            transactions.finish()
        producer.flush()
        clean = True
    finally:
        producer.close(None if clean else 0)
    print(stats.summary(), flush=True)
    return EXIT_ERROR if stats.errors else EXIT_OK


# --------------------------------------------------------------------------- consume

CONSUME_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                  "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
CONSUME_POLL_SECONDS = 0.1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _date(ms: int) -> str:
    """Local time as yyyy-MM-dd HH:mm:ss:SSS, the format of Kafka's tool."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S:") + f"{ms % 1000:03d}"


def _rate(amount: float, ms: float) -> float:
    return amount * 1000 / ms if ms > 0 else 0.0


class _JoinTimer:
    """A rebalance listener that adds up the time from each revocation (or the start) to
    the assignment that follows: the rebalance time of the report."""

    def __init__(self, start_ms: int) -> None:
        self.join_start = start_ms
        self.total_ms = 0
        self.window_ms = 0

    def on_partitions_revoked(self, _partitions: list[Any]) -> None:
        self.join_start = _now_ms()

    def on_partitions_assigned(self, _partitions: list[Any]) -> None:
        elapsed = _now_ms() - self.join_start
        self.total_ms += elapsed
        self.window_ms += elapsed


def _perf_consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = dict(load_properties_file(args.consumer_config))
    config.update(parse_pairs(args.command_property, "--command-property"))
    config["bootstrap.servers"] = args.bootstrap_server
    if args.group:
        config["group.id"] = args.group
    elif not config.get("group.id"):
        config["group.id"] = f"perf-consumer-{random.randint(10000, 99999)}"
    config["auto.offset.reset"] = "latest" if args.from_latest else "earliest"
    if args.fetch_size is not None:
        config["max.partition.fetch.bytes"] = args.fetch_size
    if args.socket_buffer_size is not None:
        config["receive.buffer.bytes"] = args.socket_buffer_size
    config.setdefault("max.partition.fetch.bytes", 1024 * 1024)
    config.setdefault("receive.buffer.bytes", 2 * 1024 * 1024)
    config.setdefault("check.crcs", "false")
    config.setdefault("client.id", "perf-consumer-client")
    return config


def consume(args: argparse.Namespace) -> int:
    """Kafka's ConsumerPerformance: read --messages records as fast as possible, then print
    one line of totals (or, with --show-detailed-stats, one line per reporting interval)."""
    if args.messages < 0:
        raise UsageError("--messages must be zero or more")
    if args.timeout < 0 or args.reporting_interval <= 0:
        raise UsageError("--timeout must be zero or more and --reporting-interval positive")
    pattern = None
    if args.include is not None:
        try:
            pattern = re.compile(args.include)
        except re.error as exc:
            raise UsageError(f"Invalid --include pattern {args.include!r}: {exc}") from None
    config = _perf_consumer_config(args)
    detailed = args.show_detailed_stats
    live = not detailed and sys.stderr.isatty()
    wanted = args.messages
    count = size = 0
    consumer = connected_consumer(config, args.timeout)
    if not args.hide_header:
        print(DETAILED_HEADER if detailed else CONSUME_HEADER, flush=True)
    try:
        max_poll = consumer.config["max.poll.records"]
        start_ms = _now_ms()
        timer = _JoinTimer(start_ms)
        if pattern is not None:
            consumer.subscribe(pattern=pattern, listener=timer)
        else:
            consumer.subscribe([args.topic], listener=timer)
        last_consumed = last_report = start_ms
        last_count = last_size = 0
        now = start_ms
        while count < wanted and now - last_consumed <= args.timeout:
            records = consumer.poll(CONSUME_POLL_SECONDS,
                                    max_records=min(wanted - count, max_poll))
            now = _now_ms()
            if records:
                last_consumed = now
                count += len(records)
                for record in records:
                    key_size, value_size = record[9], record[10]
                    size += (key_size if key_size > 0 else 0) + \
                        (value_size if value_size > 0 else 0)
            if now - last_report >= args.reporting_interval:
                if detailed:
                    _detailed_line(count, last_count, size, last_size, last_report, now,
                                   timer.window_ms)
                elif live:
                    elapsed = now - last_report
                    print(f"{count} records consumed, "
                          f"{_rate(count - last_count, elapsed):.1f} records/sec "
                          f"({_rate((size - last_size) / MB, elapsed):.2f} MB/sec).",
                          file=sys.stderr, flush=True)
                last_report, last_count, last_size = now, count, size
                timer.window_ms = 0
        end_ms = _now_ms()
    finally:
        consumer.close()
    if not detailed:
        elapsed = end_ms - start_ms
        fetch_ms = elapsed - timer.total_ms
        mb = size / MB
        print(f"{_date(start_ms)}, {_date(end_ms)}, {mb:.4f}, {_rate(mb, elapsed):.4f}, "
              f"{count}, {_rate(count, elapsed):.4f}, {timer.total_ms}, {fetch_ms}, "
              f"{_rate(mb, fetch_ms):.4f}, {_rate(count, fetch_ms):.4f}", flush=True)
    if count < wanted:
        print(f"Error: Exiting before consuming the expected number of messages: timeout "
              f"({args.timeout} ms) exceeded after {count} of {wanted}. Use --timeout to "
              f"wait longer.", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _detailed_line(count: int, last_count: int, size: int, last_size: int, start_ms: int,
                   end_ms: int, join_ms: int) -> None:
    elapsed = end_ms - start_ms
    window_mb = (size - last_size) / MB
    fetch_ms = elapsed - join_ms
    print(f"{_date(end_ms)}, 0, {size / MB:.4f}, {_rate(window_mb, elapsed):.4f}, {count}, "
          f"{_rate(count - last_count, elapsed):.4f}, {join_ms}, {fetch_ms}, "
          f"{_rate(window_mb, fetch_ms):.4f}, {_rate(count - last_count, fetch_ms):.4f}",
          flush=True)
