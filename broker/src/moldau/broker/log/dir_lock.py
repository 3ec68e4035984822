"""The `.lock` file of a data directory: one broker process at a time may use the directory.

The lock is an flock on `<dir>/.lock`, so it goes away with the process however it ends. The
holder writes its pid into the file, so that a process turned away can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable

LOCK_FILE = ".lock"


class LogDirLockedError(RuntimeError):
    """Another process holds a log directory's lock."""


class DirLocks:
    """The directory locks one process holds, taken one directory at a time."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def acquire_all(self, directories: Iterable[str]) -> None:
        for directory in directories:
            self.acquire(directory)

    def acquire(self, directory: str) -> None:
        """Lock `directory` (created if missing), or raise LogDirLockedError."""
        directory = os.path.abspath(directory)
        if directory in self._fds:
            return
        os.makedirs(directory, exist_ok=True)
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise LogDirLockedError(
                f"log dir {directory} is locked by {holder} ({LOCK_FILE}); is another broker "
                f"using the same log.dirs?") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fds[directory] = fd

    def held(self) -> list[str]:
        return list(self._fds)

    def release(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds.clear()


def _holder(fd: int) -> str:
    """Who holds the lock, as its pid file says (empty while the holder is starting)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f"process {text}" if text.isdigit() else "another process"
