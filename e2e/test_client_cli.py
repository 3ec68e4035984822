"""`moldau topics`, `moldau produce` and `moldau perf produce` as subprocesses against a
real broker, including their error messages."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from e2e.conftest import moldau_executable
from e2e.support import (
    assert_codec,
    ck_consume_all,
    kp_offsets,
    stored_batches,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

NODE_ID = 3
BROKER_OVERRIDES = {"node.id": NODE_ID, "auto.create.topics.enable": "false"}


def moldau(*args: str, stdin: bytes | None = None, timeout: float = 60
           ) -> subprocess.CompletedProcess:
    return subprocess.run([moldau_executable(), *args], input=stdin, capture_output=True,
                          timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert not proc.stderr, proc.stderr
    return proc.stdout.decode()


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """A user error: exit status 1, nothing on stdout, one 'Error: ...' line on stderr."""
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_help_of_every_command():
    top = ok(moldau("--help"))
    for command in ("broker", "topics", "produce", "consume", "groups", "perf"):
        assert command in top
    for args, flags in [
        (["topics", "--help"], ["create", "list", "describe", "alter", "delete"]),
        (["topics", "create", "--help"], ["--bootstrap-server", "--topic", "--partitions",
                                          "--replication-factor", "--config"]),
        (["topics", "alter", "--help"], ["--partitions", "--config", "--delete-config"]),
        (["topics", "describe", "--help"], ["--topic", "--bootstrap-server"]),
        (["topics", "list", "--help"], ["--bootstrap-server"]),
        (["topics", "delete", "--help"], ["--topic"]),
        (["produce", "--help"], ["--property", "--compression-codec", "--producer-property",
                                 "parse.key", "key.separator"]),
        (["perf", "produce", "--help"], ["--num-records", "--record-size", "--throughput",
                                         "--producer-props"]),
    ]:
        text = ok(moldau(*args))
        for flag in flags:
            assert flag in text, (args, flag)


def test_topic_commands_end_to_end(module_broker):
    server = ["--bootstrap-server", module_broker.bootstrap]
    topic = unique("cli-topic")
    assert ok(moldau("topics", "create", *server, "--topic", topic, "--partitions", "3",
                     "--replication-factor", "1", "--config", "retention.ms=86400000",
                     "--config", "max.message.bytes=2000000")) == f"Created topic {topic}.\n"
    assert topic in ok(moldau("topics", "list", *server)).splitlines()

    lines = ok(moldau("topics", "describe", *server, "--topic", topic)).splitlines()
    summary = re.fullmatch(
        rf"Topic: {topic}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 3\t"
        r"ReplicationFactor: 1\tConfigs: (.*)", lines[0])
    assert summary, lines[0]
    assert summary.group(1) == "max.message.bytes=2000000,retention.ms=86400000"
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: {NODE_ID}\t"
                         f"Replicas: {NODE_ID}\tIsr: {NODE_ID}\tElr: \tLastKnownElr: "
                         for p in range(3)]

    ok(moldau("topics", "alter", *server, "--topic", topic, "--partitions", "5",
              "--config", "cleanup.policy=compact", "--delete-config", "retention.ms"))
    lines = ok(moldau("topics", "describe", *server, "--topic", topic)).splitlines()
    assert "PartitionCount: 5" in lines[0]
    assert lines[0].endswith("Configs: cleanup.policy=compact,max.message.bytes=2000000")
    assert len(lines) == 6

    assert ok(moldau("topics", "delete", *server, "--topic", topic)) == \
        f"Deleted topic {topic}.\n"
    assert topic not in ok(moldau("topics", "list", *server)).splitlines()
    ok(moldau("topics", "delete", *server, "--topic", topic, "--if-exists"))


def test_produce_lines_with_keys_headers_and_compression(module_broker):
    server = ["--bootstrap-server", module_broker.bootstrap]
    topic = unique("cli-produce")
    ok(moldau("topics", "create", *server, "--topic", topic, "--partitions", "1"))
    lines = b"".join(b"h1:a,h2:b\tkey-%d:value %d\n" % (i, i) for i in range(50))
    lines += b"\tNULL:tombstone-key-is-null\n"
    lines += b"h3:NULL\tk:NULL\r\n"
    ok(moldau("produce", *server, "--topic", topic, "--compression-codec", "zstd",
              "--property", "parse.key=true", "--property", "key.separator=:",
              "--property", "parse.headers=true", "--property", "null.marker=NULL",
              "--producer-property", "linger.ms=50", stdin=lines))
    records = ck_consume_all(module_broker.bootstrap, topic)
    assert [(r.key, r.value, r.headers) for r in records[:2]] == [
        (b"key-0", b"value 0", (("h1", b"a"), ("h2", b"b"))),
        (b"key-1", b"value 1", (("h1", b"a"), ("h2", b"b")))]
    assert (records[50].key, records[50].value, records[50].headers) == (
        None, b"tombstone-key-is-null", ())
    assert (records[51].key, records[51].value, records[51].headers) == (
        b"k", None, (("h3", None),))
    assert len(records) == 52
    assert_codec(stored_batches(module_broker.bootstrap, topic), "zstd")

    # Plain lines: the whole line is the value; --compression-codec alone means gzip.
    ok(moldau("produce", *server, "--topic", topic, "--compression-codec",
              stdin=b"plain one\nplain two\n"))
    records = ck_consume_all(module_broker.bootstrap, topic)
    assert [(r.key, r.value) for r in records[52:]] == [(None, b"plain one"),
                                                        (None, b"plain two")]


def test_perf_produce_reports_throughput_and_latency(module_broker):
    topic = unique("cli-perf")
    ok(moldau("topics", "create", "--bootstrap-server", module_broker.bootstrap,
              "--topic", topic, "--partitions", "2"))
    out = ok(moldau("perf", "produce", "--topic", topic, "--num-records", "3000",
                    "--record-size", "100", "--throughput", "-1", "--producer-props",
                    f"bootstrap.servers={module_broker.bootstrap}", "acks=1",
                    "linger.ms=2"))
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(
        r"3000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.",
        last), last
    assert sum(kp_offsets(module_broker.bootstrap, topic, p)[1] for p in range(2)) == 3000
    # A throttled run keeps to its rate and prints a progress line per interval.
    out = ok(moldau("perf", "produce", "--topic", topic, "--num-records", "300",
                    "--record-size", "10", "--throughput", "200", "--reporting-interval",
                    "500", "--bootstrap-server", module_broker.bootstrap))
    lines = out.strip().splitlines()
    assert len(lines) >= 2
    assert re.fullmatch(r"\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms "
                        r"avg latency, [\d.]+ ms max latency\.", lines[0]), lines[0]
    rate = float(re.search(r"sent, ([\d.]+) records/sec", lines[-1]).group(1))
    assert rate < 260, lines[-1]


# Each command that needs a cluster, with its own bound set low, and what its error says.
UNREACHABLE = {
    "topics": (["topics", "list", "--timeout-ms", "1500"], "no broker"),
    "groups": (["groups", "list", "--timeout-ms", "1500"], "no broker"),
    "produce": (["produce", "--topic", "t", "--max-block-ms", "1500"],
                "not present in metadata after 1500 ms"),
    "consume": (["consume", "--topic", "t", "--timeout-ms", "1500"],
                "Timeout expired while fetching topic metadata"),
    "consume-api-timeout": (["consume", "--topic", "t", "--consumer-property",
                             "default.api.timeout.ms=1500"],
                            "Timeout expired while fetching topic metadata"),
    "perf-produce": (["perf", "produce", "--topic", "t", "--num-records", "5",
                      "--record-size", "10", "--throughput", "-1", "--producer-props",
                      "max.block.ms=1500"], "not present in metadata after 1500 ms"),
    "perf-consume": (["perf", "consume", "--topic", "t", "--messages", "5", "--timeout",
                      "1500"], "Timeout expired while fetching topic metadata"),
}


@pytest.mark.parametrize("command", sorted(UNREACHABLE))
def test_unreachable_cluster_is_one_line_error_within_the_bound(command):
    """A closed port: the command gives up after its timeout with one line naming the
    address it could not reach, instead of waiting forever."""
    args, expected = UNREACHABLE[command]
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    line = one_line_error(moldau(*args, "--bootstrap-server", address, stdin=b"x\n"))
    elapsed = time.monotonic() - started
    assert expected in line and address in line, line
    assert elapsed < 30, f"{command} took {elapsed:.1f} s"


def test_user_errors_are_one_line(module_broker, tmp_path):
    server = ["--bootstrap-server", module_broker.bootstrap]
    missing = unique("cli-missing")

    unreachable = one_line_error(moldau("topics", "list", "--bootstrap-server",
                                        f"127.0.0.1:{closed_port()}", "--timeout-ms", "1500"))
    assert "no broker" in unreachable and ("refused" in unreachable or "failed" in unreachable)

    assert "does not exist" in one_line_error(
        moldau("topics", "describe", *server, "--topic", missing))
    assert "does not exist" in one_line_error(
        moldau("topics", "delete", *server, "--topic", missing))

    topic = unique("cli-errors")
    ok(moldau("topics", "create", *server, "--topic", topic))
    assert "already exists" in one_line_error(moldau("topics", "create", *server,
                                                     "--topic", topic))
    ok(moldau("topics", "create", *server, "--topic", topic, "--if-not-exists"))
    assert "no.such.setting" in one_line_error(moldau(
        "topics", "create", *server, "--topic", unique("t"), "--config", "no.such.setting=1"))
    assert "KEY=VALUE" in one_line_error(moldau(
        "topics", "create", *server, "--topic", unique("t"), "--config", "oops"))
    assert "partition" in one_line_error(moldau(
        "topics", "alter", *server, "--topic", topic, "--partitions", "0")).lower()

    assert "not present in metadata" in one_line_error(moldau(
        "produce", *server, "--topic", missing, "--max-block-ms", "800", stdin=b"x\n"))
    assert "No key separator found on line number 2" in one_line_error(moldau(
        "produce", *server, "--topic", topic, "--property", "parse.key=true",
        stdin=b"k\tv\nno separator\n"))
    assert "lingr.ms" in one_line_error(moldau(
        "produce", *server, "--topic", topic, "--producer-property", "lingr.ms=5",
        stdin=b"x\n"))
    broken = tmp_path / "admin.properties"
    broken.write_bytes(b"# \xff\nclient.id=a\\u00zz\n")
    assert f"{broken}:2: Malformed \\uxxxx encoding" in one_line_error(moldau(
        "topics", "list", *server, "--command-config", str(broken)))
    assert f"Cannot read {tmp_path}: Is a directory" in one_line_error(moldau(
        "topics", "list", *server, "--command-config", str(tmp_path)))
    assert "bootstrap" in one_line_error(moldau(
        "perf", "produce", "--topic", topic, "--num-records", "1", "--record-size", "1",
        "--throughput", "-1"))
    # Command-line syntax errors are argparse's: usage and exit status 2.
    proc = moldau("topics", "create", *server)
    assert proc.returncode == 2 and b"--topic" in proc.stderr


def _start_producer(bootstrap: str, topic: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([moldau_executable(), "produce", "--bootstrap-server", bootstrap,
                             "--topic", topic, *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class LineFeeder(threading.Thread):
    """Writes numbered lines into the producer's standard input until it stops reading."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.written = 0
        self.start()

    def run(self) -> None:
        try:
            while True:
                self.proc.stdin.write(b"".join(
                    b"line %d\n" % i for i in range(self.written, self.written + 500)))
                self.proc.stdin.flush()
                self.written += 500
        except (BrokenPipeError, ValueError, OSError):
            pass


def _interrupted_output(proc: subprocess.Popen, timeout: float = 60) -> list[str]:
    proc.wait(timeout)
    err = proc.stderr.read().decode()
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "Error when sending" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) <= 1, f"{len(lines)} lines on stderr: {err[-2000:]}"
    return lines


def test_ctrl_c_delivers_what_was_sent_and_exits_quietly(module_broker):
    topic = unique("cli-sigint")
    ok(moldau("topics", "create", "--bootstrap-server", module_broker.bootstrap,
              "--topic", topic, "--partitions", "1"))
    proc = _start_producer(module_broker.bootstrap, topic)
    feeder = LineFeeder(proc)
    wait_until(lambda: kp_offsets(module_broker.bootstrap, topic)[1] >= 2000, 60,
               "records from the running producer")
    proc.send_signal(signal.SIGINT)  # records are in flight: the feeder never stops
    assert _interrupted_output(proc) == []
    feeder.join(10)
    values = [r.value for r in ck_consume_all(module_broker.bootstrap, topic)]
    assert len(values) >= 2000
    assert values == [b"line %d" % i for i in range(len(values))], "lost or reordered"


def test_second_ctrl_c_aborts_at_once(module_broker):
    """Records the broker cannot acknowledge (min.insync.replicas above the replicas)
    keep the first Ctrl-C's flush waiting; the second gives up with one summary line."""
    topic = unique("cli-sigint2")
    ok(moldau("topics", "create", "--bootstrap-server", module_broker.bootstrap,
              "--topic", topic, "--partitions", "1", "--config", "min.insync.replicas=2"))
    proc = _start_producer(module_broker.bootstrap, topic, "--request-required-acks", "all")
    feeder = LineFeeder(proc)
    # Far more than a pipe holds: the producer has read (and sent) thousands of lines.
    wait_until(lambda: feeder.written >= 30000, 60, "the producer reading lines")
    proc.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(3)  # still flushing: nothing can be acknowledged
    proc.send_signal(signal.SIGINT)
    lines = _interrupted_output(proc, timeout=30)
    assert len(lines) == 1 and re.fullmatch(
        r"Interrupted: \d+ records were not delivered\.", lines[0]), lines
    feeder.join(10)
