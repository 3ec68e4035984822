"""`moldau consume` and `moldau perf consume` as subprocesses against a real broker: the exact
lines they print, where they start, what they commit, and how they stop."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from e2e.conftest import moldau_executable
from e2e.support import unique
from e2e.test_client_cli import moldau, ok, one_line_error
from moldau.client import Admin, Producer

pytestmark = pytest.mark.timeout(120)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}

T0 = 1_700_000_000_000
MB = 1024 * 1024
PERF_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
               "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"


@pytest.fixture(scope="module")
def admin(module_broker):
    client = Admin({"bootstrap.servers": module_broker.bootstrap,
                    "default.api.timeout.ms": 20000})
    yield client
    client.close()


@pytest.fixture
def server(module_broker) -> list[str]:
    return ["--bootstrap-server", module_broker.bootstrap]


def topic_with(admin: Admin, bootstrap: str, records: list[tuple], partitions: int = 1,
               prefix: str = "cli-consume", configs: dict[str, str] | None = None,
               name: str | None = None) -> str:
    """A new topic holding `records`: (partition, key, value, headers, timestamp) tuples."""
    topic = name or unique(prefix)
    admin.create_topic(topic, partitions, configs=configs)
    produce(bootstrap, topic, records)
    return topic


def produce(bootstrap: str, topic: str, records: list[tuple]) -> list:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as producer:
        futures = [producer.send(topic, value, key=key, headers=headers, partition=p,
                                 timestamp_ms=ts) for p, key, value, headers, ts in records]
        producer.flush(30)
        return [f.get(10) for f in futures]


def values(count: int, partition: int = 0, prefix: str = "v") -> list[tuple]:
    return [(partition, None, f"{prefix}{i}".encode(), None, None) for i in range(count)]


def consume(*args: str, timeout: float = 60) -> tuple[str, str]:
    """Run `moldau consume`; it must exit with status 0 and print only its total on
    stderr. Returns stdout and that count."""
    proc = moldau("consume", *args, timeout=timeout)
    err = proc.stderr.decode()
    assert proc.returncode == 0, (proc.returncode, proc.stdout, err)
    total = re.fullmatch(r"Processed a total of (\d+) messages\n", err)
    assert total, err
    return proc.stdout.decode(), int(total.group(1))


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([moldau_executable(), "consume", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def committed(admin: Admin, group: str) -> dict[int, int]:
    return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()}


def test_help():
    text = ok(moldau("consume", "--help"))
    for flag in ("--bootstrap-server", "--topic", "--include", "--partition", "--offset",
                 "--group", "--from-beginning", "--max-messages", "--timeout-ms",
                 "--isolation-level", "--consumer-property", "--consumer.config",
                 "--skip-message-on-error", "print.timestamp", "null.literal", "example:"):
        assert flag in text, flag
    text = ok(moldau("perf", "consume", "--help"))
    for flag in ("--bootstrap-server", "--topic", "--messages", "--group", "--fetch-size",
                 "--timeout", "--reporting-interval", "--show-detailed-stats",
                 "--hide-header", "--consumer.config", "--command-property",
                 "--consumer-props", "--from-latest", "example:"):
        assert flag in text, flag


def test_values_from_the_beginning(admin, module_broker, server):
    topic = topic_with(admin, module_broker.bootstrap, values(6))
    out, total = consume(*server, "--topic", topic, "--from-beginning", "--max-messages", "4")
    assert (out, total) == ("v0\nv1\nv2\nv3\n", 4)
    # Without --from-beginning a new group starts at the end: nothing until new records.
    out, total = consume(*server, "--topic", topic, "--timeout-ms", "1000")
    assert (out, total) == ("", 0)


def test_every_print_property(admin, module_broker, server):
    records = [
        (0, b"k0", b"v0", [("h1", b"a"), ("h2", b"b")], T0),
        (0, None, b"v1", None, T0 + 1),
        (0, b"k2", None, [("h", None)], T0 + 2),
        (0, "café".encode(), b"\xff\xfebad", None, T0 + 3),
    ]
    topic = topic_with(admin, module_broker.bootstrap, records)
    props = ["print.timestamp=true", "print.partition=true", "print.offset=true",
             "print.headers=true", "print.key=true", "key.separator= | ",
             "line.separator=;\n", "headers.separator=&", "headers.key.separator==",
             "null.literal=<null>"]
    out, total = consume(*server, "--topic", topic, "--from-beginning", "--max-messages", "4",
                         *[arg for prop in props for arg in ("--property", prop)])
    assert total == 4
    assert out == (f"CreateTime:{T0} | Partition:0 | Offset:0 | h1=a&h2=b | k0 | v0;\n"
                   f"CreateTime:{T0 + 1} | Partition:0 | Offset:1 | NO_HEADERS | <null> | v1;\n"
                   f"CreateTime:{T0 + 2} | Partition:0 | Offset:2 | h=<null> | k2 | <null>;\n"
                   f"CreateTime:{T0 + 3} | Partition:0 | Offset:3 | NO_HEADERS | café | "
                   f"\ufffd\ufffdbad;\n")
    # Keys only, with the default separators and null literal; True/TRUE count as true.
    out, _ = consume(*server, "--topic", topic, "--from-beginning", "--max-messages", "4",
                     "--property", "print.key=TRUE", "--property", "print.value=false")
    assert out == "k0\nnull\nk2\ncafé\n"
    out, _ = consume(*server, "--topic", topic, "--from-beginning", "--max-messages", "2",
                     "--property", "print.offset=true", "--property", "print.key=true")
    assert out == "Offset:0\tk0\tv0\nOffset:1\tnull\tv1\n"

    appended = unique("cli-consume-lat")
    admin.create_topic(appended, 1, configs={"message.timestamp.type": "LogAppendTime"})
    [meta] = produce(module_broker.bootstrap, appended, [(0, None, b"x", None, T0)])
    assert meta.timestamp != T0
    out, _ = consume(*server, "--topic", appended, "--from-beginning", "--max-messages", "1",
                     "--property", "print.timestamp=true")
    assert out == f"LogAppendTime:{meta.timestamp}\tx\n"

    assert "print.keys" in one_line_error(moldau(
        "consume", *server, "--topic", topic, "--property", "print.keys=true"))


def test_one_partition_from_an_offset(admin, module_broker, server):
    topic = topic_with(admin, module_broker.bootstrap,
                       values(3, 0, "a") + values(6, 1, "b"), partitions=2)
    out, total = consume(*server, "--topic", topic, "--partition", "1", "--offset", "3",
                         "--timeout-ms", "1000")
    assert (out, total) == ("b3\nb4\nb5\n", 3)
    out, _ = consume(*server, "--topic", topic, "--partition", "0", "--offset", "earliest",
                     "--max-messages", "2")
    assert out == "a0\na1\n"
    out, _ = consume(*server, "--topic", topic, "--partition", "0", "--from-beginning",
                     "--max-messages", "3", "--property", "print.partition=true")
    assert out == "Partition:0\ta0\nPartition:0\ta1\nPartition:0\ta2\n"
    out, _ = consume(*server, "--topic", topic, "--partition", "1", "--timeout-ms", "800")
    assert out == ""  # latest by default

    for args, message in [
        (["--offset", "3"], "The partition is required when offset is specified."),
        (["--partition", "0", "--group", "g"],
         "Options group and partition cannot be specified together."),
        (["--partition", "0", "--offset", "-2"], "The provided offset value '-2'"),
        (["--partition", "0", "--offset", "soon"], "The provided offset value 'soon'"),
        (["--partition", "0", "--offset", "1", "--from-beginning"],
         "Options from-beginning and offset cannot be specified together."),
        (["--from-beginning", "--consumer-property", "auto.offset.reset=latest"],
         "--from-beginning"),
        (["--group", "a", "--consumer-property", "group.id=b"], "do not match: a, b"),
        (["--consumer-property", "fetch.max.wait=5"], "fetch.max.wait"),
    ]:
        assert message in one_line_error(moldau("consume", *server, "--topic", topic, *args))
    assert "The topic is required" in one_line_error(moldau(
        "consume", *server, "--include", topic, "--partition", "0"))
    proc = moldau("consume", *server, "--topic", topic, "--include", "x")
    assert proc.returncode == 2 and b"not allowed with" in proc.stderr


def test_group_commits_what_it_printed(admin, module_broker, server, tmp_path):
    topic = topic_with(admin, module_broker.bootstrap,
                       values(5, 0, "a") + values(5, 1, "b"), partitions=2)
    group = unique("cli-consume-group")
    args = [*server, "--topic", topic, "--group", group, "--from-beginning"]
    first, total = consume(*args, "--max-messages", "4")
    assert total == 4
    assert sum(committed(admin, group).values()) == 4
    second, total = consume(*args, "--max-messages", "4")
    assert total == 4
    assert sum(committed(admin, group).values()) == 8
    # The group may come from a properties file too.
    config = tmp_path / "consumer.properties"
    config.write_text(f"# the same group\ngroup.id={group}\nfetch.max.wait.ms=100\n")
    third, total = consume(*server, "--topic", topic, "--consumer.config", str(config),
                           "--timeout-ms", "1000")
    assert total == 2
    assert committed(admin, group) == {0: 5, 1: 5}
    lines = (first + second + third).splitlines()
    assert sorted(lines) == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    # Each partition in order.
    assert [x for x in lines if x[0] == "a"] == [f"a{i}" for i in range(5)]
    # Kafka's default group of its own commits nothing.
    before = {g.group_id for g in admin.list_groups()}
    consume(*server, "--topic", topic, "--from-beginning", "--max-messages", "1")
    new = {g.group_id for g in admin.list_groups()} - before
    assert all(re.fullmatch(r"console-consumer-\d{5}", g) for g in new), new
    assert all(committed(admin, g) == {} for g in new)


def test_include_pattern_over_two_topics(admin, module_broker, server):
    prefix = unique("cli-include")
    for suffix in ("a", "b", "other"):
        topic_with(admin, module_broker.bootstrap, values(2, 0, f"{suffix}-"),
                   name=f"{prefix}-{suffix}")
    out, total = consume(*server, "--include", f"{prefix}-(a|b)", "--from-beginning",
                         "--timeout-ms", "2500")
    assert total == 4
    assert sorted(out.splitlines()) == ["a-0", "a-1", "b-0", "b-1"]


def test_timeout_when_idle(admin, module_broker, server):
    topic = topic_with(admin, module_broker.bootstrap, values(3))
    began = time.monotonic()
    out, total = consume(*server, "--topic", topic, "--from-beginning", "--timeout-ms", "700",
                         "--isolation-level", "read_committed")
    assert (out, total) == ("v0\nv1\nv2\n", 3)
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(admin, module_broker, server, sig):
    topic = topic_with(admin, module_broker.bootstrap, values(5))
    group = unique("cli-consume-signal")
    proc = start(*server, "--topic", topic, "--group", group, "--from-beginning")
    try:
        lines = [proc.stdout.readline() for _ in range(5)]
        assert lines == [f"v{i}\n".encode() for i in range(5)]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert (out, err) == (b"", b"Processed a total of 5 messages\n")
    assert committed(admin, group) == {0: 5}


def test_closed_standard_output_is_quiet(admin, module_broker, server):
    payload = b"x" * 200
    topic = topic_with(admin, module_broker.bootstrap,
                       [(0, None, payload, None, None)] * 2000)  # 400 KB > a pipe's buffer
    proc = start(*server, "--topic", topic, "--from-beginning", "--max-messages", "2000")
    try:
        assert proc.stdout.readline() == payload + b"\n"
        proc.stdout.close()  # as `| head -1` does
        err = proc.stderr.read().decode()
        proc.wait(30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    total = re.fullmatch(r"Processed a total of (\d+) messages\n", err)
    assert total, err
    assert int(total.group(1)) < 2000  # it did stop at the closed pipe


def test_perf_consume(admin, module_broker, server):
    topic = topic_with(admin, module_broker.bootstrap,
                       [(i % 2, b"key", b"v" * 97, None, None) for i in range(1000)],
                       partitions=2)
    proc = moldau("perf", "consume", *server, "--topic", topic, "--messages", "600",
                  "--reporting-interval", "100", "--consumer-props", "max.poll.records=100")
    header, line = ok(proc).splitlines()
    assert header == PERF_HEADER
    fields = line.split(", ")
    assert len(fields) == 10, line
    assert re.fullmatch(DATE, fields[0]) and re.fullmatch(DATE, fields[1]), line
    assert fields[0] <= fields[1]
    assert fields[2] == f"{600 * 100 / MB:.4f}"
    assert int(fields[4]) == 600
    assert all(float(fields[i]) >= 0 for i in (3, 5, 8, 9)), line
    assert int(fields[6]) >= 0 and int(fields[7]) >= 0

    # Detailed statistics: their own header and only interval lines.
    out = ok(moldau("perf", "consume", *server, "--topic", topic, "--messages", "1000",
                    "--show-detailed-stats", "--reporting-interval", "1",
                    "--command-property", "max.poll.records=50"))
    header, *lines = out.splitlines()
    assert header.startswith("time, threadId, data.consumed.in.MB")
    assert lines
    for line in lines:
        assert re.fullmatch(DATE + r", 0, [\d.]+, [\d.]+, \d+, [\d.]+, \d+, -?\d+, [\d.]+, "
                                   r"[\d.]+", line), line

    # Fewer records than asked for: the totals so far, an error and status 1.
    proc = moldau("perf", "consume", *server, "--topic", topic, "--messages", "1500",
                  "--timeout", "1000", "--hide-header")
    assert proc.returncode == 1, proc
    [line] = proc.stdout.decode().splitlines()
    assert line.split(", ")[4] == "1000"
    err = proc.stderr.decode()
    assert err.startswith("Error: ") and "timeout (1000 ms) exceeded" in err, err
