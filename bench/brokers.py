"""The two brokers under test, behind one small interface, started with equivalent settings.

Both get: one node on 127.0.0.1, a log directory under the same bench directory (same disk),
Kafka's default flush policy (no forced fsync: the page cache and the OS write-back decide),
one partition for auto-created topics, group.initial.rebalance.delay.ms=0, and a 1 MiB socket
send buffer (Kafka's 100 KiB default throttles a hot fetch over loopback for both brokers).
Replication factor 1 follows from having one node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import procs
from e2e import kafka_dist

COMMON_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "socket.send.buffer.bytes": "1048576",
}
START_TIMEOUT = 120.0


class BenchBroker:
    """What the workloads need from a broker: start (timed), stop, kill -9, pid, log dir."""

    name = ""
    port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        raise NotImplementedError

    @property
    def log_dir(self) -> Path:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def start(self) -> float:
        """Start and return seconds from process start to the first answered ApiVersions."""
        raise NotImplementedError

    def stop(self) -> float:
        """SIGTERM, wait (SIGKILL after a minute); seconds until the process was gone."""
        raise NotImplementedError

    def kill9(self) -> None:
        raise NotImplementedError

    def describe_exit(self) -> str:
        raise NotImplementedError

    def add_listeners(self, protocols: list[str], settings: dict[str, str]) -> dict[str, int]:
        """Listeners named after their security protocol (SSL, SASL_SSL) next to PLAINTEXT,
        each on a port of its own, and the settings they need; before the first start.
        Returns the port of each."""
        ports = {protocol: procs.free_port() for protocol in protocols}
        self._configure(ports, settings)
        return ports

    def _configure(self, ports: dict[str, int], settings: dict[str, str]) -> None:
        raise NotImplementedError


def listener_list(ports: dict[str, int]) -> str:
    return ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())


class MoldauBroker(BenchBroker):
    name = "Moldau"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data = workdir / "data"
        self.port = procs.free_port()
        # Served as in production, on a port of its own so concurrent runs do not collide.
        self.http_port = procs.free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.listeners = {"PLAINTEXT": self.port}
        self.extra_settings: dict[str, str] = {}

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _configure(self, ports: dict[str, int], settings: dict[str, str]) -> None:
        self.listeners.update(ports)
        self.extra_settings.update(settings)

    @property
    def log_dir(self) -> Path:
        return self.data

    def command(self) -> list[str]:
        moldau = str(Path(sys.executable).with_name("moldau"))
        settings = {"listeners": listener_list(self.listeners),
                    "log.dirs": str(self.data),
                    "http.listener": f"http://127.0.0.1:{self.http_port}", **COMMON_SETTINGS,
                    **self.extra_settings}
        command = [moldau, "broker"]
        for key, value in settings.items():
            command += ["--override", f"{key}={value}"]
        return command

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> float:
        assert not self.alive()
        self.starts += 1
        log = open(self.workdir / f"broker-{self.starts}.log", "wb")  # noqa: SIM115

        def launch() -> None:
            self.proc = procs.spawn(self.command(), stdout=log, stderr=subprocess.STDOUT)

        try:
            return procs.time_to_api_versions(self.port, launch, START_TIMEOUT, self.alive)
        except BaseException as exc:
            if self.proc is not None:
                procs.kill(self.proc)
            if not isinstance(exc, Exception):
                raise  # Ctrl-C stays Ctrl-C
            raise RuntimeError(f"Moldau did not start: {self.describe_exit()}") from None
        finally:
            log.close()

    def stop(self) -> float:
        started = time.monotonic()
        if self.proc is None:
            return 0.0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                procs.kill(self.proc)
                raise RuntimeError("still running 60 s after SIGTERM; killed") from None
            finally:
                procs.forget(self.proc)
        return time.monotonic() - started

    def kill9(self) -> None:
        if self.proc is not None:
            procs.kill(self.proc)

    def describe_exit(self) -> str:
        code = None if self.proc is None else self.proc.poll()
        log = self.workdir / f"broker-{self.starts}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return f"exit code {code}; log tail: {procs.tail(text, 400)}"


class KafkaBroker(BenchBroker):
    """Apache Kafka through e2e/kafka_dist.py (its JVM options and KRaft single-node setup)."""

    name = "Kafka"

    def __init__(self, workdir: Path) -> None:
        self.node = kafka_dist.KafkaBroker(workdir, overrides=COMMON_SETTINGS)
        self.port = self.node.port
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.node.proc is not None
        return self.node.proc.pid

    @property
    def log_dir(self) -> Path:
        return self.node.log_dir

    def alive(self) -> bool:
        return self.node.alive

    def _configure(self, ports: dict[str, int], settings: dict[str, str]) -> None:
        assert not self.node.formatted, "listeners are written by the storage format"
        node = self.node.settings
        broker = {"PLAINTEXT": self.port, **ports}
        node["listeners"] = listener_list(
            {**broker, "CONTROLLER": self.node.controller_port})
        node["advertised.listeners"] = listener_list(broker)
        node["listener.security.protocol.map"] = ",".join(
            f"{name}:{name}" for name in broker) + ",CONTROLLER:PLAINTEXT"
        node.update(settings)

    def start(self) -> float:
        if not self.node.formatted:
            # Formatting the metadata log is a one-off install step, not part of start-up.
            self.node.format()
        # kafka_dist waits for the start-up line in stdout.log: a restart must not see the
        # previous run's line.
        if self.node.stdout_path.exists():
            self.node.stdout_path.rename(self.node.workdir / f"stdout.{self.starts}.log")
        self.starts += 1
        try:
            return procs.time_to_api_versions(self.port, self.node.start, START_TIMEOUT)
        except BaseException as exc:
            self.node.kill()
            if not isinstance(exc, Exception):
                raise
            raise RuntimeError(f"Kafka did not start: {procs.tail(str(exc), 400)}") from None

    def stop(self) -> float:
        started = time.monotonic()
        try:
            self.node.stop(timeout=60)
        except AssertionError as exc:
            self.node.kill()
            raise RuntimeError(procs.tail(str(exc), 300)) from None
        return time.monotonic() - started

    def kill9(self) -> None:
        self.node.kill()

    def describe_exit(self) -> str:
        code = None if self.node.proc is None else self.node.proc.poll()
        return f"exit code {code}; {procs.tail(self.node.tail(20), 400)}"


def make(kind: str, workdir: Path) -> BenchBroker:
    return MoldauBroker(workdir) if kind == "moldau" else KafkaBroker(workdir)


def log_bytes(path: Path) -> int:
    """Bytes the log directory occupies on disk. Allocated blocks, not apparent sizes:
    Kafka's index files are sparse 10 MiB files, which would count 20 MiB per partition."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def wait_gone(broker: BenchBroker, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while broker.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
