"""The test bed's host-state guard sees the bridge and veths the test bed would leave, and not
the links other users of the machine create meanwhile (network-namespace tests, podman)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from e2e.kube.testbed import changes, host_state


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    """Link names of this test alone (at most 15 characters)."""
    tag = f"{os.getpid() % 100000:05d}"
    found = {"bridge": f"hsb{tag}", "veth": f"hsv{tag}", "peer": f"hsp{tag}",
             "other": f"mch{tag}a", "other_peer": f"mch{tag}b"}
    yield found
    for name in ("bridge", "veth", "other"):
        subprocess.run(["ip", "link", "del", found[name]], capture_output=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="adding links needs root")
def test_only_the_test_beds_links_count(names: dict[str, str]) -> None:
    before = host_state(names["bridge"])
    ip("link", "add", names["other"], "type", "veth", "peer", "name", names["other_peer"])
    assert changes(before, host_state(names["bridge"])) == ""

    ip("link", "add", names["bridge"], "type", "bridge")
    ip("link", "add", names["veth"], "type", "veth", "peer", "name", names["peer"])
    ip("link", "set", names["veth"], "master", names["bridge"])
    assert changes(before, host_state(names["bridge"])) == \
        f"links: [] -> {sorted([names['bridge'], names['veth']])}"
