"""Fixtures that run real Moldau broker processes on loopback ports.

`Broker` starts `moldau broker` with a fresh log directory, waits for its ready line and keeps
its stderr in a file; when a test fails, the tail of that file is attached to the report.
Every process started here is stopped or killed before the test run ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.prometheus import Prometheus
from e2e.support import WorkerPool, forget_clients, free_port
from moldau.cluster.launcher import LocalCluster, free_base_port

READY_MARKER = "moldau broker ready"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0
TAIL_LINES = 80


def moldau_executable() -> str:
    """The `moldau` script of the environment running the tests (or $MOLDAU_BIN)."""
    explicit = os.environ.get("MOLDAU_BIN")
    if explicit:
        return explicit
    beside = Path(sys.executable).with_name("moldau")
    if beside.exists():
        return str(beside)
    found = shutil.which("moldau")
    assert found, "the moldau command is not installed (make install)"
    return found


# Every broker ever started in this test run, so none can outlive it.
_ALL: list[Broker] = []
# Brokers whose stderr is attached to the report of a failing test.
_ACTIVE: list[Broker] = []


class BrokerStartError(AssertionError):
    pass


class Broker:
    """One `moldau broker` process with its own port and log directory."""

    def __init__(self, workdir: Path, overrides: dict[str, object] | None = None,
                 port: int | None = None, config_file: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "data"
        self.port = port or free_port()
        # Each broker its own http port: many brokers share this machine.
        self.http_port = free_port()
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                          "log.dirs": str(self.log_dir),
                          "http.listener": f"http://127.0.0.1:{self.http_port}"}
        self.overrides.update({k: str(v) for k, v in (overrides or {}).items()})
        self.config_file = config_file
        self.stderr_path = self.workdir / "stderr.log"
        self.stdout_path = self.workdir / "stdout.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.ready_line = ""
        _ALL.append(self)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [moldau_executable(), "broker"]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> Broker:
        assert not self.alive, "broker already running"
        self.starts += 1
        with open(self.stderr_path, "ab") as err:
            err.write(f"----- start #{self.starts}: {' '.join(self.command())}\n".encode())
        stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=stderr,
                                         cwd=self.workdir, start_new_session=True)
        finally:
            stderr.close()
        ready = threading.Event()
        threading.Thread(target=self._pump_stdout, args=(self.proc, ready), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with {self.proc.returncode} before it was ready\n"
                    + self.tail())
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(f"no '{READY_MARKER}' line within {timeout} s\n"
                                       + self.tail())
        return self

    def run_to_exit(self, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run the broker in the foreground, for a start-up expected to fail."""
        return subprocess.run(self.command(), capture_output=True, timeout=timeout,
                              cwd=self.workdir, stdin=subprocess.DEVNULL)

    def _pump_stdout(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        with open(self.stdout_path, "ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if READY_MARKER.encode() in line and not ready.is_set():
                    self.ready_line = line.decode(errors="replace").strip()
                    ready.set()

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, wait, and require exit code 0 (a clean shutdown)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"broker still running {timeout} s after SIGTERM\n"
                                     + self.tail()) from None
        code = self.proc.returncode
        assert code == 0, f"broker exited with {code} after SIGTERM (want 0)\n" + self.tail()
        # An unexpected exception anywhere in the broker is a bug, even if it kept serving.
        log_text = self.stderr_path.read_text(errors="replace")
        assert "Traceback" not in log_text, "the broker logged a traceback\n" + self.tail(200)
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed by the broker itself."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(10)

    def restart(self, timeout: float = START_TIMEOUT) -> Broker:
        """Start again on the same port with the same directories (after stop() or kill())."""
        if self.alive:
            self.stop()
        return self.start(timeout)

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail(self, lines: int = TAIL_LINES) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no stderr)"
        return f"--- stderr of broker on port {self.port} (last {lines} lines):\n" + "\n".join(
            text[-lines:])

    def close(self) -> None:
        """Fixture teardown: a running broker must still shut down cleanly."""
        try:
            if self.alive:
                self.stop()
        finally:
            self.kill()
            forget_clients(self.bootstrap)
            if self in _ACTIVE:
                _ACTIVE.remove(self)


def _new_broker(workdir: Path, overrides: dict[str, object] | None = None,
                start: bool = True, **kwargs: object) -> Broker:
    broker = Broker(workdir, overrides, **kwargs)
    _ACTIVE.append(broker)
    if start:
        broker.start()
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A fresh broker with default settings for one test."""
    instance = _new_broker(tmp_path / "broker")
    yield instance
    instance.close()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    """make(overrides, start=True, **kwargs) -> Broker, each with its own directory."""
    made: list[Broker] = []

    def make(overrides: dict[str, object] | None = None, start: bool = True,
             **kwargs: object) -> Broker:
        instance = Broker(tmp_path / f"broker{len(made)}", overrides, **kwargs)
        made.append(instance)
        _ACTIVE.append(instance)
        if start:
            instance.start()
        return instance

    yield make
    errors = []
    for instance in made:
        try:
            instance.close()
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="module")
def module_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[Broker]:
    """One broker shared by the tests of a module; a module sets BROKER_OVERRIDES to tune it."""
    overrides = getattr(request.module, "BROKER_OVERRIDES", {})
    instance = _new_broker(tmp_path_factory.mktemp("module-broker"), overrides)
    yield instance
    instance.close()


# Failure detection and elections in seconds rather than Kafka's defaults, so that the
# three-node tests see a dead broker fenced and a new leader elected quickly.
FAST_FAILOVER = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 4000,
    "controller.quorum.election.timeout.ms": 500,
    "controller.quorum.fetch.timeout.ms": 1000,
    "group.initial.rebalance.delay.ms": 0,
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three broker+controller processes with FAST_FAILOVER settings (a module may define
    its own `cluster` instead)."""
    local = LocalCluster(tmp_path / "cluster", brokers=3, base_port=free_base_port(3),
                         overrides=FAST_FAILOVER)
    local.start(timeout=60)
    try:
        yield local
    finally:
        local.stop(timeout=30)


@pytest.fixture
def group_workers(tmp_path: Path) -> Iterator[WorkerPool]:
    """start(client, bootstrap, group, topics, **spec) -> a consumer process (support.py);
    every process still running at the end of the test is killed."""
    pool = WorkerPool(tmp_path / "workers")
    yield pool
    pool.shutdown()


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator:
    """make(targets, rule_files=None, **labelling) -> a started e2e.prometheus.Prometheus
    scraping the host:port `targets` as job `moldau` (`labelling`: its target_labels and
    relabel_configs); each is stopped and its files removed afterwards, whether the test
    passed or not."""
    made: list[Prometheus] = []

    def make(targets: list[str], rule_files: list[Path] | None = None,
             **labelling: Any) -> Prometheus:
        instance = Prometheus(tmp_path / f"prometheus{len(made)}", targets, rule_files,
                              **labelling)
        made.append(instance)
        return instance.start()

    yield make
    for instance in made:
        instance.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    # Declared here, not in e2e/chaos/, because pytest reads options only from the conftest
    # files it loads at start-up.
    parser.addoption("--chaos-seed", type=int, action="append", default=None,
                     help="run the fault-injection schedule of this seed (repeatable): "
                          "replays a failing schedule of e2e/chaos")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for instance in list(_ACTIVE):
            report.sections.append((f"moldau broker :{instance.port}", instance.tail()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for instance in _ALL:
        instance.kill()
