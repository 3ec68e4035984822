"""LogManager: start-up, locking, create/delete, checkpoints, clean and unclean shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from log_helpers import SMALL, append, config, make_batch

from moldau.broker.log.checkpoint import read_offsets
from moldau.broker.log.dir_lock import LogDirLockedError
from moldau.broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def manager(*dirs) -> LogManager:
    return LogManager([str(d) for d in dirs], default_config=SMALL)


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_create_get_and_restart(tmp_path):
    m = manager(tmp_path / "a", tmp_path / "b")
    assert m.load() == []
    logs = [m.create("orders", p, TOPIC_ID, SMALL) for p in range(4)]
    assert m.create("orders", 0, TOPIC_ID, SMALL) is logs[0]
    assert m.get("orders", 3) is logs[3] and m.get("orders", 9) is None
    # Spread over the dirs, fewest partitions first.
    dirs = {m.log_dir_of("orders", p) for p in range(4)}
    assert dirs == {str(tmp_path / "a"), str(tmp_path / "b")}
    for i, plog in enumerate(logs):
        for _ in range(i + 1):
            append(plog, make_batch(2))
    assert logs[0].topic_id == TOPIC_ID
    m.shutdown()
    for d in ("a", "b"):
        assert (tmp_path / d / CLEAN_SHUTDOWN_FILE).exists()
        rp = read_offsets(str(tmp_path / d / "recovery-point-offset-checkpoint"))
        assert all(v == m.get(*tp).log_end_offset for tp, v in rp.items())

    m2 = manager(tmp_path / "a", tmp_path / "b")
    loaded = m2.load()
    assert sorted((p.topic, p.partition, p.log_end_offset) for p in loaded) == [
        ("orders", 0, 2), ("orders", 1, 4), ("orders", 2, 6), ("orders", 3, 8)]
    assert m2.get("orders", 1).topic_id == TOPIC_ID
    # The marker is consumed at start-up so that a crash is noticed next time.
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    described = dict(m2.describe_dirs())
    assert sum(len(v) for v in described.values()) == 4
    assert all(size > 0 and lag == 0 for v in described.values() for _, _, size, lag in v)
    m2.shutdown()


def test_second_manager_on_the_same_dir_fails(tmp_path):
    m = manager(tmp_path / "a")
    m.load()
    with pytest.raises(LogDirLockedError, match="locked"):
        manager(tmp_path / "a").load()
    m.shutdown()
    m2 = manager(tmp_path / "a")
    m2.load()
    m2.shutdown()


def test_different_topic_id_is_rejected(tmp_path):
    from moldau.errors import ErrorCode, KafkaError
    m = manager(tmp_path / "a")
    m.load()
    m.create("orders", 0, TOPIC_ID, SMALL)
    with pytest.raises(KafkaError) as e:
        m.create("orders", 0, uuid.uuid4(), SMALL)
    assert e.value.code == ErrorCode.inconsistent_topic_id
    m.shutdown()


def test_delete_renames_then_removes(tmp_path):
    m = manager(tmp_path / "a")
    m.load()
    plog = m.create("orders", 0, TOPIC_ID, config(file_delete_delay_ms=0))
    append(plog, make_batch(3))
    result = plog.read(0, 1 << 20, max_offset=None, min_one_batch=True)
    assert m.delete("orders", 0)
    assert m.get("orders", 0) is None
    assert not (tmp_path / "a" / "orders-0").exists()
    wait_until(lambda: not any(n.endswith("-delete") for n in os.listdir(tmp_path / "a")))
    assert result.read_bytes()  # an in-flight slice still reads the unlinked file
    assert not m.delete("orders", 0)
    m.shutdown()


def test_leftover_delete_dirs_are_removed_at_start(tmp_path):
    (tmp_path / "a" / "orders-0.0123abcd-delete").mkdir(parents=True)
    (tmp_path / "a" / "not a partition").mkdir()
    m = manager(tmp_path / "a")
    assert m.load() == []
    wait_until(lambda: not (tmp_path / "a" / "orders-0.0123abcd-delete").exists())
    m.shutdown()


def test_retention_and_checkpoints(tmp_path):
    m = manager(tmp_path / "a")
    m.load()
    plog = m.create("orders", 0, TOPIC_ID, config(segment_bytes=600, retention_ms=1_000))
    for i in range(10):
        append(plog, make_batch(2, ts=1_000 + i, value=b"k" * 100))
    plog.high_watermark = plog.log_end_offset
    assert m.run_retention(10**9) >= 1
    m.checkpoint()
    starts = read_offsets(str(tmp_path / "a" / "log-start-offset-checkpoint"))
    assert starts[("orders", 0)] == plog.log_start_offset > 0
    m.update_config("orders", config(segment_bytes=600, retention_ms=-1))
    assert plog.config.retention_ms == -1
    m.shutdown()


def test_unclean_start_recovers_and_clean_start_does_not_check(tmp_path):
    m = manager(tmp_path / "a")
    m.load()
    plog = m.create("orders", 0, TOPIC_ID, SMALL)
    for _ in range(5):
        append(plog, make_batch(2))
    m.shutdown()
    seg = tmp_path / "a" / "orders-0" / "00000000000000000000.log"
    with open(seg, "ab") as f:
        f.write(b"\x00" * 77)
    # Clean marker present: the tail is trusted (and here it is not checked).
    m2 = manager(tmp_path / "a")
    m2.load()
    assert m2.get("orders", 0).log_end_offset == 10
    m2.get("orders", 0).close()
    m2._unlock_dirs()  # simulate a crash of this instance: no shutdown, no marker
    m3 = manager(tmp_path / "a")
    m3.load()
    assert m3.get("orders", 0).log_end_offset == 10
    assert os.path.getsize(seg) == 5 * len(make_batch(2))
    m3.shutdown()


CRASH_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time, uuid
    sys.path.insert(0, {helpers!r})
    from log_helpers import SMALL, append, make_batch
    from moldau.broker.log.manager import LogManager
    m = LogManager([{dir!r}], default_config=SMALL)
    m.load()
    plog = m.create("orders", 0, uuid.UUID(int=1), SMALL)
    now = int(time.time() * 1000)
    for seq in range(0, 40, 2):
        append(plog, make_batch(2, producer_id=77, producer_epoch=0, base_sequence=seq,
                                ts=now))
    with open(plog.dir_path + "/00000000000000000000.log", "ab") as f:
        f.write(b"torn!")
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_kill_9_then_restart(tmp_path):
    script = CRASH_SCRIPT.format(helpers=os.path.dirname(__file__), dir=str(tmp_path / "a"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    m = manager(tmp_path / "a")
    m.load()
    plog = m.get("orders", 0)
    assert plog.log_end_offset == 40
    dup = append(plog, make_batch(2, producer_id=77, producer_epoch=0, base_sequence=38))
    assert dup.duplicate and dup.first_offset == 38
    info = append(plog, make_batch(2, producer_id=77, producer_epoch=0, base_sequence=40))
    assert info.first_offset == 40
    m.shutdown()


def test_reserved_directories_are_left_alone(tmp_path):
    from moldau.broker.log.config import LogConfig
    from moldau.broker.log.manager import LogManager

    reserved = tmp_path / "__cluster_metadata-0"
    reserved.mkdir()
    (reserved / "00000000000000000000.log").write_bytes(b"metadata")
    manager = LogManager([str(tmp_path)], default_config=LogConfig(),
                         reserved_dirs=frozenset({"__cluster_metadata-0"}))
    assert manager.load() == []
    manager.shutdown()
    assert (reserved / "00000000000000000000.log").read_bytes() == b"metadata"


def test_retention_and_checkpoints_stay_due_when_the_wall_clock_steps_back(tmp_path,
                                                                         monkeypatch):
    m = LogManager([str(tmp_path / "a")], default_config=SMALL,
                   retention_check_interval_ms=1_000)
    m.load()
    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(m, "run_retention", lambda now_ms: ran.append(("retention", now_ms)))
    monkeypatch.setattr(m, "checkpoint", lambda: ran.append(("checkpoint", 0)))
    wall = 1_800_000_000_000
    m.tick(wall, monotonic_ms=0)
    assert ran == [("retention", wall), ("checkpoint", 0)]
    m.tick(wall + 500, monotonic_ms=500)  # not due yet
    assert len(ran) == 2
    hour = 3_600_000
    m.tick(wall - hour, monotonic_ms=1_000)  # the wall clock went back an hour
    assert ran[2:] == [("retention", wall - hour)]
    m.tick(wall - hour + 60_000, monotonic_ms=61_000)
    assert ran[3:] == [("retention", wall - hour + 60_000), ("checkpoint", 0)]
    # A step forward does not make the work due before its interval has passed.
    m.tick(wall + 10 * hour, monotonic_ms=61_500)
    assert len(ran) == 5
    m.shutdown()
