"""A second broker on a running broker's directories leaves them untouched."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from e2e.conftest import Broker
from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(180)


def _checksums(directories: list[Path]) -> dict[str, str]:
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for directory in directories for path in sorted(directory.rglob("*"))
            if path.is_file()}


def _settled_checksums(directories: list[Path], quiet_s: float = 2.5) -> dict[str, str]:
    """The checksums once the running broker's own start-up and maintenance writes (its
    checkpoints, each second at most) have stopped changing them."""
    latest = _checksums(directories)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        previous, latest = latest, _checksums(directories)
        if latest == previous:
            return latest
    raise AssertionError("the broker's files kept changing")


def test_second_broker_on_the_same_dirs_leaves_without_touching_them(broker_factory, tmp_path):
    dirs = [tmp_path / "shared" / "logs-a", tmp_path / "shared" / "logs-b"]
    metadata_dir = tmp_path / "shared" / "metadata"
    overrides = {"log.dirs": ",".join(map(str, dirs)), "metadata.log.dir": str(metadata_dir),
                 # The first broker's own periodic high watermark checkpoint would change its
                 # files between the two checksums: only at shutdown here.
                 "replica.high.watermark.checkpoint.interval.ms": "3600000"}
    first = broker_factory(overrides)
    topic = unique("lock")
    kp_create_topic(first.bootstrap, topic, partitions=2)
    records = make_records(20, partitions=2)
    kp_produce(first.bootstrap, topic, records, acks="all")
    before = _settled_checksums([*dirs, metadata_dir])
    # metadata.log.dir holds the metadata log (quorum-state included) instead of log.dirs.
    assert (metadata_dir / "__cluster_metadata-0" / "quorum-state").is_file()
    assert not (dirs[0] / "__cluster_metadata-0").exists()

    second = Broker(tmp_path / "second", overrides)  # same directories, its own port
    started = time.monotonic()
    result = second.run_to_exit(timeout=60)
    elapsed = time.monotonic() - started

    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(dirs[0]) in lines[0] and f"process {first.proc.pid}" in lines[0], lines[0]
    assert elapsed < 30, f"the second broker took {elapsed:.1f} s to give up"
    assert _checksums([*dirs, metadata_dir]) == before

    # The first broker did not notice: it still serves, and restarts with nothing to repair.
    more = make_records(5, partitions=2, seed=2)
    kp_produce(first.bootstrap, topic, more, acks="all")
    first.stop()
    first.restart()
    consumed = kp_consume_all(first.bootstrap, topic, range(2))
    assert_records_equal(consumed, with_offsets(records + more))
    log_text = first.stderr_path.read_text(errors="replace")
    assert "torn or corrupt" not in log_text, first.tail()
