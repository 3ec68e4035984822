"""Child processes of a benchmark run: started in their own session, tracked, always reaped.

Brokers and load generators run in new sessions so that a runaway JVM can be killed with its
whole process group; `kill_all` is the single place that stops whatever is still running, on
normal exit, on an exception and on Ctrl-C/SIGTERM alike.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

_LIVE: list[subprocess.Popen] = []
_LOCK = threading.Lock()


def spawn(command: Sequence[str], *, stdout: IO | int | None = subprocess.PIPE,
          stderr: IO | int | None = subprocess.PIPE, cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, cwd=cwd, env=env, start_new_session=True)
    with _LOCK:
        _LIVE.append(proc)
    return proc


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group (a JVM may have helpers) and wait for the leader."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
    forget(proc)


def forget(proc: subprocess.Popen) -> None:
    with _LOCK:
        if proc in _LIVE:
            _LIVE.remove(proc)


def kill_all() -> None:
    with _LOCK:
        live = list(_LIVE)
    for proc in live:
        kill(proc)


def run(command: Sequence[str], *, timeout: float, cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stdout: IO | int | None = subprocess.PIPE) -> tuple[int, str, str]:
    """Run to completion (killed at `timeout`); returns exit code, stdout, stderr."""
    proc = spawn(command, cwd=cwd, env=env, stdout=stdout)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        out, err = proc.communicate()
        raise TimeoutError(f"{Path(command[0]).name} still running after {timeout:.0f} s; "
                           f"last output: {tail((out or b'') + err)}") from None
    finally:
        kill(proc)
    return (proc.returncode, (out or b"").decode(errors="replace"),
            err.decode(errors="replace"))


def read_line(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of a child's stdout, or whatever came before `timeout` (b"" if nothing)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = bytearray()
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 1)  # one byte at a time: nothing past the line is consumed
        if not chunk:
            break
        line += chunk
    return bytes(line)


def tail(data: bytes | str, chars: int = 600) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return " ".join(text[-chars:].split())


# --------------------------------------------------------------------------- measurements


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api_versions_request(correlation_id: int) -> bytes:
    """ApiVersions v0 (request header v1, empty body): every Kafka-protocol broker answers it,
    and it is what a client sends first on each connection."""
    client_id = b"bench"
    header = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(header)) + header


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def check_api_versions(frame: bytes, correlation_id: int) -> None:
    got_id, error = struct.unpack(">ih", frame[:6])
    if got_id != correlation_id or error != 0:
        raise ConnectionError(f"ApiVersions answered correlation {got_id}, error {error}")


def api_versions_ok(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(api_versions_request(1))
            check_api_versions(read_frame(sock), 1)
            return True
    except OSError:
        return False


def time_to_api_versions(port: int, launch: Callable[[], object], timeout: float,
                         alive: Callable[[], bool] | None = None) -> float:
    """Seconds from just before `launch()` to the first answered ApiVersions. A thread probes
    every 5 ms so that a `launch` that blocks (Kafka's waits for its log line) does not blur
    the figure."""
    found: list[float] = []
    stop = threading.Event()
    started = time.monotonic()

    def probe() -> None:
        while not stop.is_set() and time.monotonic() - started < timeout:
            if api_versions_ok(port, timeout=0.5):
                found.append(time.monotonic() - started)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        launch()
        while thread.is_alive():
            if alive is not None and not alive():
                raise RuntimeError("broker exited during start-up")
            thread.join(0.05)
    finally:
        stop.set()
    if not found:
        raise TimeoutError(f"no ApiVersions answer within {timeout:.0f} s")
    return found[0]


def process_tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return pids


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its descendants, MiB."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


class RssSampler:
    """Peak RSS of a process tree while a workload runs (sampled every 200 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(0.2)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
