"""`moldau topics create|list|describe|alter|delete`, in the manner of kafka-topics."""

from __future__ import annotations

import argparse
import base64
import re
import uuid

from moldau.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    PartitionDescription,
    TopicDescription,
)
from moldau.client.cli.common import EXIT_OK, UsageError, admin_config, parse_pairs
from moldau.client.errors import ErrorCode, KafkaError, error_for


def kafka_uuid(value: uuid.UUID | None) -> str:
    """Kafka's text form of a topic id: URL-safe base64 of the 16 bytes, unpadded."""
    if value is None:
        return "AAAAAAAAAAAAAAAAAAAAAA"
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(admin_config(args))


def _timeout(args: argparse.Namespace) -> float:
    return args.timeout_ms / 1000


def matching_topics(admin: Admin, pattern: str | None, *, include_internal: bool,
                    timeout: float) -> list[str]:
    """Topics named `pattern` exactly, else those it matches as a regular expression."""
    names = admin.list_topics(include_internal=True, timeout=timeout)
    if pattern is None:
        return [n for n in names if include_internal or not n.startswith("__")]
    if pattern in names:
        return [pattern]
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"Invalid topic pattern {pattern!r}: {exc}") from None
    return [n for n in names if regex.fullmatch(n)
            and (include_internal or not n.startswith("__"))]


def _missing(pattern: str) -> KafkaError:
    return error_for(ErrorCode.unknown_topic_or_partition,
                     f"Topic '{pattern}' does not exist as expected")


def create(args: argparse.Namespace) -> int:
    configs = parse_pairs(args.config, "--config")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise UsageError("The replication factor must be greater than 0")
    with _admin(args) as admin:
        try:
            admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor,
                                          configs)], timeout=_timeout(args))
        except KafkaError as exc:
            if args.if_not_exists and exc.code is ErrorCode.topic_already_exists:
                return EXIT_OK
            raise
    print(f"Created topic {args.topic}.")
    return EXIT_OK


def list_(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for name in matching_topics(admin, args.topic,
                                    include_internal=not args.exclude_internal,
                                    timeout=_timeout(args)):
            print(name)
    return EXIT_OK


def _partition_line(topic: str, part: PartitionDescription) -> str:
    leader = part.leader_id if part.leader_id >= 0 else "none"
    fields = [f"Topic: {topic}", f"Partition: {part.partition}", f"Leader: {leader}",
              "Replicas: " + ",".join(map(str, part.replicas)),
              "Isr: " + ",".join(map(str, part.isr)), "Elr: ", "LastKnownElr: "]
    if part.offline_replicas:
        fields.append("Offline: " + ",".join(map(str, part.offline_replicas)))
    return "\t" + "\t".join(fields)


def describe(args: argparse.Namespace) -> int:
    timeout = _timeout(args)
    with _admin(args) as admin:
        names = matching_topics(admin, args.topic, include_internal=not args.exclude_internal,
                                timeout=timeout)
        if args.topic is not None and not names:
            raise _missing(args.topic)
        descriptions = admin.describe_topics(names, timeout=timeout)
        resources = [ConfigResource.topic(name) for name in names]
        configs = admin.describe_configs(resources, timeout=timeout) if resources else {}
    for name in names:
        topic: TopicDescription = descriptions[name]
        entries = configs.get(ConfigResource.topic(name), {})
        shown = ",".join(f"{k}={'' if e.value is None else e.value}"
                         for k, e in sorted(entries.items())
                         if e.source is ConfigSource.DYNAMIC_TOPIC_CONFIG)
        partitions = topic.partitions
        if args.under_replicated_partitions:
            partitions = tuple(p for p in partitions if len(p.isr) < len(p.replicas))
        if args.unavailable_partitions:
            partitions = tuple(p for p in partitions if p.leader_id < 0)
        filtering = args.under_replicated_partitions or args.unavailable_partitions
        if not filtering:
            print(f"Topic: {name}\tTopicId: {kafka_uuid(topic.topic_id)}\t"
                  f"PartitionCount: {len(topic.partitions)}\t"
                  f"ReplicationFactor: {topic.replication_factor}\tConfigs: {shown}")
        for part in partitions:
            print(_partition_line(name, part))
    return EXIT_OK


def alter(args: argparse.Namespace) -> int:
    sets = parse_pairs(args.config, "--config")
    deletes = list(args.delete_config)
    if args.partitions is None and not sets and not deletes:
        raise UsageError("Nothing to alter: give --partitions, --config or --delete-config")
    timeout = _timeout(args)
    with _admin(args) as admin:
        names = matching_topics(admin, args.topic, include_internal=False, timeout=timeout)
        if not names:
            raise _missing(args.topic)
        if sets or deletes:
            ops = [AlterConfigOp.set(k, v) for k, v in sets.items()]
            ops += [AlterConfigOp.delete(k) for k in deletes]
            admin.incremental_alter_configs({ConfigResource.topic(n): ops for n in names},
                                            timeout=timeout)
            for name in names:
                print(f"Updated config for topic {name}.")
        if args.partitions is not None:
            admin.create_partitions({n: NewPartitions(args.partitions) for n in names},
                                    timeout=timeout)
            for name in names:
                print(f"Increased the partition count of topic {name} to {args.partitions}.")
    return EXIT_OK


def delete(args: argparse.Namespace) -> int:
    timeout = _timeout(args)
    with _admin(args) as admin:
        names = matching_topics(admin, args.topic, include_internal=False, timeout=timeout)
        if not names:
            if args.if_exists:
                return EXIT_OK
            raise _missing(args.topic)
        admin.delete_topics(names, timeout=timeout)
    for name in names:
        print(f"Deleted topic {name}.")
    return EXIT_OK
