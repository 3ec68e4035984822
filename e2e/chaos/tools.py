"""The system tools the fault-injection suite drives, and the Debian packages that bring
them (`make tools` installs them). A test whose tool is missing fails with one line naming
it: a skipped fault test would look like a passed one."""

from __future__ import annotations

import os
import shutil

import pytest

# tool -> Debian package
NETWORK = {"ip": "iproute2", "nft": "nftables"}
DISKS = {"mkfs.ext4": "e2fsprogs", "losetup": "mount", "mount": "mount", "umount": "mount"}
CLOCK = {"cc": "gcc"}
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")  # not on every user's PATH


def search_path(path: str | None = None) -> str:
    path = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join([path, *SYSTEM_DIRS])


def missing(tools: dict[str, str], path: str | None = None) -> str | None:
    """None when every tool is found; otherwise one line naming the missing ones."""
    absent = [tool for tool in tools if shutil.which(tool, path=search_path(path)) is None]
    if not absent:
        return None
    packages = sorted({tools[tool] for tool in absent})
    return (f"the fault-injection suite needs {', '.join(absent)} (Debian package"
            f"{'s' if len(packages) > 1 else ''} {', '.join(packages)}): run `make tools`")


def require(tools: dict[str, str]) -> None:
    """Fail the calling test with one line when one of `tools` is missing."""
    problem = missing(tools)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
