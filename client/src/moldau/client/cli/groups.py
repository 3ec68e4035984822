"""`moldau groups list|describe|reset-offsets|delete`, in the manner of kafka-consumer-groups.

Tables are printed as that tool prints them: a blank line, a header, then one row per line in
columns at least as wide as Kafka's and widened to fit, with `-` for a missing value. Notes
about a group's state go to stderr; so do warnings. A group that cannot be handled (it does
not exist, it is active, it cannot be deleted) is reported with an `Error: ...` line, the
other groups are still handled, and the command exits with status 1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone

from moldau.client.admin import Admin, GroupDescription, GroupListing, OffsetSpec
from moldau.client.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    admin_config,
    describe_error,
)
from moldau.client.errors import ErrorCode, KafkaError, KafkaTimeoutError
from moldau.client.types import TopicPartition

MISSING = "-"
# The states a consumer group can be in (the last two only in the new group protocol).
CONSUMER_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
                         "Empty", "Assigning", "Reconciling")
_INACTIVE = ("Empty", "Dead")
_REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


# --------------------------------------------------------------------------- plumbing


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(admin_config(args))


def _timeout(args: argparse.Namespace) -> float:
    return args.timeout_ms / 1000


def _error(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"WARN: {message}", file=sys.stderr)


def _print_table(header: Sequence[str], rows: Iterable[Sequence[object]],
                 widths: Sequence[int], *, blank_line: bool = True) -> None:
    """Left-aligned columns, each at least `widths[i]` wide (all but the last column) and
    wide enough for its longest value; the last column is not padded."""
    text = [[str(v) for v in row] for row in [header, *rows]]
    sizes = [max(width, *(len(row[i]) for row in text)) for i, width in enumerate(widths)]
    if blank_line:
        print()
    for row in text:
        cells = [value.ljust(sizes[i]) for i, value in enumerate(row[:-1])]
        print(" ".join([*cells, row[-1]]).rstrip())


def _consumer_groups(admin: Admin, timeout: float) -> list[GroupListing]:
    """Groups of the consumer protocol, and groups that have only committed offsets."""
    return [g for g in admin.list_groups(timeout=timeout)
            if g.protocol_type in ("consumer", "")]


def _selected_groups(admin: Admin, args: argparse.Namespace, timeout: float) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in _consumer_groups(admin, timeout)]
    return sorted(dict.fromkeys(args.group))


def _description(admin: Admin, group: str, timeout: float) -> GroupDescription | None:
    """The group, or None if it does not exist (Kafka 4 says so, older brokers say Dead)."""
    try:
        description = admin.describe_groups([group], timeout=timeout)[group]
    except KafkaError as exc:
        if exc.code is ErrorCode.group_id_not_found:
            return None
        raise
    return None if description.state == "Dead" else description


def _missing_group(group: str) -> str:
    return f"Consumer group '{group}' does not exist."


def _note_state(group: str, state: str) -> None:
    """Kafka's remarks on a group that is not simply Stable."""
    if state == "Empty":
        print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
    elif state in _REBALANCING:
        print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)


def _offsets(admin: Admin, partitions: Iterable[TopicPartition], spec: int,
             timeout: float) -> dict[TopicPartition, int]:
    """ListOffsets by one OffsetSpec for every partition; errors propagate."""
    wanted = dict.fromkeys(partitions, spec)
    if not wanted:
        return {}
    listed = admin.list_offsets(wanted, timeout=timeout)
    return {tp: listed[tp].offset for tp in wanted}


def _log_end_offsets(admin: Admin, partitions: Sequence[TopicPartition],
                     timeout: float) -> dict[TopicPartition, int | None]:
    """Latest offsets; None for a partition whose lookup fails (a topic deleted meanwhile,
    say), so that one partition does not hide the others."""
    try:
        return dict(_offsets(admin, partitions, OffsetSpec.LATEST, timeout))
    except KafkaTimeoutError:
        raise
    except KafkaError:
        pass
    out: dict[TopicPartition, int | None] = {}
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp)
    for tps in by_topic.values():
        try:
            out.update(_offsets(admin, tps, OffsetSpec.LATEST, timeout))
        except KafkaTimeoutError:
            raise
        except KafkaError:
            out.update(dict.fromkeys(tps))
    return out


# --------------------------------------------------------------------------- list


def _parse_states(text: str) -> set[str]:
    known = {state.lower(): state for state in CONSUMER_GROUP_STATES}
    states = {known.get(item.strip().lower()) for item in text.split(",")}
    if None in states:
        raise UsageError(f"Invalid state list '{text}'. Valid states are: "
                         + ", ".join(CONSUMER_GROUP_STATES))
    return {state.lower() for state in states if state}


def list_(args: argparse.Namespace) -> int:
    states = _parse_states(args.state) if args.state else set()
    with _admin(args) as admin:
        groups = _consumer_groups(admin, _timeout(args))
    if args.state is None:
        for group in groups:
            print(group.group_id)
        return EXIT_OK
    rows = [(g.group_id, g.state or "Unknown") for g in groups
            if not states or (g.state or "").lower() in states]
    _print_table(("GROUP", "STATE"), rows, (15,), blank_line=False)
    return EXIT_OK


# --------------------------------------------------------------------------- describe


def _offset_rows(admin: Admin, group: str, description: GroupDescription,
                 timeout: float) -> list[tuple[object, ...]]:
    """One row per partition a member holds (members with most partitions first) and per
    other partition with a committed offset."""
    committed = admin.list_group_offsets(group, timeout=timeout)
    holders = sorted((m for m in description.members if m.assignment),
                     key=lambda m: (-len(m.assignment), m.member_id))
    placed: list[tuple[TopicPartition, tuple[str, str, str]]] = []
    for member in holders:
        who = (member.member_id, member.host, member.client_id)
        placed += [(tp, who) for tp in sorted(set(member.assignment))]
    held = {tp for tp, _ in placed}
    placed += [(tp, (MISSING, MISSING, MISSING)) for tp in sorted(set(committed) - held)]
    ends = _log_end_offsets(admin, [tp for tp, _ in placed], timeout)
    rows = []
    for tp, who in placed:
        offset = committed[tp].offset if tp in committed else None
        end = ends.get(tp)
        lag = end - offset if offset is not None and end is not None else None
        rows.append((group, tp.topic, tp.partition,
                     *(MISSING if v is None else v for v in (offset, end, lag)), *who))
    return rows


def _print_offsets(admin: Admin, group: str, description: GroupDescription,
                   timeout: float) -> None:
    rows = _offset_rows(admin, group, description, timeout)
    if rows:
        _print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID"), rows,
                     (15, 15, 10, 15, 15, 15, 15, 15))


def _assignment_text(partitions: Iterable[TopicPartition]) -> str:
    """topic(0,1,2), other(3): each topic's partitions, topics in name order."""
    by_topic: dict[str, set[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, set()).add(tp.partition)
    if not by_topic:
        return MISSING
    return ", ".join(f"{topic}({','.join(map(str, sorted(parts)))})"
                     for topic, parts in sorted(by_topic.items()))


def _print_members(group: str, description: GroupDescription, verbose: bool) -> None:
    members = sorted(description.members, key=lambda m: m.member_id)
    if not members:
        return
    static = any(m.group_instance_id for m in members)
    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if static else []),
              "HOST", "CLIENT-ID", "#PARTITIONS"]
    widths = [15, 15, *([17] if static else []), 15, 15]
    if verbose:
        header.append("ASSIGNMENT")
        widths.append(15)
    rows = []
    for m in members:
        row: list[object] = [group, m.member_id]
        if static:
            row.append(m.group_instance_id or MISSING)
        row += [m.host, m.client_id, len(set(m.assignment))]
        if verbose:
            row.append(_assignment_text(m.assignment))
        rows.append(row)
    _print_table(header, rows, widths)


def _print_state(group: str, description: GroupDescription) -> None:
    node = description.coordinator
    coordinator = MISSING if node is None else f"{node.host}:{node.port}  ({node.node_id})"
    _print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                 [(group, coordinator, description.protocol or MISSING, description.state,
                   len(description.members))], (25, 25, 20, 15))


def describe(args: argparse.Namespace) -> int:
    timeout = _timeout(args)
    status = EXIT_OK
    with _admin(args) as admin:
        for group in _selected_groups(admin, args, timeout):
            description = _description(admin, group, timeout)
            if description is None:
                _error(_missing_group(group))
                status = EXIT_ERROR
                continue
            _note_state(group, description.state)
            if args.members:
                _print_members(group, description, args.verbose)
            elif args.state:
                _print_state(group, description)
            else:
                _print_offsets(admin, group, description, timeout)
            sys.stdout.flush()
    return status


# --------------------------------------------------------------------------- reset-offsets

_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                       r"(Z|[+-]\d{2}(?::?\d{2})?)?", re.IGNORECASE)
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?=[-+]?\d)(?:([-+]?\d+)H)?"
                       r"(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{1,9}))?S)?)?", re.IGNORECASE)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_datetime(text: str) -> int:
    """YYYY-MM-DDTHH:mm:SS[.sss][Z|±HH[:MM]] to epoch milliseconds; no zone means UTC."""
    match = _DATETIME.fullmatch(text.strip())
    if match:
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        millis = int((match.group(7) or "0").ljust(3, "0")[:3])
        zone = (match.group(8) or "Z").upper()
        if zone == "Z":
            tz = UTC
        else:
            digits = zone[1:].replace(":", "")
            shift = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            tz = timezone(-shift if zone[0] == "-" else shift)
        try:
            moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
        except ValueError:
            pass
        else:
            return (moment - _EPOCH) // timedelta(milliseconds=1)
    raise UsageError(f"Invalid date and time '{text}': expected YYYY-MM-DDTHH:mm:SS.sss, "
                     "optionally followed by Z or an offset such as +02:00")


def parse_duration(text: str) -> int:
    """An ISO-8601 duration PnDTnHnMn.nS (each part optional, signs allowed) to ms."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()[1:]):
        raise UsageError(f"Invalid duration '{text}': expected an ISO-8601 duration such as "
                         "PT30M, PT1H30M or P1DT12H")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    total = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
             + int(minutes or 0) * 60_000 + int(seconds or 0) * 1000)
    if fraction:
        part = int(fraction.ljust(3, "0")[:3])
        total += -part if (seconds or "").startswith("-") else part
    return -total if sign == "-" else total


def _parse_topic_arg(text: str) -> tuple[str, list[int] | None]:
    topic, sep, partitions = text.partition(":")
    try:
        parts = [int(p) for p in partitions.split(",")] if sep else None
    except ValueError:
        parts = []
    if not topic or parts == [] or (parts and min(parts) < 0):
        raise UsageError(f"Invalid --topic '{text}': expected TOPIC or "
                         "TOPIC:PARTITION,PARTITION,...")
    return topic, parts


def _read_plan(path: str, single_group: str | None) -> dict[str, dict[TopicPartition, int]]:
    """A reset plan: topic,partition,offset lines (for the one --group) or
    group,topic,partition,offset lines."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}") from None
    plan: dict[str, dict[TopicPartition, int]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and single_group is None:
            raise UsageError(f"{path} line {number} has no group column: name exactly one "
                             "--group, or write group,topic,partition,offset lines")
        if len(fields) == 3 and single_group is not None:
            group, (topic, partition, offset) = single_group, fields
        elif len(fields) == 4:
            group, topic, partition, offset = fields
        else:
            group = topic = partition = offset = ""
        try:
            tp, value = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            tp = None
        if tp is None or not group or not topic or tp.partition < 0:
            raise UsageError(f"{path} line {number}: expected topic,partition,offset or "
                             f"group,topic,partition,offset, not {line.strip()!r}")
        plan.setdefault(group, {})[tp] = value
    return plan


def _partitions_to_reset(admin: Admin, args: argparse.Namespace, group: str,
                         timeout: float) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(admin.list_group_offsets(group, timeout=timeout))
    wanted = [_parse_topic_arg(text) for text in args.topic]
    topics = admin.describe_topics(sorted({topic for topic, _ in wanted}), timeout=timeout)
    out: set[TopicPartition] = set()
    for topic, partitions in wanted:
        existing = {p.partition for p in topics[topic].partitions}
        for partition in sorted(existing) if partitions is None else partitions:
            if partition not in existing:
                raise UsageError(f"Partition {topic}-{partition} does not exist")
            out.add(TopicPartition(topic, partition))
    return sorted(out)


def _clamped(admin: Admin, requested: dict[TopicPartition, int],
             timeout: float) -> dict[TopicPartition, int]:
    """Each offset moved into [earliest, latest] of its partition, as Kafka does."""
    earliest = _offsets(admin, requested, OffsetSpec.EARLIEST, timeout)
    latest = _offsets(admin, requested, OffsetSpec.LATEST, timeout)
    out = {}
    for tp, offset in requested.items():
        if offset > latest[tp]:
            _warn(f"New offset ({offset}) is higher than the latest offset of {tp}; "
                  f"using {latest[tp]}.")
            offset = latest[tp]
        elif offset < earliest[tp]:
            _warn(f"New offset ({offset}) is lower than the earliest offset of {tp}; "
                  f"using {earliest[tp]}.")
            offset = earliest[tp]
        out[tp] = offset
    return out


def _for_time(admin: Admin, partitions: list[TopicPartition], timestamp: int,
              timeout: float) -> dict[TopicPartition, int]:
    """The first offset at or after `timestamp`; the latest offset where there is none."""
    found = _offsets(admin, partitions, OffsetSpec.for_timestamp(timestamp), timeout)
    none = [tp for tp, offset in found.items() if offset < 0]
    for tp in none:
        _warn(f"Partition {tp} has no record at or after the given time; using its latest "
              "offset.")
    found.update(_offsets(admin, none, OffsetSpec.LATEST, timeout))
    return found


def _committed(admin: Admin, group: str, partitions: list[TopicPartition],
               timeout: float) -> dict[TopicPartition, int]:
    listed = admin.list_group_offsets(group, partitions, timeout=timeout)
    return {tp: listed[tp].offset for tp in partitions if tp in listed}


def _new_offsets(admin: Admin, args: argparse.Namespace, group: str,
                 plan: dict[str, dict[TopicPartition, int]] | None,
                 timeout: float) -> dict[TopicPartition, int] | None:
    """The offsets to commit for `group`, or None (after an error line) when the reset plan
    file has none for it."""
    if plan is not None:
        if group not in plan:
            _error(f"No reset plan for group '{group}' found in {args.from_file}.")
            return None
        return _clamped(admin, plan[group], timeout)
    partitions = _partitions_to_reset(admin, args, group, timeout)
    if not partitions:
        return {}
    if args.to_earliest:
        return _offsets(admin, partitions, OffsetSpec.EARLIEST, timeout)
    if args.to_latest:
        return _offsets(admin, partitions, OffsetSpec.LATEST, timeout)
    if args.to_current:
        current = _committed(admin, group, partitions, timeout)
        rest = _offsets(admin, [tp for tp in partitions if tp not in current],
                        OffsetSpec.LATEST, timeout)
        return {tp: current[tp] if tp in current else rest[tp] for tp in partitions}
    if args.to_offset is not None:
        return _clamped(admin, dict.fromkeys(partitions, args.to_offset), timeout)
    if args.shift_by is not None:
        current = _committed(admin, group, partitions, timeout)
        for tp in partitions:
            if tp not in current:
                raise UsageError(f"Cannot shift the offset of {tp} for group '{group}': it "
                                 "has no committed offset")
        return _clamped(admin, {tp: current[tp] + args.shift_by for tp in partitions},
                        timeout)
    if args.to_datetime is not None:
        return _for_time(admin, partitions, parse_datetime(args.to_datetime), timeout)
    assert args.by_duration is not None
    since = int(time.time() * 1000) - parse_duration(args.by_duration)
    return _for_time(admin, partitions, since, timeout)


def _refusal(group: str, state: str) -> str:
    return (f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {state}.")


def reset_offsets(args: argparse.Namespace) -> int:
    if args.from_file is None and not args.topic and not args.all_topics:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    # Check what can be checked before connecting.
    for text in args.topic or ():
        _parse_topic_arg(text)
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        parse_duration(args.by_duration)
    single = args.group[0] if args.group and len(set(args.group)) == 1 else None
    plan = _read_plan(args.from_file, single) if args.from_file is not None else None
    if not args.execute and not args.dry_run:
        _warn("No offsets will be changed because --execute is missing; add --dry-run to "
              "ask for this explicitly.")
    timeout = _timeout(args)
    status = EXIT_OK
    results: dict[str, dict[TopicPartition, int]] = {}
    with _admin(args) as admin:
        for group in _selected_groups(admin, args, timeout):
            description = _description(admin, group, timeout)
            state = "Dead" if description is None else description.state
            if state not in _INACTIVE:
                _error(_refusal(group, state))
                status = EXIT_ERROR
                continue
            offsets = _new_offsets(admin, args, group, plan, timeout)
            if offsets is None:
                status = EXIT_ERROR
                continue
            if args.execute and offsets:
                try:
                    admin.alter_group_offsets(group, offsets, timeout=timeout)
                except KafkaError as exc:
                    # A member joined since the state was read.
                    if exc.code not in (ErrorCode.unknown_member_id,
                                        ErrorCode.rebalance_in_progress,
                                        ErrorCode.illegal_generation):
                        raise
                    now = _description(admin, group, timeout)
                    state = "Dead" if now is None else now.state
                    _error(_refusal(group, state) if state not in _INACTIVE
                           else f"Offsets of group '{group}' not reset: {describe_error(exc)}")
                    status = EXIT_ERROR
                    continue
            results[group] = offsets
    rows = [(group, tp.topic, tp.partition, offset)
            for group, offsets in sorted(results.items())
            for tp, offset in sorted(offsets.items())]
    if args.export:
        for group, topic, partition, offset in rows:
            print(f"{topic},{partition},{offset}" if single is not None
                  else f"{group},{topic},{partition},{offset}")
    elif results:
        _print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows, (30, 30, 10))
    return status


# --------------------------------------------------------------------------- delete

_DELETE_REASONS = {
    ErrorCode.group_id_not_found: "The group does not exist.",
    ErrorCode.non_empty_group: "The group is not empty (it has active members).",
    ErrorCode.invalid_group_id: "The group id is not valid.",
    ErrorCode.group_authorization_failed: "Not authorized to delete the group.",
}


def delete(args: argparse.Namespace) -> int:
    timeout = _timeout(args)
    deleted: list[str] = []
    failed: list[tuple[str, str]] = []
    with _admin(args) as admin:
        groups = _selected_groups(admin, args, timeout)
        for group in groups:
            try:
                admin.delete_groups([group], timeout=timeout)
            except KafkaError as exc:
                if exc.code not in _DELETE_REASONS:
                    raise
                failed.append((group, _DELETE_REASONS[exc.code]))
            else:
                deleted.append(group)
    if not groups:
        print("There are no consumer groups to delete.")
        return EXIT_OK
    names = ", ".join(f"'{group}'" for group in deleted)
    if not failed:
        print(f"Deletion of requested consumer groups ({names}) was successful.")
        return EXIT_OK
    for group, reason in failed:
        _error(f"Consumer group '{group}' could not be deleted: {reason}")
    if deleted:
        print(f"These consumer groups were deleted successfully: {names}")
    return EXIT_ERROR
