"""The `moldau` command: one entry point for every installed component.

Each component (moldau-client, moldau-broker, ...) adds its subcommands through the
`moldau.commands` entry-point group, so `moldau broker` exists where the broker is installed.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import EntryPoint, entry_points, version

COMMANDS_GROUP = "moldau.commands"


def _components() -> list[EntryPoint]:
    """The installed components' command hooks, in name order (broker, client, ...)."""
    return sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)


def _versions() -> str:
    names = {"moldau-client"} | {ep.dist.name for ep in _components() if ep.dist is not None}
    return "\n".join(f"{name} {version(name)}" for name in sorted(names))


class _VersionAction(argparse.Action):
    """`--version`: one line per installed component, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version of each installed component and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_versions())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moldau", description="Moldau: a Kafka-compatible streaming platform.")
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for component in _components():
        component.load()(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
