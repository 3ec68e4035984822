"""`moldau consume`: print records to standard output as Kafka's console consumer does,
formatted by the properties of its DefaultMessageFormatter.

Without --group or --partition the consumer joins a group of its own,
`console-consumer-NNNNN`, with auto commit off (as Kafka's tool does); with --group it
commits what it printed; with --partition it reads that one partition without a group.
SIGINT and SIGTERM end the run cleanly; either way the count of records goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from moldau.client.cli.common import (
    EXIT_OK,
    UsageError,
    connected_consumer,
    load_properties_file,
    parse_pairs,
)
from moldau.client.consumer import Consumer, ConsumerRecord
from moldau.client.consumer.records import LOG_APPEND_TIME
from moldau.client.errors import WakeupError
from moldau.client.types import TopicPartition

FORMATTER_PROPERTIES = {
    "print.timestamp": "false", "print.partition": "false", "print.offset": "false",
    "print.headers": "false", "print.key": "false", "print.value": "true",
    "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
    "headers.key.separator": ":", "null.literal": "null",
}

# How long one poll() waits at most; a signal interrupts it at once either way.
POLL_SECONDS = 5.0


def _flag(value: str) -> bool:
    return value.strip().lower() == "true"


def _text(data: bytes | None, null: bytes) -> bytes:
    """Bytes as UTF-8 text: invalid sequences become U+FFFD."""
    if data is None:
        return null
    data = bytes(data)
    if data.isascii():
        return data
    return data.decode("utf-8", "replace").encode()


class RecordFormatter:
    """One record to one line: timestamp, partition, offset, headers, key and value, each
    shown or not as the properties say, joined by key.separator."""

    def __init__(self, properties: dict[str, str]) -> None:
        unknown = sorted(set(properties) - set(FORMATTER_PROPERTIES))
        if unknown:
            raise UsageError(f"Unknown --property {unknown[0]!r}; supported: "
                             + ", ".join(FORMATTER_PROPERTIES))
        merged = {**FORMATTER_PROPERTIES, **properties}
        self.print_timestamp = _flag(merged["print.timestamp"])
        self.print_partition = _flag(merged["print.partition"])
        self.print_offset = _flag(merged["print.offset"])
        self.print_headers = _flag(merged["print.headers"])
        self.print_key = _flag(merged["print.key"])
        self.print_value = _flag(merged["print.value"])
        self.key_separator = merged["key.separator"].encode()
        self.line_separator = merged["line.separator"].encode()
        self.headers_separator = merged["headers.separator"].encode()
        self.headers_key_separator = merged["headers.key.separator"].encode()
        self.null = merged["null.literal"].encode()
        self.only_value = self.print_value and not (
            self.print_timestamp or self.print_partition or self.print_offset
            or self.print_headers or self.print_key)

    def format(self, record: ConsumerRecord) -> bytes:
        if self.only_value:
            return _text(record.value, self.null) + self.line_separator
        fields: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if record.timestamp_type == LOG_APPEND_TIME else "CreateTime"
            fields.append(f"{kind}:{record.timestamp}".encode())
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            fields.append(self.headers_separator.join(
                _text(name.encode(), self.null) + self.headers_key_separator
                + _text(value, self.null) for name, value in record.headers)
                if record.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(_text(record.key, self.null))
        if self.print_value:
            fields.append(_text(record.value, self.null))
        if not fields:
            return b""
        return self.key_separator.join(fields) + self.line_separator


def _start_offset(args: argparse.Namespace) -> int | str:
    """--offset as 'earliest', 'latest' or a number (for --partition)."""
    if args.offset is None:
        return "earliest" if args.from_beginning else "latest"
    text = args.offset.strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise UsageError(f"The provided offset value '{args.offset}' is incorrect. Valid "
                         f"values are 'earliest', 'latest', or a non-negative number.")
    return offset


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    """The consumer's settings from the file, --consumer-property and the other flags, with
    the checks of Kafka's console consumer."""
    from_file = load_properties_file(args.consumer_config)
    from_flags = parse_pairs(args.consumer_property, "--consumer-property")
    config: dict[str, Any] = {**from_file, **from_flags}
    config["bootstrap.servers"] = args.bootstrap_server
    groups = [g for g in (args.group, from_flags.get("group.id"), from_file.get("group.id"))
              if g]
    if len(set(groups)) > 1:
        raise UsageError("The group ids given in different places (--group, "
                         "--consumer-property, --consumer.config) do not match: "
                         + ", ".join(sorted(set(groups))))
    if args.partition is not None:
        if args.topic is None:
            raise UsageError("The topic is required when partition is specified.")
        if groups:
            raise UsageError("Options group and partition cannot be specified together.")
        if args.partition < 0:
            raise UsageError("--partition must be zero or more")
    elif args.offset is not None:
        raise UsageError("The partition is required when offset is specified.")
    if args.from_beginning and args.offset is not None:
        raise UsageError("Options from-beginning and offset cannot be specified together.")
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must be zero or more")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must be zero or more")

    reset = str(config.get("auto.offset.reset", "")).strip().lower()
    if args.from_beginning:
        if reset and reset != "earliest":
            raise UsageError(f"Can't simultaneously specify --from-beginning and "
                             f"'auto.offset.reset={reset}'; drop one of them.")
        config["auto.offset.reset"] = "earliest"
    elif not reset:
        config["auto.offset.reset"] = "latest"
    if groups:
        config["group.id"] = groups[0]
    elif args.partition is None:
        # A group of its own, not meant to be used again: nothing worth committing.
        config["group.id"] = f"console-consumer-{random.randint(10000, 99999)}"
        config.setdefault("enable.auto.commit", "false")
    if args.isolation_level:
        config["isolation.level"] = args.isolation_level
    return config


def _silence_stdout() -> None:
    """Standard output was closed by its reader (`| head`): send whatever is still buffered
    to /dev/null so that the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


class _Stop:
    """SIGINT/SIGTERM: the first asks the loop to stop (and interrupts a poll), a second
    one gives up at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, wakeup: Callable[[], None]) -> None:
        self.requested = False
        self._wakeup = wakeup
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._wakeup()

    def __enter__(self) -> _Stop:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _subscribe(consumer: Consumer, args: argparse.Namespace,
               pattern: re.Pattern[str] | None) -> None:
    if args.partition is not None:
        tp = TopicPartition(args.topic, args.partition)
        start = _start_offset(args)
        consumer.assign([tp])
        if start == "earliest":
            consumer.seek_to_beginning(tp)
        elif start == "latest":
            consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, int(start))
    elif pattern is not None:
        consumer.subscribe(pattern=pattern)
    else:
        consumer.subscribe([args.topic])


class _Printer:
    """Writes the records of each poll and counts them."""

    def __init__(self, formatter: RecordFormatter, consumer: Consumer, stop: _Stop,
                 skip_errors: bool) -> None:
        self.formatter = formatter
        self.consumer = consumer
        self.stop = stop
        self.skip_errors = skip_errors
        self.out = sys.stdout.buffer
        self.count = 0

    def write(self, records: Any) -> None:
        """Print the records of one poll. When a stop is asked for half way, or standard
        output is closed, the partitions move back to their first unprinted record, so
        that a group commits only what was printed."""
        batch: list[ConsumerRecord] = list(records)
        format_record = self.formatter.format
        for index, record in enumerate(batch):
            if self.stop.requested:
                self._rewind(batch[index:])
                break
            try:
                line = format_record(record)
            except Exception as exc:  # Kafka's --skip-message-on-error
                if not self.skip_errors:
                    raise
                print(f"Error processing message, skipping this message: {exc}",
                      file=sys.stderr)
                continue
            try:
                self.out.write(line)
            except BrokenPipeError:
                self._rewind(batch[index:])
                raise
            self.count += 1
        self.out.flush()

    def _rewind(self, unprinted: list[ConsumerRecord]) -> None:
        first: dict[TopicPartition, int] = {}
        for record in unprinted:
            first.setdefault(record.topic_partition, record.offset)
        for tp, offset in first.items():
            self.consumer.seek(tp, offset)

    def finish(self) -> None:
        try:
            self.out.flush()
        except BrokenPipeError:
            _silence_stdout()


def main(args: argparse.Namespace) -> int:
    formatter = RecordFormatter(parse_pairs(args.property, "--property"))
    config = consumer_config(args)
    if args.partition is not None:
        _start_offset(args)  # a bad --offset is reported before connecting
    pattern = None
    if args.include is not None:
        try:
            pattern = re.compile(args.include)
        except re.error as exc:
            raise UsageError(f"Invalid --include pattern {args.include!r}: {exc}") from None
    limit = args.max_messages
    idle = None if args.timeout_ms is None else args.timeout_ms / 1000
    consumer = connected_consumer(config, args.timeout_ms)
    max_poll = consumer.config["max.poll.records"]
    printer: _Printer | None = None
    try:
        with _Stop(consumer.wakeup) as stop:
            printer = _Printer(formatter, consumer, stop, args.skip_message_on_error)
            try:
                _subscribe(consumer, args, pattern)
                waiting_since = time.monotonic()
                while not stop.requested and (limit is None or printer.count < limit):
                    wait = POLL_SECONDS
                    if idle is not None:
                        wait = min(wait, max(idle - (time.monotonic() - waiting_since), 0))
                    try:
                        records = consumer.poll(wait, max_records=None if limit is None
                                                else min(limit - printer.count, max_poll))
                    except WakeupError:
                        break
                    if records:
                        printer.write(records)
                        waiting_since = time.monotonic()
                    elif idle is not None and time.monotonic() - waiting_since >= idle:
                        break
            except BrokenPipeError:
                _silence_stdout()
            finally:
                try:
                    printer.finish()
                finally:
                    consumer.close()
    finally:
        if consumer.closed and printer is not None:
            print(f"Processed a total of {printer.count} messages", file=sys.stderr,
                  flush=True)
    return EXIT_OK
