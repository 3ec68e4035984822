"""`moldau produce`: each line of standard input becomes one record, as with Kafka's
console producer (its LineMessageReader properties included). With --transactional-id the
lines of one run are one transaction: committed at the end of input, aborted on Ctrl-C or
an error."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from moldau.client.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    load_properties_file,
    parse_pairs,
)
from moldau.client.errors import KafkaError
from moldau.client.producer import Producer
from moldau.client.producer.transaction_manager import TxnState
from moldau.client.types import RecordMetadata

# Seconds to abort a transaction after an error before giving up on it.
ABORT_TIMEOUT = 10.0

READER_PROPERTIES = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false",
    "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
    "null.marker": None, "ignore.error": "false",
}


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


class LineReader:
    """Splits a line into (key, value, headers) according to the reader properties."""

    def __init__(self, properties: dict[str, str]) -> None:
        unknown = sorted(set(properties) - set(READER_PROPERTIES))
        if unknown:
            raise UsageError(f"Unknown --property {unknown[0]!r}; supported: "
                             + ", ".join(READER_PROPERTIES))
        merged: dict[str, Any] = {**READER_PROPERTIES, **properties}
        self.parse_key = _flag(merged["parse.key"])
        self.key_separator = merged["key.separator"].encode()
        self.parse_headers = _flag(merged["parse.headers"])
        self.headers_delimiter = merged["headers.delimiter"].encode()
        self.headers_separator = merged["headers.separator"].encode()
        self.headers_key_separator = merged["headers.key.separator"].encode()
        marker = merged["null.marker"]
        self.null_marker = None if marker is None else marker.encode()
        self.ignore_error = _flag(merged["ignore.error"])
        if not self.key_separator or not self.headers_delimiter:
            raise UsageError("key.separator and headers.delimiter must not be empty")

    def _null(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def parse(self, line: bytes, number: int
              ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
        headers = None
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"No headers delimiter found on line number {number}: "
                                     f"'{line.decode(errors='replace')}'")
                head, rest = b"", line
            headers = []
            for item in head.split(self.headers_separator) if head else []:
                name, sep, value = item.partition(self.headers_key_separator)
                if not sep:
                    raise UsageError(f"No header key separator found in pair "
                                     f"'{item.decode(errors='replace')}' on line number "
                                     f"{number}")
                headers.append((name.decode(errors="replace"), self._null(value)))
        key = None
        value: bytes | None = rest
        if self.parse_key:
            raw_key, sep, raw_value = rest.partition(self.key_separator)
            if sep:
                key, value = self._null(raw_key), raw_value
            elif not self.ignore_error:
                raise UsageError(f"No key separator found on line number {number}: "
                                 f"'{rest.decode(errors='replace')}'")
        return key, self._null(value) if value is not None else None, headers or None


class DeliveryReport:
    """Callbacks that print one line per record the producer could not deliver, as
    Kafka's console producer does; once the run is interrupted or aborted they only count,
    so that abandoning a full buffer does not flood the terminal."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.failures = 0
        self.quiet = False

    def callback(self, key: bytes | None, value: bytes | None
                 ) -> Callable[[RecordMetadata | None, Exception | None], None]:
        def done(metadata: RecordMetadata | None, error: Exception | None) -> None:
            if error is None:
                return
            self.failures += 1
            if not self.quiet:
                print(f"Error when sending message to topic {self.topic} with key: "
                      f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                      f"{'null' if value is None else f'{len(value)} bytes'} with error: "
                      f"{error}", file=sys.stderr)
        return done


def _send_lines(producer: Producer, reader: LineReader, report: DeliveryReport,
                sync: bool) -> None:
    for number, raw in enumerate(sys.stdin.buffer, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key, value, headers = reader.parse(line, number)
        future = producer.send(report.topic, value, key=key, headers=headers,
                               callback=report.callback(key, value))
        if sync:
            future.get()


def _produce_in_transaction(producer: Producer, reader: LineReader, report: DeliveryReport,
                            sync: bool) -> int:
    """Every line in one transaction, committed at the end of input. The first Ctrl-C
    aborts it (or, if its commit has begun, waits for that); a second one leaves it to the
    coordinator, which aborts it after transaction.timeout.ms. An error aborts it."""
    begun = False
    try:
        try:
            producer.init_transactions()
            producer.begin_transaction()
            begun = True
            _send_lines(producer, reader, report, sync)
            producer.commit_transaction()
        except KeyboardInterrupt:
            report.quiet = True
            print(_end_after_interrupt(producer, begun), file=sys.stderr)
            return EXIT_INTERRUPTED
        except BaseException:
            report.quiet = True
            _abort_quietly(producer)
            raise
    except KeyboardInterrupt:
        print("Interrupted: the transaction is left to its coordinator, which aborts it "
              "after transaction.timeout.ms.", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # closing takes no more time
        producer.close(0)
    return EXIT_ERROR if report.failures else EXIT_OK


def _end_after_interrupt(producer: Producer, begun: bool) -> str:
    """End the transaction after Ctrl-C, which may come at any point of the run; the line
    that says how it ended."""
    tm = producer.async_producer.transaction_manager
    assert tm is not None
    if tm.state is TxnState.COMMITTING_TRANSACTION:
        producer.commit_transaction()  # waits for the commit under way
        return "Interrupted while committing: the transaction was committed."
    if tm.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                    TxnState.ABORTING_TRANSACTION):
        producer.abort_transaction()
        return "Interrupted: the transaction was aborted."
    if tm.state is TxnState.READY and begun:  # Ctrl-C just as the commit returned
        return "Interrupted: the transaction was committed."
    return "Interrupted before the transaction began."


def _abort_quietly(producer: Producer) -> None:
    """Abort the failed transaction now, so that read_committed consumers are not held up
    until the coordinator times it out; a fatal error (e.g. fenced) leaves that to it."""
    with contextlib.suppress(KafkaError, KeyboardInterrupt):
        producer.abort_transaction(ABORT_TIMEOUT)


def main(args: argparse.Namespace) -> int:
    reader = LineReader(parse_pairs(args.property, "--property"))
    config: dict[str, Any] = dict(load_properties_file(args.producer_config))
    config.update(parse_pairs(args.producer_property, "--producer-property"))
    config["bootstrap.servers"] = args.bootstrap_server
    if args.compression_codec:
        config["compression.type"] = args.compression_codec
    if args.request_required_acks is not None:
        config["acks"] = args.request_required_acks
    if args.max_block_ms is not None:
        config["max.block.ms"] = args.max_block_ms
    if args.transactional_id is not None:
        config["transactional.id"] = args.transactional_id
    report = DeliveryReport(args.topic)
    producer = Producer(config)
    if args.transactional_id is not None:
        return _produce_in_transaction(producer, reader, report, args.sync)
    # Lines read before a bad one are still delivered. The first Ctrl-C stops reading and
    # delivers what was already sent; a second one, or a client error, drops the rest.
    interrupted = False
    try:
        try:
            _send_lines(producer, reader, report, args.sync)
        except KeyboardInterrupt:
            interrupted = report.quiet = True
        producer.flush()
    except (KafkaError, KeyboardInterrupt) as exc:
        interrupted = interrupted or isinstance(exc, KeyboardInterrupt)
        report.quiet = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the abort is under way already
        producer.close(0)
        if not interrupted:
            raise
    finally:
        producer.close()
    if interrupted:
        if report.failures:
            print(f"Interrupted: {report.failures} records were not delivered.",
                  file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_ERROR if report.failures else EXIT_OK
