"""The short fuzz mode of the normal suite: each target gets a few thousand coverage-guided
inputs under atheris, starting from the stored corpus, with the soak's memory and time
limits. `make fuzz` runs the same with FUZZ_RUNS inputs per target (docs/chaos.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("FUZZ_SHORT_RUNS", "3000"))
# A cap on each target's fuzzing time, so a slow machine still stays within a minute or so.
MAX_SECONDS = 20

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("target", NAMES)
def test_short_fuzz_finds_nothing(target, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz", target, "--runs", str(RUNS), "--workdir",
         str(tmp_path), "--", f"-max_total_time={MAX_SECONDS}", "-seed=1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=150)
    output = proc.stdout + proc.stderr
    findings = sorted(path.name for path in tmp_path.iterdir()
                      if path.name.startswith(("crash-", "timeout-", "oom-", "leak-")))
    assert proc.returncode == 0 and not findings, (
        f"{target}: exit {proc.returncode}, findings {findings}\n{output[-6000:]}")
    done = re.search(r"Done (\d+) runs in (\d+) second", output)
    assert done, output[-3000:]
    executed = int(done.group(1))
    # All of them, unless the time cap cut the run short on a slow machine.
    assert executed == RUNS or int(done.group(2)) >= MAX_SECONDS, output[-3000:]
    coverage = re.findall(r"cov: (\d+)", output)
    assert coverage and int(coverage[-1]) > 0, output[-3000:]
