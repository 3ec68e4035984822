"""Command-line tools on top of the client: `moldau topics`, `moldau groups`,
`moldau produce`, `moldau consume`, `moldau perf produce`, `moldau perf consume`. Flags
follow Kafka's kafka-topics, kafka-consumer-groups, kafka-console-producer,
kafka-console-consumer, ProducerPerformance and ConsumerPerformance. The parsers import
nothing heavy; each command loads the client when it runs."""

from __future__ import annotations

import argparse
from typing import Any

from moldau.client.cli.common import run_command

__all__ = ["add_commands"]


def _admin_flags(sub: argparse.ArgumentParser) -> None:
    """The connection flags of the admin tools (topics, groups)."""
    sub.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                     help="broker(s) to connect to, comma-separated")
    sub.add_argument("--command-config", metavar="FILE",
                     help="admin client properties file (Kafka's format)")
    sub.add_argument("--timeout-ms", type=int, default=30000, metavar="MS",
                     help="give up after this long (default: 30000)")


def _consumer_source(parser: argparse.ArgumentParser) -> None:
    """Where the consumer tools (consume, perf consume) connect and what they read."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to, comma-separated")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--topic", help="the topic to read")
    source.add_argument("--include", metavar="REGEX",
                        help="read every topic whose whole name matches this regular "
                             "expression")


def _topics_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "topics", help="create, list, describe, alter or delete topics",
        description="Manage topics, like Kafka's kafka-topics tool.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    common = _admin_flags
    create = actions.add_parser("create", help="create a topic",
                                description="Create a topic.",
                                epilog="example: moldau topics create --bootstrap-server "
                                       "localhost:9092 --topic orders --partitions 6 "
                                       "--config retention.ms=86400000")
    common(create)
    create.add_argument("--topic", required=True, help="the topic to create")
    create.add_argument("--partitions", type=int,
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int,
                        help="replicas per partition (default: the broker's "
                             "default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic setting; repeat as needed")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed quietly if the topic exists")
    create.set_defaults(run=run_command("topics", "create"))

    listing = actions.add_parser("list", help="list topic names",
                                 description="List every topic, one per line.")
    common(listing)
    listing.add_argument("--topic", help="only topics matching this name or regular "
                                         "expression")
    listing.add_argument("--exclude-internal", action="store_true",
                         help="leave out internal topics such as __consumer_offsets")
    listing.set_defaults(run=run_command("topics", "list_"))

    describe = actions.add_parser(
        "describe", help="show partitions, leaders, replicas, ISR and settings",
        description="Describe topics as kafka-topics does: one summary line per topic with "
                    "its non-default settings, then one line per partition.")
    common(describe)
    describe.add_argument("--topic", help="topic name or regular expression (default: all)")
    describe.add_argument("--exclude-internal", action="store_true",
                          help="leave out internal topics")
    describe.add_argument("--under-replicated-partitions", action="store_true",
                          help="only partitions whose ISR is smaller than the replica set")
    describe.add_argument("--unavailable-partitions", action="store_true",
                          help="only partitions without a leader")
    describe.set_defaults(run=run_command("topics", "describe"))

    alter = actions.add_parser(
        "alter", help="add partitions or change settings",
        description="Increase the partition count and/or set and delete topic settings.")
    common(alter)
    alter.add_argument("--topic", required=True, help="topic name or regular expression")
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic setting; repeat as needed")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a topic setting (back to the default); repeat as needed")
    alter.set_defaults(run=run_command("topics", "alter"))

    delete = actions.add_parser("delete", help="delete topics",
                                description="Delete a topic and all its data.")
    common(delete)
    delete.add_argument("--topic", required=True, help="topic name or regular expression")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed quietly if no topic matches")
    delete.set_defaults(run=run_command("topics", "delete"))


def _groups_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "groups", help="list, describe, reset offsets of or delete consumer groups",
        description="Manage consumer groups, like Kafka's kafka-consumer-groups tool.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    common = _admin_flags
    def selection(sub: argparse.ArgumentParser, verb: str) -> None:
        which = sub.add_mutually_exclusive_group(required=True)
        which.add_argument("--group", action="append", metavar="GROUP",
                           help=f"the group to {verb}; repeat for several")
        which.add_argument("--all-groups", action="store_true",
                           help=f"{verb} every consumer group")

    listing = actions.add_parser(
        "list", help="list consumer groups",
        description="List the consumer groups, one id per line.",
        epilog="example: moldau groups list --bootstrap-server localhost:9092 "
               "--state Stable,Empty")
    common(listing)
    listing.add_argument("--state", nargs="?", const="", metavar="STATES",
                         help="add a STATE column; with a value, only groups in these "
                              "comma-separated states (Stable, Empty, PreparingRebalance, "
                              "CompletingRebalance, ...; any case)")
    listing.set_defaults(run=run_command("groups", "list_"))

    describe = actions.add_parser(
        "describe", help="show offsets and lag, members or state",
        description="Describe consumer groups as kafka-consumer-groups does. The default "
                    "(--offsets) prints one line per partition the group holds or has "
                    "committed: CURRENT-OFFSET is the committed offset, LAG is LOG-END-OFFSET "
                    "minus it, and CONSUMER-ID, HOST and CLIENT-ID name the member that "
                    "holds the partition ('-' when none does).",
        epilog="example: moldau groups describe --bootstrap-server localhost:9092 "
               "--group billing --members --verbose")
    common(describe)
    selection(describe, "describe")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true",
                      help="committed offset, log end offset and lag per partition "
                           "(the default)")
    view.add_argument("--members", action="store_true",
                      help="one line per member: id, host, client id, partition count")
    view.add_argument("--state", action="store_true",
                      help="coordinator, assignment strategy, state and member count")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members, also list each member's partitions")
    describe.set_defaults(run=run_command("groups", "describe"))

    reset = actions.add_parser(
        "reset-offsets", help="move a group's committed offsets",
        description="Compute new committed offsets for partitions of an inactive group "
                    "(state Empty, or a group that does not exist yet) and print them "
                    "(GROUP TOPIC PARTITION NEW-OFFSET). Nothing changes without --execute. "
                    "Offsets given by --to-offset, --shift-by and --from-file are kept "
                    "within each partition's earliest and latest offsets.",
        epilog="example: moldau groups reset-offsets --bootstrap-server localhost:9092 "
               "--group billing --topic orders:0,1 --to-datetime 2024-05-01T00:00:00.000Z "
               "--execute")
    common(reset)
    selection(reset, "reset")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic (all its partitions) or some of its partitions; "
                            "repeat for several")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has a committed offset for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the earliest offset")
    to.add_argument("--to-latest", action="store_true", help="the latest (log end) offset")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset (the latest offset where there is none)")
    to.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (N may be negative)")
    to.add_argument("--to-datetime", metavar="DATETIME",
                    help="the first offset with a timestamp at or after "
                         "YYYY-MM-DDTHH:mm:SS.sss, optionally ending in Z or an offset "
                         "such as +02:00 (default: UTC)")
    to.add_argument("--by-duration", metavar="DURATION",
                    help="the first offset with a timestamp at or after now minus an "
                         "ISO-8601 duration PnDTnHnMnS, e.g. PT30M or P1DT12H")
    to.add_argument("--from-file", metavar="CSV",
                    help="offsets from a file of topic,partition,offset lines (or "
                         "group,topic,partition,offset for several groups), as --export "
                         "writes; --topic and --all-topics are not needed")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                     help="only print the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true",
                       help="print the new offsets as CSV lines for --from-file")
    reset.set_defaults(run=run_command("groups", "reset_offsets"))

    delete = actions.add_parser(
        "delete", help="delete consumer groups",
        description="Delete groups that have no active members, with their committed "
                    "offsets.",
        epilog="example: moldau groups delete --bootstrap-server localhost:9092 "
               "--group billing --group audit")
    common(delete)
    selection(delete, "delete")
    delete.set_defaults(run=run_command("groups", "delete"))


def _produce_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "produce", help="send lines from standard input as records",
        description="Read lines from standard input and send each as one record, like "
                    "Kafka's console producer.",
        epilog="example: printf 'k1:v1\\nk2:v2\\n' | moldau produce --bootstrap-server "
               "localhost:9092 --topic orders --property parse.key=true "
               "--property key.separator=:")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to, comma-separated")
    parser.add_argument("--topic", required=True, help="the topic to send to")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="line parsing: parse.key (false), key.separator (tab), "
                             "parse.headers (false), headers.delimiter (tab), "
                             "headers.separator (,), headers.key.separator (:), "
                             "null.marker, ignore.error (false)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip",
                        choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="compress batches (gzip if given without a value)")
    parser.add_argument("--producer-property", action="append", default=[],
                        metavar="KEY=VALUE", help="a producer setting; repeat as needed")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="producer properties file (Kafka's format)")
    parser.add_argument("--request-required-acks", metavar="ACKS",
                        help="acks: all, -1, 0 or 1 (default: all)")
    parser.add_argument("--max-block-ms", type=int, metavar="MS",
                        help="how long to wait for metadata or memory (default: 60000)")
    parser.add_argument("--sync", action="store_true",
                        help="wait for each record's acknowledgement before the next")
    parser.add_argument("--transactional-id", metavar="ID",
                        help="send all lines of this run in one transaction, committed at "
                             "the end of input; Ctrl-C or an error aborts it, so "
                             "read_committed consumers see all of the lines or none")
    parser.set_defaults(run=run_command("produce", "main"))


def _consume_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "consume", help="print records to standard output",
        description="Print records, one per line, like Kafka's console consumer. Without "
                    "--group or --partition the consumer joins a new group "
                    "console-consumer-NNNNN and commits nothing; with --group it commits "
                    "what it printed. The number of records printed goes to stderr at the "
                    "end; Ctrl-C or SIGTERM ends the run cleanly.",
        epilog="example: moldau consume --bootstrap-server localhost:9092 --topic orders "
               "--from-beginning --property print.key=true --property print.offset=true")
    _consumer_source(parser)
    parser.add_argument("--partition", type=int, metavar="N",
                        help="read only this partition of --topic, without a group")
    parser.add_argument("--offset", metavar="OFFSET",
                        help="with --partition: earliest, latest or an offset to start at "
                             "(default: latest, or earliest with --from-beginning)")
    parser.add_argument("--group", metavar="GROUP",
                        help="the consumer group (default: a new console-consumer-NNNNN)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest record when the group has no committed "
                             "offset (default: the latest)")
    parser.add_argument("--max-messages", type=int, metavar="N",
                        help="exit after printing this many records")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="exit when no record arrives for this long")
    parser.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                        help="read_committed hides records of open and aborted transactions")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="formatting: print.timestamp, print.partition, print.offset, "
                             "print.headers, print.key (all false), print.value (true), "
                             "key.separator (tab), line.separator (newline), "
                             "headers.separator (,), headers.key.separator (:), "
                             "null.literal (null)")
    parser.add_argument("--consumer-property", "--command-property", action="append",
                        default=[], dest="consumer_property", metavar="KEY=VALUE",
                        help="a consumer setting; repeat as needed")
    parser.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                        metavar="FILE", help="consumer properties file (Kafka's format)")
    parser.add_argument("--skip-message-on-error", action="store_true",
                        help="skip a record that cannot be printed instead of stopping")
    parser.set_defaults(run=run_command("consume", "main"))


def _perf_parser(commands: Any) -> None:
    parser = commands.add_parser("perf", help="performance tests",
                                 description="Measure throughput and latency.")
    kinds = parser.add_subparsers(dest="kind", metavar="TEST", required=True)
    produce = kinds.add_parser(
        "produce", help="producer throughput and latency",
        description="Send records as fast as allowed and report records/s, MB/s and "
                    "latency percentiles, like Kafka's ProducerPerformance.",
        epilog="example: moldau perf produce --topic perf --num-records 1000000 "
               "--record-size 100 --throughput -1 --producer-props "
               "bootstrap.servers=localhost:9092 acks=1")
    produce.add_argument("--topic", required=True, help="the topic to send to")
    produce.add_argument("--num-records", type=int, required=True, metavar="N",
                         help="how many records to send")
    size = produce.add_mutually_exclusive_group(required=True)
    size.add_argument("--record-size", type=int, metavar="BYTES",
                      help="size of each record's value")
    size.add_argument("--payload-file", metavar="FILE",
                      help="values taken at random from the lines of this file")
    produce.add_argument("--throughput", type=float, required=True, metavar="RECORDS/S",
                         help="cap on records per second; -1 for no cap")
    produce.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE",
                         help="producer settings, e.g. bootstrap.servers=host:9092 acks=1")
    produce.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                         help="producer properties file (Kafka's format)")
    produce.add_argument("--bootstrap-server", metavar="HOST:PORT",
                         help="shortcut for --producer-props bootstrap.servers=...")
    produce.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                         help="progress line interval (default: 5000)")
    produce.add_argument("--transactional-id", metavar="ID",
                         help="send in transactions with this transactional id (default "
                              "with --transaction-duration-ms: "
                              "performance-producer-default-transactional-id)")
    produce.add_argument("--transaction-duration-ms", type=int, metavar="MS",
                         help="commit each transaction once it is this old (default with a "
                              "transactional id: 3000)")
    produce.set_defaults(run=run_command("perf", "produce"))

    consume = kinds.add_parser(
        "consume", help="consumer throughput",
        description="Read records as fast as possible and report MB/s and records/s, like "
                    "Kafka's ConsumerPerformance: a header, then one line of totals (times "
                    "as yyyy-MM-dd HH:mm:ss:SSS). Exits with status 1 when fewer than "
                    "--messages records arrive before --timeout.",
        epilog="example: moldau perf consume --bootstrap-server localhost:9092 --topic perf "
               "--messages 1000000")
    _consumer_source(consume)
    consume.add_argument("--messages", type=int, required=True, metavar="N",
                         help="how many records to read")
    consume.add_argument("--group", metavar="GROUP",
                         help="the consumer group (default: a new perf-consumer-NNNNN)")
    consume.add_argument("--from-latest", action="store_true",
                         help="start at the latest offset when the group has none (default: "
                              "the earliest)")
    consume.add_argument("--fetch-size", type=int, metavar="BYTES",
                         help="max.partition.fetch.bytes (default: 1048576)")
    consume.add_argument("--socket-buffer-size", type=int, metavar="BYTES",
                         help="receive.buffer.bytes (default: 2097152)")
    consume.add_argument("--timeout", type=int, default=10000, metavar="MS",
                         help="give up when no record arrives for this long "
                              "(default: 10000)")
    consume.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                         help="interval of progress lines (default: 5000)")
    consume.add_argument("--show-detailed-stats", action="store_true",
                         help="print a line of statistics per reporting interval instead "
                              "of the totals")
    consume.add_argument("--hide-header", action="store_true",
                         help="leave out the header line")
    consume.add_argument("--command-property", action="append", default=[],
                         dest="command_property", metavar="KEY=VALUE",
                         help="a consumer setting; repeat as needed")
    consume.add_argument("--consumer-props", nargs="+", action="extend",
                         dest="command_property", metavar="KEY=VALUE",
                         help="consumer settings, e.g. fetch.max.bytes=1048576 "
                              "max.poll.records=2000")
    consume.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                         metavar="FILE", help="consumer properties file (Kafka's format)")
    consume.set_defaults(run=run_command("perf", "consume"))


def add_commands(commands: Any) -> None:
    """Add the client tools to the `moldau` command's subparsers."""
    _topics_parser(commands)
    _groups_parser(commands)
    _produce_parser(commands)
    _consume_parser(commands)
    _perf_parser(commands)
