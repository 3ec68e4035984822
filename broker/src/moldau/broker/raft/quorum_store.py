"""The `quorum-state` file: what a controller must remember about elections across restarts.

A vote, once granted, must survive a crash: a node that forgot it could vote twice in one epoch
and let two leaders be elected. So the file is replaced atomically (temporary file, fsync,
rename, directory fsync) and a file that exists but cannot be read is an error, never "no
state": silently starting from scratch would forget the vote.

The format follows Kafka's QuorumStateData JSON (version 0 field names):

    {"clusterId":"","leaderId":-1,"leaderEpoch":3,"votedId":2,"appliedOffset":0,
     "currentVoters":null,"data_version":0}

-1 stands for "none" in leaderId and votedId. Files of data_version 1 (KIP-853, which adds
votedDirectoryId) are read as well; unknown fields are ignored.
"""

from __future__ import annotations

import json
import os
from typing import Any

from moldau.broker.log.checkpoint import atomic_write
from moldau.broker.raft.state import QuorumState

__all__ = ["QUORUM_STATE_FILE", "QuorumStateError", "QuorumStateStore"]

QUORUM_STATE_FILE = "quorum-state"
_DATA_VERSION = 0
_READABLE_VERSIONS = (0, 1)
_NONE = -1


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be trusted; the node must not start."""


class QuorumStateStore:
    def __init__(self, path: str, *, cluster_id: str = "") -> None:
        self.path = path
        self.cluster_id = cluster_id

    def load(self) -> QuorumState | None:
        """The persisted state, or None when the file does not exist (a brand new node).

        A leftover temporary file from an interrupted save is ignored: the rename that would
        have published it never happened, so the previous state is still the current one.
        """
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise QuorumStateError(f"cannot read quorum state file {self.path}: {exc}") from exc
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise QuorumStateError(
                f"quorum state file {self.path} is not valid JSON: {exc}") from exc
        return self._parse(data)

    def _parse(self, data: Any) -> QuorumState:
        if not isinstance(data, dict):
            raise QuorumStateError(f"quorum state file {self.path} does not hold a JSON object")
        version = data.get("data_version")
        if version not in _READABLE_VERSIONS:
            raise QuorumStateError(
                f"quorum state file {self.path} has unsupported data_version {version!r}")
        values = {}
        for key in ("leaderEpoch", "leaderId", "votedId"):
            value = data.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < _NONE:
                raise QuorumStateError(
                    f"quorum state file {self.path}: field {key} is {value!r}, not an id")
            values[key] = value
        epoch = values["leaderEpoch"]
        if epoch < 0:
            raise QuorumStateError(f"quorum state file {self.path}: negative epoch {epoch}")
        leader = values["leaderId"]
        voted = values["votedId"]
        return QuorumState(epoch=epoch, voted_for=None if voted == _NONE else voted,
                           leader_id=None if leader == _NONE else leader)

    def save(self, state: QuorumState) -> None:
        """Replace the file with `state`, durably, before returning."""
        if state.epoch < 0:
            raise ValueError(f"negative epoch {state.epoch}")
        document = {
            "clusterId": self.cluster_id,
            "leaderId": _NONE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": _NONE if state.voted_for is None else state.voted_for,
            "appliedOffset": 0,
            "currentVoters": None,
            "data_version": _DATA_VERSION,
        }
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        atomic_write(self.path, json.dumps(document, separators=(",", ":")).encode())
