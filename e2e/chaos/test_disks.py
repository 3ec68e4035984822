"""The nodes' disks: a power cut keeps what was fsynced and drops what was not, and a later
run removes the loop devices of a crashed one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from e2e.chaos import disks, net, tools


@pytest.fixture
def disk(tmp_path: Path):
    tools.require(tools.DISKS)
    if net.namespaces_supported() is not None:
        pytest.skip("loop devices and mounts need root")
    made = disks.node_disks(tmp_path, {1: tmp_path / "mnt"})[1]
    try:
        yield made
    finally:
        made.remove()


def write(path: Path, data: bytes, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_power_cut_keeps_what_was_fsynced_and_drops_the_rest(disk: disks.NodeDisk) -> None:
    root = disk.mountpoint
    os.mkdir(root / "log")
    write(root / "log" / "segment", b"a" * 50_000, sync=True)
    fd = os.open(root / "log", os.O_RDONLY)
    os.fsync(fd)  # the new file's directory entry
    os.close(fd)
    write(root / "log" / "segment", b"b" * 30_000, sync=False)  # appended, never fsynced
    write(root / "never-synced", b"c" * 10_000, sync=False)
    assert disk.used_bytes() == 90_000
    disk.power_cut()
    with pytest.raises(OSError):  # nothing more reaches the disk
        write(root / "after-the-cut", b"d", sync=False)
    disk.remount()
    assert (root / "log" / "segment").read_bytes() == b"a" * 50_000
    assert not (root / "never-synced").exists()
    assert disk.used_bytes() == 50_000
    write(root / "log" / "segment", b"e", sync=True)  # usable again
    assert (root / "log" / "segment").stat().st_size == 50_001


def test_setup_removes_the_disks_a_crashed_run_left(tmp_path: Path) -> None:
    tools.require(tools.DISKS)
    if net.namespaces_supported() is not None:
        pytest.skip("loop devices and mounts need root")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a run id whose process no longer exists
    left = disks.node_disks(tmp_path, {1: tmp_path / "left"}, run_id=str(gone.pid))[1]
    mine = disks.node_disks(tmp_path, {2: tmp_path / "mine"})[2]
    try:
        assert os.path.ismount(left.mountpoint)
        assert disks.remove_stale() == [left.device]
        assert not os.path.ismount(left.mountpoint)
        assert left.device not in net.run("losetup", "--list").stdout
        assert os.path.ismount(mine.mountpoint)  # a live run's disk stays
    finally:
        left.remove()
        mine.remove()
