"""The quorum-state file: Kafka-like JSON, replaced atomically, never silently reset."""

import json
import os

import pytest

from moldau.broker.raft.quorum_store import QuorumStateError, QuorumStateStore
from moldau.broker.raft.state import QuorumState


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "quorum-state")


def test_a_new_node_has_no_state(path):
    assert QuorumStateStore(path).load() is None


@pytest.mark.parametrize("state", [
    QuorumState(),
    QuorumState(3),
    QuorumState(4, voted_for=2),
    QuorumState(5, voted_for=1, leader_id=1),
    QuorumState(6, leader_id=3),
])
def test_round_trip(path, state):
    QuorumStateStore(path).save(state)
    assert QuorumStateStore(path).load() == state


def test_file_uses_kafka_field_names(path):
    QuorumStateStore(path, cluster_id="abc").save(QuorumState(7, voted_for=2, leader_id=2))
    with open(path) as handle:
        data = json.load(handle)
    assert data["leaderEpoch"] == 7
    assert data["votedId"] == 2
    assert data["leaderId"] == 2
    assert data["clusterId"] == "abc"
    assert data["data_version"] == 0
    QuorumStateStore(path).save(QuorumState(8))
    with open(path) as handle:
        data = json.load(handle)
    assert (data["votedId"], data["leaderId"]) == (-1, -1)


def test_reads_data_version_1(path):
    with open(path, "w") as handle:
        json.dump({"leaderId": 1, "leaderEpoch": 9, "votedId": 1,
                   "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA", "data_version": 1}, handle)
    assert QuorumStateStore(path).load() == QuorumState(9, voted_for=1, leader_id=1)


def test_leftover_temp_file_is_ignored(path):
    store = QuorumStateStore(path)
    store.save(QuorumState(2, voted_for=3))
    # A save that crashed before its rename leaves a temporary file behind.
    with open(path + ".tmp", "wb") as handle:
        handle.write(b'{"leaderEpoch": 99, "garb')
    assert store.load() == QuorumState(2, voted_for=3)
    store.save(QuorumState(3))
    assert store.load() == QuorumState(3)
    assert not os.path.exists(path + ".tmp")


def test_interrupted_save_keeps_the_previous_state(path, monkeypatch):
    store = QuorumStateStore(path)
    store.save(QuorumState(2, voted_for=3))

    def crash(*args):
        raise OSError("power loss")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.save(QuorumState(3, voted_for=1))
    monkeypatch.undo()
    assert store.load() == QuorumState(2, voted_for=3)


def test_save_is_fsynced_before_returning(path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    QuorumStateStore(path).save(QuorumState(1, voted_for=1))
    assert len(synced) >= 2  # the file, then the directory after the rename


@pytest.mark.parametrize("content", [
    b"",
    b"{",
    b"\xff\xfe",
    b"[]",
    b'{"leaderEpoch": 3, "votedId": -1, "data_version": 0}',
    b'{"leaderEpoch": "3", "votedId": -1, "leaderId": -1, "data_version": 0}',
    b'{"leaderEpoch": -4, "votedId": -1, "leaderId": -1, "data_version": 0}',
    b'{"leaderEpoch": 3, "votedId": -7, "leaderId": -1, "data_version": 0}',
    b'{"leaderEpoch": 3, "votedId": -1, "leaderId": -1, "data_version": 5}',
])
def test_corrupt_file_raises_naming_it(path, content):
    with open(path, "wb") as handle:
        handle.write(content)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        QuorumStateStore(path).load()


def test_unreadable_file_raises(tmp_path):
    directory = tmp_path / "quorum-state"
    directory.mkdir()  # reading a directory fails with an OSError other than "not found"
    with pytest.raises(QuorumStateError, match="quorum-state"):
        QuorumStateStore(str(directory)).load()
