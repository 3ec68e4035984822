"""`meta.properties` in each log dir: the cluster id and node id the data belongs to.

Kafka requires `kafka-storage format` first; Moldau formats an empty directory on first
start, so a broker runs with no set-up, and refuses data that belongs to another node or
cluster. Nodes of one controller quorum must share a cluster id: a new directory takes the
one derived from controller.quorum.voters, so every node of a quorum formats alike.
"""

from __future__ import annotations

import base64
import os
import uuid

from moldau.broker.log.checkpoint import atomic_write
from moldau.config import ConfigError
from moldau.properties import load_properties

META_FILE = "meta.properties"


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def quorum_cluster_id(voters: str) -> str:
    """The cluster id every node configured with these voters agrees on."""
    derived = uuid.uuid5(uuid.NAMESPACE_URL, f"moldau-quorum:{voters}")
    return base64.urlsafe_b64encode(derived.bytes).decode().rstrip("=")


def ensure_formatted(log_dirs: list[str], node_id: int, new_id: str | None = None) -> str:
    """Return the cluster id, writing meta.properties where it is missing."""
    found: dict[str, dict[str, str]] = {}
    for directory in log_dirs:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, META_FILE)
        if os.path.exists(path):
            found[directory] = load_properties(path)
    cluster_ids = {meta.get("cluster.id") for meta in found.values()}
    if len(cluster_ids) > 1:
        raise ConfigError(f"Invalid value for configuration log.dirs: the directories belong "
                          f"to different clusters {sorted(map(str, cluster_ids))}")
    for directory, meta in found.items():
        if meta.get("node.id") != str(node_id):
            raise ConfigError(f"Invalid value {node_id} for configuration node.id: the data in "
                              f"{directory} belongs to node {meta.get('node.id')}")
    cluster_id = cluster_ids.pop() if cluster_ids else (new_id or new_cluster_id())
    assert cluster_id is not None
    for directory in log_dirs:
        if directory not in found:
            _write(directory, cluster_id, node_id)
    return cluster_id


def _write(directory: str, cluster_id: str, node_id: int) -> None:
    path = os.path.join(directory, META_FILE)
    text = (f"#Written by Moldau\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
            f"directory.id={new_cluster_id()}\n")
    # The rename and its directory are fsynced too, as Kafka's storage format does: a power
    # cut must not leave a node that restarts without knowing its cluster.
    atomic_write(path, text.encode())
