"""`moldau groups list|describe|reset-offsets|delete` as subprocesses against a real broker:
the tables they print, the offsets they commit, and their error messages."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta, timezone

import pytest

from e2e.support import (
    Rec,
    ck_committed,
    ck_consumer,
    ck_create_topic,
    ck_describe_group,
    ck_produce,
    ck_produce_numbered,
    now_ms,
    unique,
    wait_split,
    wait_until,
)
from e2e.test_client_cli import closed_port, moldau, ok, one_line_error
from moldau.client import Admin, TopicPartition

pytestmark = pytest.mark.timeout(120)

NODE_ID = 4
BROKER_OVERRIDES = {"node.id": NODE_ID, "group.initial.rebalance.delay.ms": 0,
                    "auto.create.topics.enable": "false"}

OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]
NO_EXECUTE = ("WARN: No offsets will be changed because --execute is missing; add --dry-run "
              "to ask for this explicitly.")


@pytest.fixture(scope="module")
def admin(module_broker):
    client = Admin({"bootstrap.servers": module_broker.bootstrap,
                    "default.api.timeout.ms": 20000})
    yield client
    client.close()


def groups(broker, *args: str) -> subprocess.CompletedProcess:
    return moldau("groups", *args, "--bootstrap-server", broker.bootstrap)


def succeeded(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """Exit status 0; stdout and stderr (where notes and warnings go)."""
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout.decode(), proc.stderr.decode()


def table(text: str) -> list[list[str]]:
    """A table as kafka-consumer-groups prints it: a blank line, a header, then rows whose
    values start where their column's name starts. Returns the header and the rows."""
    lines = text.split("\n")
    assert lines[0] == "" and lines[-1] == "", text
    header, *rows = lines[1:-1]
    starts = [m.start() for m in re.finditer(r"\S+(?: \(ID\))?", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    out = []
    for line in [header, *rows]:
        assert line == line.rstrip(), repr(line)
        for start in starts:
            assert start < len(line) and line[start] != " ", (start, line)
            assert start == 0 or line[start - 1] == " ", (start, line)
        out.append([line[a:b].strip() for a, b in bounds])
    return out


def table_text(out: str, group: str) -> str:
    """The table of `group` in the output of a describe of several groups."""
    for chunk in out.split("\n\n"):
        body = chunk.strip("\n")
        if any(line.startswith(group + " ") for line in body.splitlines()[1:]):
            return "\n" + body + "\n"
    raise AssertionError(f"no table of {group} in {out!r}")


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets as a consumer outside any generation (as a standalone consumer does)."""
    from confluent_kafka import TopicPartition as CkTopicPartition

    consumer = ck_consumer(bootstrap, **{"group.id": group})
    try:
        consumer.commit(offsets=[CkTopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def utc_text(ms: int, zone: timezone = UTC) -> str:
    """Epoch milliseconds as YYYY-MM-DDTHH:mm:SS.sss followed by Z or ±HH:MM."""
    moment = datetime.fromtimestamp(ms / 1000, zone)
    suffix = "Z" if zone is UTC else moment.strftime("%z")[:3] + ":" + moment.strftime("%z")[3:]
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}" + suffix


def test_help_of_every_groups_command():
    top = ok(moldau("groups", "--help"))
    for action in ("list", "describe", "reset-offsets", "delete"):
        assert action in top
    for action, flags in [
        ("list", ["--bootstrap-server", "--state", "--command-config", "--timeout-ms",
                  "example:"]),
        ("describe", ["--group", "--all-groups", "--offsets", "--members", "--state",
                      "--verbose", "LOG-END-OFFSET", "example:"]),
        ("reset-offsets", ["--group", "--all-groups", "--topic", "--all-topics",
                           "--to-earliest", "--to-latest", "--to-current", "--to-offset",
                           "--shift-by", "--to-datetime", "--by-duration", "--from-file",
                           "--dry-run", "--execute", "--export", "example:"]),
        ("delete", ["--group", "--all-groups", "example:"]),
    ]:
        text = ok(moldau("groups", action, "--help"))
        for flag in flags:
            assert flag in text, (action, flag)


def test_live_group_then_empty_then_deleted(module_broker, group_workers):
    bootstrap = module_broker.bootstrap
    topic = unique("gcli")
    ck_create_topic(bootstrap, topic, 3)
    group = unique("gcli-live")
    worker = group_workers.start("ck", bootstrap, group, [topic], assignor=["range"],
                                 client_id="cli-member")
    wait_split([worker], {(topic, p) for p in range(3)}, timeout=30)
    ck_produce_numbered(bootstrap, topic, range(30), 3)
    want = {(topic, p): 10 for p in range(3)}
    wait_until(lambda: ck_committed(bootstrap, group) == want, 20, "commits of 10 each")
    [member] = ck_describe_group(bootstrap, group).members
    assert member.client_id == "cli-member"

    # --- Stable, with one member holding every partition
    assert group in succeeded(groups(module_broker, "list"))[0].splitlines()
    out, _ = succeeded(groups(module_broker, "list", "--state"))
    lines = out.splitlines()
    assert lines[0].split() == ["GROUP", "STATE"]
    assert [group, "Stable"] in [line.split() for line in lines[1:]]
    out, _ = succeeded(groups(module_broker, "list", "--state", "stable,Empty"))
    assert [group, "Stable"] in [line.split() for line in out.splitlines()[1:]]
    out, _ = succeeded(groups(module_broker, "list", "--state", "Empty"))
    assert group not in out

    out, err = succeeded(groups(module_broker, "describe", "--group", group))
    assert err == ""
    assert table(out) == [OFFSETS_HEADER] + [
        [group, topic, str(p), "10", "10", "0", member.member_id, "/127.0.0.1", "cli-member"]
        for p in range(3)]
    assert succeeded(groups(module_broker, "describe", "--group", group, "--offsets"))[0] \
        == out

    out, _ = succeeded(groups(module_broker, "describe", "--group", group, "--members"))
    assert table(out) == [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                          [group, member.member_id, "/127.0.0.1", "cli-member", "3"]]
    out, _ = succeeded(groups(module_broker, "describe", "--group", group, "--members",
                              "--verbose"))
    assert table(out) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
        [group, member.member_id, "/127.0.0.1", "cli-member", "3", f"{topic}(0,1,2)"]]

    out, _ = succeeded(groups(module_broker, "describe", "--group", group, "--state"))
    assert table(out) == [
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [group, f"127.0.0.1:{module_broker.port}  ({NODE_ID})", "range", "Stable", "1"]]

    # --- an active group can be neither reset nor deleted
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", group,
                                 "--all-topics", "--to-earliest", "--execute")) == (
        f"Error: Assignments can only be reset if the group '{group}' is inactive, but the "
        "current state is Stable.")
    assert one_line_error(groups(module_broker, "delete", "--group", group)) == (
        f"Error: Consumer group '{group}' could not be deleted: The group is not empty "
        "(it has active members).")
    assert ck_committed(bootstrap, group) == want

    # --- Empty: offsets without members, and lag once more records arrive
    worker.close()
    ck_produce_numbered(bootstrap, topic, range(30, 34), 3)  # +2, +1, +1
    out, err = succeeded(groups(module_broker, "describe", "--group", group))
    assert err == f"Consumer group '{group}' has no active members.\n"
    assert table(out) == [OFFSETS_HEADER] + [
        [group, topic, str(p), "10", str(end), str(end - 10), "-", "-", "-"]
        for p, end in enumerate([12, 11, 11])]
    out, err = succeeded(groups(module_broker, "describe", "--group", group, "--members"))
    assert (out, err) == ("", f"Consumer group '{group}' has no active members.\n")
    out, _ = succeeded(groups(module_broker, "describe", "--group", group, "--state"))
    assert table(out)[1] == [group, f"127.0.0.1:{module_broker.port}  ({NODE_ID})", "-",
                             "Empty", "0"]
    single, _ = succeeded(groups(module_broker, "describe", "--group", group))
    everything, _ = succeeded(groups(module_broker, "describe", "--all-groups"))
    assert table(table_text(everything, group)) == table(single)

    # --- deleted
    assert ok(groups(module_broker, "delete", "--group", group)) == (
        f"Deletion of requested consumer groups ('{group}') was successful.\n")
    assert group not in ok(groups(module_broker, "list")).splitlines()
    assert ck_committed(bootstrap, group) == {}
    assert one_line_error(groups(module_broker, "describe", "--group", group)) == (
        f"Error: Consumer group '{group}' does not exist.")



def test_reset_offsets_scenarios(module_broker, admin, tmp_path):
    bootstrap = module_broker.bootstrap
    topic = unique("greset")
    ck_create_topic(bootstrap, topic, 2)
    base = (now_ms() - 3_600_000) // 1000 * 1000 + 123
    # Partition 0: a record a second; partition 1: one every two seconds.
    ck_produce(bootstrap, topic, [Rec(p, None, b"v%d" % i, (), base + i * 1000 * (p + 1))
                                  for i in range(10) for p in range(2)])
    admin.delete_records({TopicPartition(topic, 1): 2})  # partition 1 now starts at 2
    group = unique("greset-g")
    commit(bootstrap, group, {(topic, 0): 4, (topic, 1): 6})

    def committed() -> dict[int, int]:
        return {p: o for (t, p), o in ck_committed(bootstrap, group).items() if t == topic}

    def reset(*args: str, execute: bool = True) -> tuple[list[list[int]], str]:
        out, err = succeeded(groups(module_broker, "reset-offsets", "--group", group, *args,
                                    *(["--execute"] if execute else [])))
        rows = table(out)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        assert all(row[:2] == [group, topic] for row in rows[1:])
        return [[int(row[2]), int(row[3])] for row in rows[1:]], err

    # A dry run (the default, or asked for) prints the plan and changes nothing.
    assert reset("--topic", topic, "--to-earliest", execute=False) == (
        [[0, 0], [1, 2]], NO_EXECUTE + "\n")
    assert reset("--topic", topic, "--to-latest", "--dry-run", execute=False) == (
        [[0, 10], [1, 10]], "")
    assert committed() == {0: 4, 1: 6}

    assert reset("--topic", topic, "--to-earliest") == ([[0, 0], [1, 2]], "")
    assert committed() == {0: 0, 1: 2}
    assert reset("--all-topics", "--to-latest") == ([[0, 10], [1, 10]], "")
    assert committed() == {0: 10, 1: 10}

    # --to-offset and --shift-by stay within [earliest, latest].
    assert reset("--topic", f"{topic}:0", "--to-offset", "3") == ([[0, 3]], "")
    assert committed() == {0: 3, 1: 10}
    rows, err = reset("--topic", f"{topic}:0,1", "--to-offset", "1")
    assert rows == [[0, 1], [1, 2]]
    assert err == (f"WARN: New offset (1) is lower than the earliest offset of {topic}-1; "
                   "using 2.\n")
    rows, err = reset("--topic", f"{topic}:1", "--to-offset", "99")
    assert (rows, committed()) == ([[1, 10]], {0: 1, 1: 10})
    assert "higher than the latest offset" in err
    assert reset("--all-topics", "--shift-by", "5")[0] == [[0, 6], [1, 10]]
    assert committed() == {0: 6, 1: 10}
    assert reset("--topic", topic, "--shift-by", "-7")[0] == [[0, 0], [1, 3]]
    assert committed() == {0: 0, 1: 3}
    assert reset("--topic", topic, "--to-current")[0] == [[0, 0], [1, 3]]

    # By time: the first record at or after it; the latest offset when there is none.
    at = base + 5000  # partition 0: offset 5; partition 1 (every 2 s): offset 3
    assert reset("--topic", topic, "--to-datetime", utc_text(at))[0] == [[0, 5], [1, 3]]
    assert committed() == {0: 5, 1: 3}
    assert reset("--topic", topic, "--to-datetime", utc_text(at + 1))[0] == [[0, 6], [1, 3]]
    plus_two = timezone(timedelta(hours=2))
    assert reset("--topic", topic, "--to-datetime", utc_text(at + 2000, plus_two))[0] == \
        [[0, 7], [1, 4]]
    assert committed() == {0: 7, 1: 4}
    rows, err = reset("--topic", topic, "--to-datetime", utc_text(base + 15_000))
    assert rows == [[0, 10], [1, 8]]
    assert err == (f"WARN: Partition {topic}-0 has no record at or after the given time; "
                   "using its latest offset.\n")
    assert reset("--topic", topic, "--by-duration", "PT2H")[0] == [[0, 0], [1, 2]]
    assert committed() == {0: 0, 1: 2}

    # --export writes what --from-file reads back.
    out, _ = succeeded(groups(module_broker, "reset-offsets", "--group", group, "--topic",
                              topic, "--to-offset", "7", "--dry-run", "--export"))
    assert out == f"{topic},0,7\n{topic},1,7\n"
    assert committed() == {0: 0, 1: 2}
    plan = tmp_path / "plan.csv"
    plan.write_text(out)
    assert reset("--from-file", str(plan))[0] == [[0, 7], [1, 7]]
    assert committed() == {0: 7, 1: 7}

    # For several groups the CSV has a group column; a group that does not exist yet may
    # get offsets too (it is not active).
    fresh = unique("greset-new")
    out, _ = succeeded(groups(module_broker, "reset-offsets", "--group", group, "--group",
                              fresh, "--topic", f"{topic}:1", "--to-earliest", "--dry-run",
                              "--export"))
    assert out.splitlines() == sorted([f"{group},{topic},1,2", f"{fresh},{topic},1,2"])
    plan.write_text(out.replace(f"{topic},1,2", f"{topic},1,9"))
    out, _ = succeeded(groups(module_broker, "reset-offsets", "--group", group, "--group",
                              fresh, "--from-file", str(plan), "--execute"))
    assert [row[0] for row in table(out)[1:]] == sorted([group, fresh])
    assert committed() == {0: 7, 1: 9}
    assert ck_committed(bootstrap, fresh) == {(topic, 1): 9}

    # --to-current keeps committed offsets and takes the latest offset elsewhere.
    partial = unique("greset-partial")
    commit(bootstrap, partial, {(topic, 0): 4})
    out, _ = succeeded(groups(module_broker, "reset-offsets", "--group", partial, "--topic",
                              topic, "--to-current", "--execute"))
    assert [row[2:] for row in table(out)[1:]] == [["0", "4"], ["1", "10"]]
    assert ck_committed(bootstrap, partial) == {(topic, 0): 4, (topic, 1): 10}


def test_error_messages(module_broker, admin):
    missing = unique("gcli-missing")
    topic = unique("gcli-err")
    ck_create_topic(module_broker.bootstrap, topic, 1)
    uncommitted = unique("gcli-none")

    assert one_line_error(groups(module_broker, "describe", "--group", missing)) == (
        f"Error: Consumer group '{missing}' does not exist.")
    assert one_line_error(groups(module_broker, "describe", "--group", missing,
                                 "--members")) == (
        f"Error: Consumer group '{missing}' does not exist.")
    assert one_line_error(groups(module_broker, "delete", "--group", missing)) == (
        f"Error: Consumer group '{missing}' could not be deleted: The group does not exist.")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--to-earliest", "--execute")) == (
        "Error: One of the reset scopes should be defined: --all-topics, --topic.")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--topic", topic, "--to-datetime", "yesterday",
                                 "--execute")).startswith(
        "Error: Invalid date and time 'yesterday'")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--topic", topic, "--by-duration", "1h",
                                 "--execute")).startswith("Error: Invalid duration '1h'")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--topic", f"{topic}:x", "--to-earliest", "--execute")
                          ).startswith(f"Error: Invalid --topic '{topic}:x'")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--topic", missing, "--to-earliest", "--execute")) == (
        f"Error: Topic '{missing}' does not exist")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", missing,
                                 "--topic", f"{topic}:3", "--to-earliest", "--execute")) == (
        f"Error: Partition {topic}-3 does not exist")
    assert one_line_error(groups(module_broker, "reset-offsets", "--group", uncommitted,
                                 "--topic", topic, "--shift-by", "1", "--execute")) == (
        f"Error: Cannot shift the offset of {topic}-0 for group '{uncommitted}': it has no "
        "committed offset")
    assert one_line_error(groups(module_broker, "list", "--state", "Sleeping")).startswith(
        "Error: Invalid state list 'Sleeping'. Valid states are: ")
    unreachable = one_line_error(moldau("groups", "list", "--bootstrap-server",
                                        f"127.0.0.1:{closed_port()}", "--timeout-ms", "1500"))
    assert "no broker" in unreachable
    assert ck_committed(module_broker.bootstrap, uncommitted) == {}
    assert missing not in ok(groups(module_broker, "list")).splitlines()

    # Command-line syntax errors are argparse's: usage and exit status 2.
    for args, complaint in [
        (["describe"], b"one of the arguments --group --all-groups is required"),
        (["delete"], b"one of the arguments --group --all-groups is required"),
        (["describe", "--group", "g", "--all-groups"], b"not allowed with argument"),
        (["reset-offsets", "--group", "g", "--topic", topic], b"--to-earliest"),
        (["reset-offsets", "--group", "g", "--topic", topic, "--to-earliest",
          "--to-latest"], b"argument --to-latest: not allowed with argument --to-earliest"),
        (["reset-offsets", "--group", "g", "--topic", topic, "--to-earliest", "--dry-run",
          "--execute"], b"argument --execute: not allowed with argument --dry-run"),
        (["reset-offsets", "--group", "g", "--topic", topic, "--all-topics",
          "--to-earliest"], b"argument --all-topics: not allowed with argument --topic"),
    ]:
        proc = groups(module_broker, *args)
        assert proc.returncode == 2 and complaint in proc.stderr, (args, proc.stderr)
        assert b"usage: moldau groups" in proc.stderr and not proc.stdout
