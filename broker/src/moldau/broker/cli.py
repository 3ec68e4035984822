"""The broker's subcommands of `moldau`: `moldau broker` and `moldau cluster`."""

from __future__ import annotations

import argparse
from typing import Any


def _broker(args: argparse.Namespace) -> int:
    from moldau.broker.main import run

    overrides = args.override
    if args.container:
        import os

        from moldau.broker.container import container_settings
        from moldau.properties import load_properties

        # The file's own settings win over the container defaults; KAFKA_* variables over
        # both, and --override (after them) over everything.
        try:
            configured = load_properties(args.config) if args.config else {}
            settings = container_settings(os.environ, configured)
        except ValueError as exc:
            raise SystemExit(f"moldau broker: {exc}") from None
        overrides = [f"{key}={value}" for key, value in settings.items()] + overrides
    return run(args.config, overrides, args.log_level)


def add_commands(commands: Any) -> None:
    """Add `broker` and `cluster` to the `moldau` command's subparsers."""
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
    broker.add_argument("--container", action="store_true",
                        help="run as in a container image: listen on every interface, "
                             "advertise this host's DNS name, node.id from a StatefulSet "
                             "ordinal, data under /var/lib/moldau, and KAFKA_* environment "
                             "variables as properties (Kafka's image convention)")
    broker.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    broker.set_defaults(run=_broker)

    # A local multi-node cluster of broker processes.
    from moldau.cluster.cli import add_command as add_cluster_command

    add_cluster_command(commands)
