"""Apache Kafka itself, as a reference: its command-line tools and a real broker in KRaft mode.

The jars come from Maven Central through java/fetch-kafka.sh (`make kafka-deps`), into a cache
outside the repository: $MOLDAU_KAFKA_HOME, or ~/.cache/moldau/kafka-<version>. When the cache
is missing or stale, the first use here fills it, so `pytest` alone works on a fresh machine.

Tools run as `java -cp <cache>/lib/* <main class>`, one JVM per command, tuned to start fast.
`KafkaBroker` runs one combined broker+controller node on loopback with the settings Moldau
uses by default, so a test can run unchanged against either and compare what the tools print.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from e2e.support import moldau_cache_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
JAVA_DIR = REPO_ROOT / "java"
FETCH_SCRIPT = JAVA_DIR / "fetch-kafka.sh"
TOOLS_LOG_CONFIG = JAVA_DIR / "config" / "tools-log4j2.properties"
BROKER_LOG_CONFIG = JAVA_DIR / "config" / "broker-log4j2.properties"

# Moldau implements Kafka 4.0's protocol, so the reference cluster is formatted at the 4.0
# metadata version: newer feature levels change what tools print (4.1's eligible leader replicas
# add a cluster-wide min.insync.replicas, for one).
METADATA_VERSION = "4.0-IV3"

READY_MARKER = "Kafka Server started"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0

# Short-lived tool JVMs: C1 only and the serial collector start fastest on two cores.
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
                 "-Djava.awt.headless=true"]
BROKER_JVM_OPTS = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-Djava.awt.headless=true"]

# The main classes behind the scripts of a Kafka distribution's bin/ directory.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
}
DRIVER_MAIN = "io.moldau.oracle.ClientDriver"


def kafka_version() -> str:
    """The release pinned in java/pom.xml."""
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>",
                      (JAVA_DIR / "pom.xml").read_text())
    assert found, "java/pom.xml pins no <kafka.version>"
    return found.group(1)


def kafka_home() -> Path:
    """The artifact cache (the same rule as java/fetch-kafka.sh)."""
    return moldau_cache_dir(f"kafka-{kafka_version()}", "MOLDAU_KAFKA_HOME")


@functools.cache
def ensure_artifacts() -> Path:
    """Run the (idempotent) fetch script once per test run; it returns at once when the cache
    matches the pom and the driver sources."""
    proc = subprocess.run(["bash", str(FETCH_SCRIPT)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (
        f"{FETCH_SCRIPT} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    home = kafka_home()
    assert (home / "lib" / f"kafka_2.13-{kafka_version()}.jar").exists(), (
        f"no Kafka jars in {home}/lib after {FETCH_SCRIPT}")
    return home


def classpath() -> str:
    home = ensure_artifacts()
    return f"{home / 'classes'}:{home / 'lib'}/*"


def java_command(main: str, *args: str, jvm_opts: list[str] | None = None,
                 log_config: Path = TOOLS_LOG_CONFIG) -> list[str]:
    return ["java", *(TOOL_JVM_OPTS if jvm_opts is None else jvm_opts),
            f"-Dlog4j2.configurationFile={log_config}", "-cp", classpath(), main, *args]


@dataclass
class ToolResult:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed: float

    def describe(self) -> str:
        shown = " ".join(self.command[self.command.index("-cp") + 2:])
        return (f"`{shown}` exited {self.returncode} after {self.elapsed:.1f} s\n"
                f"--- stdout:\n{self.stdout[-4000:]}\n--- stderr:\n{self.stderr[-4000:]}")

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run_java(main: str, *args: str, stdin: str | None = None, timeout: float = 120,
             check: bool = True) -> ToolResult:
    """Run a main class to completion; with `check`, anything but exit 0 fails the test with
    the command's output."""
    command = java_command(main, *args)
    started = time.monotonic()
    proc = subprocess.run(command, input=stdin, capture_output=True, text=True,
                          timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL)
    result = ToolResult(command, proc.returncode, proc.stdout, proc.stderr,
                        time.monotonic() - started)
    if check:
        assert result.returncode == 0, result.describe()
    return result


def kafka_tool(tool: str, *args: str, **kwargs: object) -> ToolResult:
    """Run one of Kafka's command-line tools by its script name (`kafka-topics`, ...)."""
    return run_java(TOOLS[tool], *args, **kwargs)  # type: ignore[arg-type]


def write_properties(path: Path, settings: dict[str, object]) -> Path:
    """A Java properties file (a broker's server.properties, a tool's --command-config)."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def sasl_client_settings(mechanism: str, user: str, password: str) -> dict[str, object]:
    """A Java client's SASL settings: the mechanism and its JAAS login line."""
    return {"sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{SASL_LOGIN_MODULES[mechanism]} required '
                                f'username="{user}" password="{password}";'}


def add_scram_user(bootstrap: str, user: str, password: str, mechanism: str) -> str:
    """SCRAM credentials added with Kafka's kafka-configs (to Moldau or Kafka alike); the
    tool's one-line answer."""
    return kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter",
                      "--add-config", f"{mechanism}=[iterations=8192,password={password}]",
                      "--entity-type", "users", "--entity-name", user).stdout.strip()


def start_java(main: str, *args: str, stdout: Path, stderr: Path) -> subprocess.Popen:
    """A tool left running (a console consumer in a group, say); the caller stops it."""
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        return subprocess.Popen(java_command(main, *args), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True)


def random_cluster_id() -> str:
    """A cluster id as Kafka writes them: 16 random bytes, URL-safe base64, no padding, and
    (like Kafka's own generator) never starting with '-', which a command line would misread."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_RUNNING: list[KafkaBroker] = []


@atexit.register
def _kill_leftovers() -> None:
    for broker in list(_RUNNING):
        broker.kill()


class KafkaBroker:
    """One Apache Kafka node (broker and controller in one process) with its own ports and
    log directory under `workdir`."""

    def __init__(self, workdir: Path, overrides: dict[str, object] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "data"
        self.port = _free_port()
        self.controller_port = _free_port()
        self.cluster_id = random_cluster_id()
        self.properties = self.workdir / "server.properties"
        self.stdout_path = self.workdir / "stdout.log"
        self.stderr_path = self.workdir / "stderr.log"
        self.settings: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # A single node: every internal topic has one replica, as in Moldau.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.settings.update({k: str(v) for k, v in (overrides or {}).items()})
        self.proc: subprocess.Popen | None = None
        self.formatted = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def format(self) -> None:
        write_properties(self.properties, self.settings)
        run_java(TOOLS["kafka-storage"], "format", "--cluster-id", self.cluster_id,
                 "--config", str(self.properties), "--release-version", METADATA_VERSION,
                 timeout=120)
        self.formatted = True

    def start(self, timeout: float = START_TIMEOUT) -> KafkaBroker:
        assert not self.alive, "Kafka broker already running"
        if not self.formatted:
            self.format()
        command = java_command("kafka.Kafka", str(self.properties), jvm_opts=BROKER_JVM_OPTS,
                               log_config=BROKER_LOG_CONFIG)
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=self.workdir, start_new_session=True)
        _RUNNING.append(self)
        deadline = time.monotonic() + timeout
        while not self._started():
            if self.proc.poll() is not None:
                raise AssertionError(f"Kafka exited with {self.proc.returncode} before it was "
                                     f"ready\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"Kafka not ready within {timeout} s\n{self.tail()}")
            time.sleep(0.1)
        # The start-up line comes after the acceptors are open; confirm from outside anyway.
        with socket.create_connection(("127.0.0.1", self.port), timeout=5):
            pass
        return self

    def _started(self) -> bool:
        try:
            return READY_MARKER in self.stdout_path.read_text(errors="replace")
        except FileNotFoundError:
            return False

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), then SIGKILL if it hangs. The JVM runs
        Kafka's shutdown hook and then exits with 128 + SIGTERM, which is a clean stop."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"Kafka still running {timeout} s after SIGTERM\n"
                                     + self.tail()) from None
        if self in _RUNNING:
            _RUNNING.remove(self)
        code = self.proc.returncode
        assert code in (0, 128 + signal.SIGTERM), (
            f"Kafka exited with {code} after SIGTERM\n{self.tail()}")
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self in _RUNNING:
            _RUNNING.remove(self)

    def tail(self, lines: int = 60) -> str:
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            try:
                text = path.read_text(errors="replace").splitlines()
            except FileNotFoundError:
                continue
            parts.append(f"--- {path.name} of Kafka on port {self.port} (last {lines} lines):\n"
                         + "\n".join(text[-lines:]))
        return "\n".join(parts) or "(no output)"
