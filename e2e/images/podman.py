"""Podman as the test bed runs it (e2e/kube/lib.sh's podman_: private storage, runc)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LIB = REPO / "e2e" / "kube" / "lib.sh"


def podman(*args: str, timeout: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", f'. "{LIB}" && podman_ "$@"', "podman", *args],
                          capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed: {done.stderr}")
    return done


def build_image(*targets: str, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """build.sh of the Dockerfile's targets (the broker when none); its stdout ends with the
    tags, in order."""
    return subprocess.run(["bash", str(HERE / "build.sh"), *targets], capture_output=True,
                          text=True, timeout=900, env=env)
