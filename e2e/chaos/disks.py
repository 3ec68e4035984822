"""A disk per node that a crash can drop: the node's data directory is an ext4 file system
(default `data=ordered`, journal commits every 5 s) on a loop device over an image file.

`power_cut()` is what the file system sees when the machine loses power: ext4's shutdown
ioctl with EXT4_GOING_FLAGS_NOLOGFLUSH (xfstests' "godown") marks it shut down without
writing the journal or any dirty page, so from that instant nothing more reaches the image;
`remount()` then mounts the image again, which replays the journal as after a reboot. What
survives is what was on the device at the cut: everything fsynced (an fsync waits for the
data and the journal commit), and whatever the kernel happened to write back on its own
(dirty data older than vm.dirty_expire_centisecs, 30 s by default), exactly as on a real
machine. Data written since, without an fsync, is gone, and so are files whose creation
never reached the journal.

Images and loop devices carry the pid of the run (`mch<pid>d<node>.img`), so a later run's
`remove_stale()` unmounts and detaches what a crashed run left.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from e2e.chaos.net import PREFIX, _run_alive, run

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # neither the journal nor dirty data is written
MOUNT_OPTIONS = "data=ordered"
_IMAGE = re.compile(rf"{PREFIX}(\d+)d\d+\.img$")


@dataclass
class NodeDisk:
    """One node's file system: `image` on a loop device, mounted at `mountpoint`."""

    image: Path
    mountpoint: Path
    size_mb: int = 1024  # a sparse file: only what is written takes space
    device: str = ""

    def create(self) -> NodeDisk:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as handle:
            handle.truncate(self.size_mb * 1024 * 1024)
        run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
            str(self.image))
        self.device = run("losetup", "--find", "--show", str(self.image)).stdout.strip()
        self.mount()
        return self

    def mount(self) -> None:
        run("mount", "-t", "ext4", "-o", MOUNT_OPTIONS, self.device, str(self.mountpoint))

    def used_bytes(self) -> int:
        """Bytes in the files under the mount point, as the running system sees them."""
        total = 0
        for root, _, files in os.walk(self.mountpoint):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return total

    def power_cut(self) -> None:
        """Stop the file system where it stands: no journal commit, no more writeback."""
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def remount(self) -> None:
        """Mount what the device holds again (the journal is replayed). Every process that
        used the file system must have exited."""
        run("umount", str(self.mountpoint))
        self.mount()

    def remove(self) -> None:
        if not self.device:
            return
        run("umount", str(self.mountpoint), check=False)
        run("losetup", "-d", self.device, check=False)
        self.device = ""
        with contextlib.suppress(OSError):
            self.image.unlink()


def node_disks(directory: Path, mountpoints: dict[int, Path], run_id: str | None = None
               ) -> dict[int, NodeDisk]:
    """A mounted disk for each node id, its image in `directory`; on a failure the disks
    made so far are removed."""
    run_id = run_id or str(os.getpid())
    disks: dict[int, NodeDisk] = {}
    try:
        for node_id, mountpoint in mountpoints.items():
            disks[node_id] = NodeDisk(directory / f"{PREFIX}{run_id}d{node_id}.img",
                                      mountpoint).create()
    except BaseException:
        for disk in disks.values():
            disk.remove()
        raise
    return disks


def remove_stale() -> list[str]:
    """Unmount and detach the loop devices of runs whose process is gone."""
    removed = []
    listing = run("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE",
                  check=False).stdout
    for line in listing.splitlines():
        words = line.split(None, 1)
        match = _IMAGE.search(words[1].strip()) if len(words) == 2 else None
        if match and not _run_alive(int(match.group(1))):
            device = words[0]
            for target in run("findmnt", "--noheadings", "--output", "TARGET", "--source",
                              device, check=False).stdout.split():
                run("umount", "--lazy", target, check=False)
            run("losetup", "-d", device, check=False)
            removed.append(device)
    return removed
