"""The `moldau` command line: one entry point for the broker and the tools."""

from __future__ import annotations

import argparse
import sys


def _broker(args: argparse.Namespace) -> int:
    from moldau.broker.main import run

    return run(args.config, args.override, args.log_level)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moldau", description="Moldau: a Kafka-compatible streaming platform.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    broker = commands.add_parser(
        "broker", help="run a broker",
        description="Run one broker. With no options it listens on localhost:9092 and keeps "
                    "its data under ./data/broker. Settings use Kafka's property names.",
        epilog="example: moldau broker --override listeners=PLAINTEXT://127.0.0.1:19092 "
               "--override log.dirs=/tmp/moldau")
    broker.add_argument("--config", metavar="FILE",
                        help="a server.properties file (Kafka's format)")
    broker.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="set one property; repeat as needed; wins over --config")
    broker.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    broker.set_defaults(run=_broker)

    # A local multi-node cluster of broker processes.
    from moldau.cluster.cli import add_command as add_cluster_command

    add_cluster_command(commands)

    # Client tools (topics, produce, perf), defined next to the client library.
    from moldau.client.cli import add_commands

    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
