"""Shared plumbing of the client commands: settings from flags and files, error reporting.

User errors (a broker that cannot be reached, an unknown topic, a bad setting) end the
command with one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command-line mistake detected by a command (not by argparse)."""


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """KEY=VALUE strings to a dict; the value may contain '='."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid {what} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def load_properties_file(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from moldau.properties import PropertiesError, load_properties

    try:
        return load_properties(path)
    except PropertiesError as exc:
        raise UsageError(str(exc)) from None


def describe_error(exc: BaseException) -> str:
    from moldau.client.errors import KafkaError
    from moldau.config import ConfigError

    if isinstance(exc, KafkaError | ConfigError | UsageError | ValueError | TypeError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())  # one line


def run_command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A `run` for argparse that imports the command lazily and turns user errors into a
    one-line message."""

    def run(args: argparse.Namespace) -> int:
        from moldau.client.errors import KafkaError
        from moldau.config import ConfigError

        target: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"moldau.client.cli.{module}"), function)
        try:
            return target(args)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            return EXIT_OK
        except (KafkaError, ConfigError, UsageError, ValueError, TypeError, OSError) as exc:
            print(f"Error: {describe_error(exc)}", file=sys.stderr)
            return EXIT_ERROR

    return run


def connected_consumer(config: dict[str, Any], timeout_ms: int | None = None) -> Any:
    """A Consumer that has had an answer from the cluster. A consumer keeps retrying brokers
    it cannot reach, so a command would wait forever on a wrong address: this fails after
    `timeout_ms` (default: the consumer's default.api.timeout.ms) with KafkaTimeoutError."""
    from moldau.client.consumer import Consumer

    consumer = Consumer(config)
    if timeout_ms is None:
        timeout_ms = consumer.config["default.api.timeout.ms"]
    try:
        consumer.topics(timeout_ms / 1000)
    except BaseException:
        consumer.close()
        raise
    return consumer


def admin_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = dict(load_properties_file(getattr(args, "command_config", None)))
    config["bootstrap.servers"] = args.bootstrap_server
    timeout = getattr(args, "timeout_ms", None)
    if timeout is not None:
        config["default.api.timeout.ms"] = timeout
        config.setdefault("request.timeout.ms", min(timeout, 30000))
    return config
