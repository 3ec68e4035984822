"""The Moldau sink under failures, with real Spark applications (e2e/spark/failing_app.py) in
processes of their own: a task that fails and is retried, a driver killed with SIGKILL after
the tasks wrote a micro-batch and before Spark's commit log (before and after the sink's
commit), then restarted from its checkpoint. With exactlyOnce a read_committed consumer sees
every row once; without it, rows repeat."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from e2e.support import (
    REPO_ROOT,
    Rec,
    ck_values,
    kp_create_topic,
    kp_produce,
    now_ms,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 2
PER_PARTITION = 400
# maxOffsetsPerTrigger 200 over two equally filled partitions: 100 offsets of each per batch.
MAX_OFFSETS = 200
PER_BATCH = MAX_OFFSETS // PARTITIONS
FAILING_BATCH, UNCOMMITTED_BATCH, COMMITTED_BATCH = 1, 2, 3
APP_TIMEOUT = 300.0


class App:
    """One run of failing_app in its own process group (the driver, its JVM and the Python
    processes Spark starts), with its output in files."""

    def __init__(self, work: Path, name: str, spec: dict) -> None:
        self.log = work / f"{name}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "e2e.spark.failing_app", json.dumps(spec)],
                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait(self) -> int:
        try:
            return self.proc.wait(APP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the application ran past {APP_TIMEOUT} s:\n{self.tail()}"
                                 ) from None

    def kill(self) -> None:
        """SIGKILL to the driver's whole process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def value(partition: int, offset: int) -> bytes:
    """Each source row's value: numbered, and 4 KiB long, so that the rows a task has passed
    through its UDF leave Spark's buffers (~40 such rows) and reach the sink while the task
    is still running."""
    return f"p{partition}-{offset}-".encode().ljust(4096, b".")


def batch_values(batch: int, partitions: Iterable[int] = range(PARTITIONS)) -> set[bytes]:
    """The values micro-batch `batch` reads from `partitions`."""
    return {value(p, o) for p in partitions
            for o in range(batch * PER_BATCH, (batch + 1) * PER_BATCH)}


@pytest.fixture
def topics(module_broker) -> tuple[str, str, list[bytes]]:
    """A source of 2 x 100 numbered values and an empty sink, both of two partitions."""
    bootstrap = module_broker.bootstrap
    source, sink = unique("eos-in"), unique("eos-out")
    kp_create_topic(bootstrap, source, partitions=PARTITIONS)
    kp_create_topic(bootstrap, sink, partitions=PARTITIONS)
    numbered = [Rec(p, None, value(p, offset), (), now_ms())
                for offset in range(PER_PARTITION) for p in range(PARTITIONS)]
    kp_produce(bootstrap, source, numbered)
    return source, sink, [r.value for r in numbered]


def sink_counts(bootstrap: str, sink: str) -> Counter:
    values = ck_values(bootstrap, sink, PARTITIONS, "read_committed", 60)
    return Counter(v for partition in values.values() for v in partition)


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_until_stalled(work: Path, name: str, spec: dict, batch: int, when: str) -> None:
    """Run the application until its driver stalls in the sink's commit of `batch` (`when`
    "before" or "after" the sink commits), then kill -9 it."""
    marker = work / f"stalled-{name}"
    app = App(work, name, {**spec, "stall_at_batch": batch, "stall_when": when,
                           "stall_marker": str(marker)})
    try:
        wait_until(lambda: marker.exists() or app.proc.poll() is not None, APP_TIMEOUT,
                   f"the driver to stall in the commit of batch {batch}")
        assert marker.exists(), f"the application ended:\n{app.tail()}"
    finally:
        app.kill()


def run_with_failures(bootstrap: str, source: str, sink: str, work: Path,
                      exactly_once: bool) -> list[dict]:
    """A streaming copy in four micro-batches of 200 rows, restarted from its checkpoint
    after each failure: a task of batch 1 fails once; the driver is killed in batch 2 before
    the sink commits it, and in batch 3 after. The journal of committed micro-batches."""
    spec = {"mode": "stream", "bootstrap": bootstrap, "source": source, "sink": sink,
            "exactly_once": exactly_once, "max_offsets": MAX_OFFSETS,
            "checkpoint": str(work / "checkpoint"), "journal": str(work / "journal"),
            "work": str(work / "spark"), "fail_marker": str(work / "failed"),
            # Partition 0's task of batch 1 fails at its 91st row once its 31st is in the
            # sink's log.
            "fail_value": value(0, FAILING_BATCH * PER_BATCH + 90).decode(),
            "sent_value": value(0, FAILING_BATCH * PER_BATCH + 30).decode()}
    run_until_stalled(work, "first", spec, UNCOMMITTED_BATCH, "before")
    assert (work / "failed").exists(), "no task failed"
    run_until_stalled(work, "second", spec, COMMITTED_BATCH, "after")
    last = App(work, "third", spec)
    assert last.wait() == 0, last.tail()
    return journal(work / "journal")


def test_exactly_once_under_a_failed_task_and_killed_drivers(module_broker, topics,
                                                             tmp_path) -> None:
    source, sink, values = topics
    batches = run_with_failures(module_broker.bootstrap, source, sink, tmp_path, True)
    assert [b["batch"] for b in batches] == [0, 1, 2, 2, 3, 3], batches
    assert len({b["pid"] for b in batches}) == 3
    # Batch 2 was never committed: its replay aborted the prepared transactions and wrote
    # them again. Batch 3 was: its replay found each task's progress recorded and skipped.
    for batch in batches[:5]:
        assert [(t["records"], t["skipped"]) for t in batch["tasks"]] == \
            [(PER_BATCH, False)] * PARTITIONS, batch
    assert [(t["records"], t["skipped"]) for t in batches[5]["tasks"]] == \
        [(0, True)] * PARTITIONS, batches[5]
    counts = sink_counts(module_broker.bootstrap, sink)
    assert counts == Counter(values), {v: n for v, n in counts.items() if n != 1}


def test_at_least_once_repeats_replayed_batches(module_broker, topics, tmp_path) -> None:
    source, sink, values = topics
    batches = run_with_failures(module_broker.bootstrap, source, sink, tmp_path, False)
    assert [b["batch"] for b in batches] == [0, 1, 2, 2, 3, 3], batches
    counts = sink_counts(module_broker.bootstrap, sink)
    assert set(counts) == set(values)
    replayed = batch_values(UNCOMMITTED_BATCH) | batch_values(COMMITTED_BATCH)
    assert {v for v, n in counts.items() if v in replayed and n == 2} == replayed
    # Rows the failed task sent before it failed are written again by its retry.
    retried = batch_values(FAILING_BATCH, partitions=(0,))
    repeated = {v for v, n in counts.items() if n > 1 and v not in replayed}
    assert value(0, FAILING_BATCH * PER_BATCH + 30) in repeated
    assert repeated <= retried, sorted(repeated - retried)
    assert all(n <= 2 for n in counts.values())


def test_batch_write_exactly_once_when_a_task_is_killed(module_broker, topics,
                                                        tmp_path) -> None:
    source, sink, values = topics
    spec = {"mode": "batch", "bootstrap": module_broker.bootstrap, "source": source,
            "sink": sink, "exactly_once": True, "work": str(tmp_path / "spark"),
            "fail_marker": str(tmp_path / "failed"), "fail_value": value(1, 300).decode(),
            "sent_value": value(1, 200).decode(), "fail_how": "kill"}
    app = App(tmp_path, "batch", spec)
    assert app.wait() == 0, app.tail()
    assert (tmp_path / "failed").exists(), "no task failed"
    counts = sink_counts(module_broker.bootstrap, sink)
    assert counts == Counter(values), {v: n for v, n in counts.items() if n != 1}
