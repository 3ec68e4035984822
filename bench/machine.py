"""The machine's own limits, measured in the same run, and a description of the machine.

    python -m bench.machine receive PORT      (the receiving half of the loopback test)

Loopback TCP: a plain socket sender in this process and a receiver in another, 4 MiB writes,
for a few seconds; the receiver's byte count over its own elapsed time is the ceiling any
fetch over loopback can reach. Disk: 1 GiB written sequentially in 1 MiB blocks to the bench
directory, once with one fsync at the end and once with O_DSYNC (every block durable before
the next), then read back after dropping the page cache.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench import procs

MIB = 1024 * 1024
BLOCK = MIB


def loopback_mib_per_s(seconds: float) -> float:
    receiver = procs.spawn([sys.executable, "-m", "bench.machine", "receive"])
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        block = b"\0" * (4 * BLOCK)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                sock.sendall(block)
        out, _ = receiver.communicate(timeout=30)
        received, elapsed = (float(v) for v in out.split())
        return received / elapsed / MIB
    finally:
        procs.kill(receiver)


def receive() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        print(server.getsockname()[1], flush=True)
        conn, _ = server.accept()
        buffer = bytearray(4 * BLOCK)
        view = memoryview(buffer)
        received = 0
        started = 0.0
        with conn:
            while True:
                count = conn.recv_into(view)
                if not count:
                    break
                if not started:
                    started = time.monotonic()
                received += count
        print(received, time.monotonic() - started, flush=True)


def disk_write_mib_per_s(path: Path, total: int, dsync: bool) -> float:
    block = os.urandom(BLOCK)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DSYNC if dsync else 0)
    started = time.monotonic()
    fd = os.open(path, flags, 0o644)
    try:
        for _ in range(total // BLOCK):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    return total / (time.monotonic() - started) / MIB


def drop_caches() -> str | None:
    """Empty the page cache; None when done, else why it could not be."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        return f"cold cache not measurable here ({exc.strerror})"
    return None


def disk_read_mib_per_s(path: Path) -> float:
    size = path.stat().st_size
    started = time.monotonic()
    with open(path, "rb", buffering=0) as file:
        while file.read(BLOCK):
            pass
    return size / (time.monotonic() - started) / MIB


# --------------------------------------------------------------------------- description


def _first(pattern: str, text: str, default: str = "?") -> str:
    found = re.search(pattern, text, re.MULTILINE)
    return found[1].strip() if found else default


def describe(bench_dir: Path) -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    meminfo = Path("/proc/meminfo").read_text()
    mem_kib = int(_first(r"^MemTotal:\s+(\d+)", meminfo, "0"))
    model = _first(r"^model name\s*:(.*)$", cpuinfo)
    return {
        "cpu": f"{os.cpu_count()} cores, {model}",
        "memory": f"{mem_kib / MIB:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "disk": _disk(bench_dir),
        "python": platform.python_version(),
        "java": _java_version(),
    }


def _disk(path: Path) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        out = subprocess.run(["df", "-h", "--output=source,fstype,size", str(path)],
                             capture_output=True, text=True, timeout=10).stdout.split("\n")[1]
        source, fstype, size = out.split()
        return f"{source} ({fstype}, {size})"
    return "?"


def _java_version() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        err = subprocess.run(["java", "-version"], capture_output=True, text=True,
                             timeout=30).stderr
        return " ".join(err.splitlines()[0:1] + err.splitlines()[1:2]).replace('"', "")
    return "?"


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def busy_cpu_seconds() -> float:
    """CPU time all processes of the machine have used since boot (user+nice+system+irq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    if sys.argv[1:2] == ["receive"]:
        receive()
