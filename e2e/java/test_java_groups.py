"""kafka-consumer-groups against Moldau and against Apache Kafka: listing, describing
(offsets, lag, members, state), resetting offsets that a Java consumer then follows, and
deleting groups."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks, Target, rec_from_json, run_driver, table
from e2e.kafka_dist import TOOLS, ToolResult, kafka_tool, start_java
from e2e.support import (
    Rec,
    assert_records_equal,
    kp_create_topic,
    kp_produce,
    now_ms,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS

PARTITIONS = 3
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]


def groups(target: Target, *args: str, check: bool = True) -> ToolResult:
    return kafka_tool("kafka-consumer-groups", "--bootstrap-server", target.bootstrap, *args,
                      check=check)


def offsets_table(result: ToolResult) -> tuple[list[str], list[list[str]]]:
    """(lines before the table, table rows sorted by topic and partition)."""
    lines = result.lines
    start = next((i for i, line in enumerate(lines) if line.startswith("GROUP ")), len(lines))
    rows = table(lines[start:])
    body = sorted(rows[1:], key=lambda row: (row[1], int(row[2])))
    return [line for line in lines[:start] if line.strip()], rows[:1] + body


def produce_numbered(target: Target, topic: str, per_partition: int) -> list[Rec]:
    base = now_ms() - 60_000
    records = [Rec(p, b"k-%d-%d" % (p, i), b"v-%d-%d" % (p, i), (("n", b"%d" % i),), base + i)
               for p in range(PARTITIONS) for i in range(per_partition)]
    kp_produce(target.bootstrap, topic, records)
    return records


def test_list_describe_reset_delete(target, tmp_path):
    topic = unique("java-groups")
    group = unique("java-group")
    kp_create_topic(target.bootstrap, topic, partitions=PARTITIONS)
    records = produce_numbered(target, topic, 10)
    committed = {0: 4, 1: 10, 2: 0}
    run_driver(target.bootstrap, [{"op": "commit", "group": group, "offsets": {
        f"{topic}:{p}": offset for p, offset in committed.items()}}], tmp_path)

    with Checks() as check:
        check.true("--list shows the group", group in groups(target, "--list").lines)

        described = groups(target, "--describe", "--group", group)
        _, rows = offsets_table(described)
        # The tool says so on stderr.
        check.equal("--describe without members", described.stderr.strip(),
                    f"Consumer group '{group}' has no active members.")
        check.equal("--describe offsets and lag", rows, [OFFSETS_HEADER] + [
            [group, topic, str(p), str(offset), "10", str(10 - offset), "-", "-", "-"]
            for p, offset in committed.items()])

        state = table(groups(target, "--describe", "--group", group, "--state").lines)
        check.equal("--describe --state", state, [
            ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [group, target.bootstrap, "(1)", "-", "Empty", "0"]])

        members = groups(target, "--describe", "--group", group, "--members")
        check.equal("--describe --members", table(members.lines), [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]])

        dry = groups(target, "--reset-offsets", "--group", group, "--topic", topic,
                     "--to-latest", "--dry-run")
        check.equal("--reset-offsets --to-latest --dry-run", offsets_table(dry)[1], [
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
            [group, topic, str(p), "10"] for p in range(PARTITIONS)])

        reset = groups(target, "--reset-offsets", "--group", group, "--topic", topic,
                       "--to-earliest", "--execute")
        check.equal("--reset-offsets --to-earliest --execute", offsets_table(reset)[1], [
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
            [group, topic, str(p), "0"] for p in range(PARTITIONS)])

        # A consumer of the group with default settings (auto.offset.reset=latest) starts
        # where the reset put the group: at the beginning.
        (consumed,) = run_driver(target.bootstrap, [{
            "op": "consume", "group": group, "topics": [topic], "count": len(records),
            "linger_ms": 500, "commit": True}], tmp_path)
        try:
            assert_records_equal([rec_from_json(r) for r in consumed["records"]],
                                 with_offsets(records))
        except AssertionError as exc:
            check.true("records read after the reset", False, str(exc))

        _, rows = offsets_table(groups(target, "--describe", "--group", group))
        check.equal("--describe after consuming everything", rows, [OFFSETS_HEADER] + [
            [group, topic, str(p), "10", "10", "0", "-", "-", "-"] for p in range(PARTITIONS)])

        deleted = groups(target, "--delete", "--group", group)
        check.equal("--delete", deleted.lines,
                    [f"Deletion of requested consumer groups ('{group}') was successful."])
        check.true("--list after --delete", group not in groups(target, "--list").lines)

        missing = groups(target, "--describe", "--group", group, check=False)
        check.equal("--describe of a deleted group", error_line(missing),
                    "Error: Executing consumer group command failed due to org.apache.kafka."
                    f"common.errors.GroupIdNotFoundException: Group {group} not found.")
        again = groups(target, "--delete", "--group", group, check=False)
        check.equal("--delete of a deleted group", [line for line in again.lines if line], [
            "Error: Deletion of some consumer groups failed:",
            f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors."
            "GroupIdNotFoundException: The group id does not exist."])


def error_line(result: ToolResult, default: str | None = None) -> str:
    """The tool's "Error: ..." line (some failures still exit 0)."""
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if line.startswith("Error: ")]
    if lines:
        return lines[0]
    return result.describe() if default is None else default


def test_active_member(target, tmp_path):
    """A console consumer in the group: members, state and refused deletion of a live group."""
    topic = unique("java-active")
    group = unique("java-active-group")
    kp_create_topic(target.bootstrap, topic, partitions=PARTITIONS)
    produce_numbered(target, topic, 2)
    consumer = start_java(TOOLS["kafka-console-consumer"], "--bootstrap-server",
                          target.bootstrap, "--topic", topic, "--group", group,
                          "--from-beginning", stdout=tmp_path / "consumer.out",
                          stderr=tmp_path / "consumer.err")
    try:
        rows = wait_for_member(target, group, consumer)
        with Checks() as check:
            check.equal("--describe with a member", rows, [OFFSETS_HEADER] + [
                [group, topic, str(p), "2", "2", "0", rows[1][6], "/127.0.0.1",
                 "console-consumer"] for p in range(PARTITIONS)])
            check.true("consumer id", rows[1][6].startswith("console-consumer-"), rows[1][6])

            members = table(groups(target, "--describe", "--group", group, "--members").lines)
            check.equal("--describe --members", members, [
                ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                [group, rows[1][6], "/127.0.0.1", "console-consumer", str(PARTITIONS)]])

            state = table(groups(target, "--describe", "--group", group, "--state").lines)
            check.equal("--describe --state", state, [
                ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                [group, target.bootstrap, "(1)", "range", "Stable", "1"]])

            refused = groups(target, "--delete", "--group", group, check=False)
            check.equal("--delete of a group with members",
                        [line for line in refused.lines if line], [
                            "Error: Deletion of some consumer groups failed:",
                            f"* Group '{group}' could not be deleted due to: org.apache.kafka."
                            "common.errors.GroupNotEmptyException: The group is not empty."])
    finally:
        stop(consumer)
    # The console consumer leaves the group when it is stopped; then the group can go.
    deadline = time.monotonic() + 30
    while True:
        deleted = groups(target, "--delete", "--group", group, check=False)
        if "was successful" in deleted.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert deleted.lines == [
        f"Deletion of requested consumer groups ('{group}') was successful."], deleted.describe()


def wait_for_member(target: Target, group: str, consumer: subprocess.Popen
                    ) -> list[list[str]]:
    """Describe the group until its one member holds every partition and has consumed all."""
    deadline = time.monotonic() + 60
    while True:
        assert consumer.poll() is None, f"console consumer exited with {consumer.returncode}"
        result = groups(target, "--describe", "--group", group, check=False)
        _, rows = offsets_table(result)
        if len(rows) == PARTITIONS + 1 and all(row[3] == "2" and row[6] != "-"
                                               for row in rows[1:]):
            return rows
        assert time.monotonic() < deadline, "no stable member:\n" + result.describe()
        time.sleep(1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def test_deleting_a_topic_drops_its_committed_offsets(target, tmp_path):
    """Committed offsets of a deleted topic go with it, so the group still describes."""
    topic = unique("java-gone")
    kept = unique("java-kept")
    group = unique("java-gone-group")
    lonely = unique("java-gone-lonely")
    for name in (topic, kept):
        kp_create_topic(target.bootstrap, name, partitions=1)
    run_driver(target.bootstrap, [
        {"op": "commit", "group": group, "offsets": {f"{topic}:0": 0, f"{kept}:0": 0}},
        {"op": "commit", "group": lonely, "offsets": {f"{topic}:0": 0}},
    ], tmp_path)
    kafka_tool("kafka-topics", "--bootstrap-server", target.bootstrap, "--delete",
               "--topic", topic)
    time.sleep(1)  # Kafka drops the offsets as it applies the deletion: allow it a moment.
    with Checks() as check:
        described = groups(target, "--describe", "--group", group)
        check.equal("offsets left after the topic was deleted", offsets_table(described)[1],
                    [OFFSETS_HEADER, [group, kept, "0", "0", "0", "0", "-", "-", "-"]])
        check.equal("errors describing the group", error_line(described, ""), "")

        described = groups(target, "--describe", "--group", lonely)
        check.equal("offsets of a group that had only the deleted topic's",
                    offsets_table(described)[1], [])
        check.equal("errors describing that group", error_line(described, ""), "")
        check.true("that group has no active members",
                   f"Consumer group '{lonely}' has no active members." in described.stderr)
