"""The examples of README.md and client/README.md, run in the order written against a real
broker, as a new user would paste them after `make run`.

From `sh` blocks only the commands that talk to a broker run (moldau topics, produce,
consume, groups, perf; kcat); everything else is skipped, for the reason SKIPPED gives.
`python` blocks run whole. The broker address of the examples becomes the test broker's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import moldau_executable
from e2e.support import kcat_path

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_ADDRESS = re.compile(r"\b(localhost|127\.0\.0\.1):9092\b")
BROKER_COMMAND = re.compile(r"(^|\|\s*)(kcat\b|moldau (topics|produce|consume|groups|perf)\b)")
# Lines that are not commands against a running broker, and why they do not run here.
SKIPPED = {
    "make ": "sets up the checkout or starts a broker in the foreground",
    "moldau broker": "starts a broker in the foreground; the test brings its own",
    "moldau cluster": "starts or stops a local cluster; e2e/test_cluster_cli.py runs those",
}
# A block that starts a cluster talks to that cluster (replication factor 3), not to the
# single test broker: e2e/test_cluster_cli.py covers it.
CLUSTER_BLOCK = "moldau cluster up"
# The Kubernetes block runs whole on the test bed: e2e/kube/test_readme_kubernetes.py.
KUBERNETES_BLOCK = "helm install"
# The performance examples send and read 100000 records; fewer show the same commands work.
REDUCED = [(re.compile(r"--num-records 100000\b"), "--num-records 2000"),
           (re.compile(r"--messages 100000\b"), "--messages 2000")]


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), re.M | re.S)


def shell_commands(text: str) -> list[str]:
    """The logical lines of a shell block (backslash continuations joined)."""
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def runnable(command: str) -> tuple[bool, str]:
    for prefix, reason in SKIPPED.items():
        if command.startswith(prefix):
            return False, reason
    if BROKER_COMMAND.search(command):
        return True, ""
    return False, "not a command against a broker"


def examples(path: Path) -> list[tuple[str, str]]:
    """('sh' or 'python', code) of every example that runs, in order."""
    steps: list[tuple[str, str]] = []
    for language, text in code_blocks(path):
        if language == "python":
            steps.append(("python", text))
        elif language == "sh" and CLUSTER_BLOCK not in text and KUBERNETES_BLOCK not in text:
            steps.extend(("sh", command) for command in shell_commands(text)
                         if runnable(command)[0])
    return steps


def localize(code: str, bootstrap: str) -> str:
    code = EXAMPLE_ADDRESS.sub(bootstrap, code)
    for pattern, replacement in REDUCED:
        code = pattern.sub(replacement, code)
    return code


def run_step(language: str, code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    args = [sys.executable, "-c", code] if language == "python" else ["sh", "-c", code]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=REPO)


@pytest.mark.parametrize("readme", ["README.md", "client/README.md"])
def test_examples_run_in_order(broker, readme):
    env = dict(os.environ)
    tools = {str(Path(moldau_executable()).parent), str(Path(kcat_path()).parent)}
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    steps = examples(REPO / readme)
    assert steps, f"no runnable example in {readme}"
    for language, code in steps:
        proc = run_step(language, localize(code, broker.bootstrap), env)
        assert proc.returncode == 0, (f"{readme}: this {language} example failed with "
                                      f"{proc.returncode}:\n{code}\n--- stdout:\n"
                                      f"{proc.stdout[-2000:]}\n--- stderr:\n"
                                      f"{proc.stderr[-2000:]}")


def test_skipped_lines_are_only_the_ones_named():
    """Every skipped README line has one of the reasons above: a new kind of example must
    be run or given a reason."""
    for language, text in code_blocks(REPO / "README.md"):
        if language != "sh" or KUBERNETES_BLOCK in text:
            continue
        for command in shell_commands(text):
            run, reason = runnable(command)
            assert run or reason in SKIPPED.values(), (command, reason)
