"""Clock jumps: each node's wall clock (CLOCK_REALTIME, which time.time() reads) runs with an
offset the test changes while the node runs; its monotonic clock is untouched, as a real
clock step (NTP, `date -s`) leaves it.

clockshift.c, compiled once per test session and loaded with LD_PRELOAD through the node's
command prefix, adds the offset held in a small file per node. Debian's libfaketime was the
first choice, but its 0.9.10 either moves CLOCK_MONOTONIC along with the wall clock (a
backward jump then stalls every sleep) or, with FAKETIME_DONT_FAKE_MONOTONIC, makes Python's
time.sleep fail with EINVAL.
"""

from __future__ import annotations

import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("clockshift.c")
OFFSET_FILE_VARIABLE = "CHAOS_CLOCK_OFFSET_FILE"


def build(directory: Path) -> Path:
    """Compile clockshift.c into `directory`; return the library's path."""
    library = directory / "clockshift.so"
    done = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-Wall", "-o", str(library),
                           str(SOURCE), "-ldl"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"cc {SOURCE.name}: {done.stderr.strip()}")
    return library


@dataclass
class NodeClocks:
    """A wall-clock offset per node, settable at any moment."""

    library: Path
    directory: Path
    offsets: dict[int, float] = field(default_factory=dict)  # seconds, by node

    def path(self, node_id: int) -> Path:
        return self.directory / f"clock-offset-{node_id}"

    def prefix(self, node_id: int) -> list[str]:
        """Words before the node's command that run it on its shifted clock."""
        if node_id not in self.offsets:
            self.set(node_id, 0.0)
        return ["env", f"LD_PRELOAD={self.library}",
                f"{OFFSET_FILE_VARIABLE}={self.path(node_id)}"]

    def set(self, node_id: int, seconds: float) -> None:
        """The node's wall clock reads `seconds` ahead (behind, when negative) of the real."""
        data = struct.pack("<q", round(seconds * 1e9)).ljust(4096, b"\0")
        path = self.path(node_id)
        if path.exists():
            with open(path, "r+b") as handle:  # in place: the node has it mapped
                handle.write(data[:8])
        else:
            path.write_bytes(data)
        self.offsets[node_id] = seconds
