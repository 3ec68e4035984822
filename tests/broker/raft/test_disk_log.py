"""DiskRaftLog: the in-memory RaftLog's answers, kept across reopening, torn tails and crashes."""

import os
import random
import shutil

import pytest

from moldau.broker.raft.disk_log import (
    DiskRaftLog,
    LogCorruption,
    checkpoint_name,
    encode_checkpoint,
    encode_frame,
    segment_name,
)
from moldau.broker.raft.log import LogEntry, LogError, OffsetAndEpoch, RaftLog, Snapshot


def entries(start, epochs, tag=b"p"):
    return [LogEntry(start + i, e, tag + b"%d" % (start + i), control=(i % 7 == 3))
            for i, e in enumerate(epochs)]


def assert_same(disk, mem):
    """Every LogView question gets the same answer from both logs."""
    assert disk.log_start_offset == mem.log_start_offset
    assert disk.end_offset == mem.end_offset
    assert disk.last_epoch == mem.last_epoch
    assert disk.entry_count == mem.entry_count
    assert disk.latest_snapshot == mem.latest_snapshot
    start, end = mem.log_start_offset, mem.end_offset
    for offset in range(start - 1 if start > 0 else 0, end):
        assert disk.epoch_at(offset) == mem.epoch_at(offset), offset
    for offset in range(start, end + 1):
        for count in (0, 1, 3, 1000):
            assert disk.read(offset, count) == mem.read(offset, count)
    top = max(mem.last_epoch, 0) + 2
    for epoch in range(-1, top):
        assert disk.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch), epoch
    for offset in (start - 1, end + 1):
        if offset >= 0:
            with pytest.raises(IndexError):
                disk.read(offset, 1)


def segment_files(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def checkpoint_files(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".checkpoint"))


@pytest.mark.parametrize("seed", range(12))
def test_conforms_to_the_in_memory_log(tmp_path, seed):
    rng = random.Random(seed)
    directory = str(tmp_path / "log")
    disk = DiskRaftLog(directory)
    mem = RaftLog()
    epoch = 1
    try:
        for _step in range(150):
            op = rng.choices(["append", "truncate", "flush", "snapshot", "install", "reopen",
                              "bad"], weights=[8, 3, 2, 2, 1, 2, 1])[0]
            if op == "append":
                if rng.random() < 0.3:
                    epoch += rng.randint(1, 3)
                batch = entries(mem.end_offset, [epoch] * rng.randint(1, 6), b"s%d-" % seed)
                disk.append(batch)
                mem.append(batch)
            elif op == "truncate" and mem.end_offset > mem.log_start_offset:
                end = rng.randint(mem.log_start_offset, mem.end_offset)
                disk.truncate(end)
                mem.truncate(end)
            elif op == "flush":
                disk.flush()
            elif op == "snapshot" and mem.end_offset > mem.log_start_offset:
                end = rng.randint(mem.log_start_offset + 1, mem.end_offset)
                state = b"state@%d" % end
                disk.snapshot(end, mem.epoch_at(end - 1), state)
                mem.snapshot(end, mem.epoch_at(end - 1), state)
            elif op == "install":
                offset = mem.end_offset + rng.randint(0, 5)
                epoch = max(epoch, mem.last_epoch) + rng.randint(0, 2)
                snapshot = Snapshot(OffsetAndEpoch(offset, epoch), b"installed@%d" % offset)
                disk.install_snapshot(snapshot)
                mem.install_snapshot(snapshot)
            elif op == "reopen":
                disk.close()
                disk = DiskRaftLog(directory)
            elif op == "bad":
                with pytest.raises(LogError):
                    disk.append([LogEntry(mem.end_offset + 1, epoch, b"gap")])
                if mem.last_epoch > 0:
                    with pytest.raises(LogError):
                        disk.append([LogEntry(mem.end_offset, mem.last_epoch - 1, b"old")])
                if mem.log_start_offset > 0:
                    with pytest.raises(LogError):
                        disk.truncate(mem.log_start_offset - 1)
            assert_same(disk, mem)
            # Exactly one segment, and at most the one checkpoint of the latest snapshot.
            assert segment_files(directory) == [segment_name(mem.log_start_offset)]
            snapshot = mem.latest_snapshot
            expected = [] if snapshot is None else [checkpoint_name(snapshot.snapshot_id)]
            assert checkpoint_files(directory) == expected
        disk.close()
        assert_same(DiskRaftLog(directory), mem)
    finally:
        disk.close()


def test_flush_fsyncs_and_append_does_not(tmp_path, monkeypatch):
    log = DiskRaftLog(str(tmp_path))
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    log.append(entries(0, [1, 1]))
    assert synced == []
    log.flush()
    assert len(synced) == 1
    log.flush()  # nothing new: no second fsync
    assert len(synced) == 1
    log.truncate(1)  # durable before it returns
    assert len(synced) == 2
    log.close()


def written_log(directory, epochs):
    log = DiskRaftLog(directory)
    batch = entries(0, epochs)
    log.append(batch)
    log.flush()
    log.close()
    return batch


def frame_ends(batch):
    ends, pos = [], 0
    for entry in batch:
        pos += len(encode_frame(entry))
        ends.append(pos)
    return ends


def test_recovery_cuts_a_torn_tail_at_any_byte(tmp_path):
    source = str(tmp_path / "source")
    batch = written_log(source, [1, 1, 2, 2, 2, 3, 5, 5])
    ends = frame_ends(batch)
    size = ends[-1]
    rng = random.Random(7)
    cuts = sorted(set(rng.sample(range(size), 40)) | {0, 1, ends[0] - 1, ends[0], size - 1})
    for cut in cuts:
        directory = str(tmp_path / f"cut{cut}")
        shutil.copytree(source, directory)
        path = os.path.join(directory, segment_name(0))
        os.truncate(path, cut)
        log = DiskRaftLog(directory)
        whole = sum(1 for end in ends if end <= cut)
        assert log.read(0, 100) == tuple(batch[:whole])
        assert os.path.getsize(path) == (ends[whole - 1] if whole else 0)
        # The log goes on from there.
        more = LogEntry(whole, 9, b"after")
        log.append([more])
        log.flush()
        log.close()
        assert DiskRaftLog(directory).read(0, 100) == tuple(batch[:whole]) + (more,)


def test_recovery_stops_at_a_corrupt_frame(tmp_path):
    directory = str(tmp_path)
    batch = written_log(directory, [1, 1, 1, 2, 2])
    ends = frame_ends(batch)
    path = os.path.join(directory, segment_name(0))
    with open(path, "r+b") as handle:
        handle.seek(ends[2] - 1)  # the last payload byte of entry 2
        byte = handle.read(1)
        handle.seek(ends[2] - 1)
        handle.write(bytes([byte[0] ^ 0x40]))
    log = DiskRaftLog(directory)
    assert log.read(0, 10) == tuple(batch[:2])
    assert log.end_offset == 2 and log.last_epoch == 1
    assert os.path.getsize(path) == ends[1]


@pytest.mark.parametrize("seed", range(6))
def test_crash_between_append_and_flush(tmp_path, seed):
    """A crash may keep any prefix of the unflushed bytes, or zeros in their place."""
    rng = random.Random(seed)
    directory = str(tmp_path)
    log = DiskRaftLog(directory)
    durable = entries(0, [1, 1, 2])
    log.append(durable)
    log.flush()
    path = log.segment_path
    durable_size = os.path.getsize(path)
    unflushed = entries(3, [2, 3, 3, 3])
    log.append(unflushed)
    log.close()  # no flush: what follows is what the disk might hold after a power loss
    with open(path, "rb") as handle:
        content = handle.read()
    kept = rng.randint(0, len(content) - durable_size)
    tail = content[durable_size:durable_size + kept]
    if seed % 2:
        # Extended but never written: the file system shows zeros.
        tail += bytes(rng.randint(1, 40))
    with open(path, "wb") as handle:
        handle.write(content[:durable_size] + tail)
    recovered = DiskRaftLog(directory)
    got = recovered.read(0, 100)
    assert got[:3] == tuple(durable)
    assert got[3:] == tuple(unflushed[:len(got) - 3])
    assert os.path.getsize(path) == durable_size + sum(
        len(encode_frame(e)) for e in got[3:])
    recovered.close()


def test_truncation_is_durable(tmp_path):
    directory = str(tmp_path)
    log = DiskRaftLog(directory)
    log.append(entries(0, [1, 1, 2, 2]))
    log.flush()
    log.truncate(2)
    log.append([LogEntry(2, 3, b"new")])
    log.flush()
    log.close()
    reopened = DiskRaftLog(directory)
    assert [(e.offset, e.epoch, e.payload) for e in reopened.read(0, 10)] == [
        (0, 1, b"p0"), (1, 1, b"p1"), (2, 3, b"new")]


def test_snapshot_and_restart(tmp_path):
    directory = str(tmp_path)
    log = DiskRaftLog(directory)
    log.append(entries(0, [1, 1, 2, 2, 2, 3]))
    log.flush()
    log.snapshot(4, 2, b"state-4")
    assert checkpoint_files(directory) == ["00000000000000000004-0000000002.checkpoint"]
    assert segment_files(directory) == ["00000000000000000004.log"]
    log.append([LogEntry(6, 3, b"x")])
    log.flush()
    log.close()
    reopened = DiskRaftLog(directory)
    assert reopened.latest_snapshot == Snapshot(OffsetAndEpoch(4, 2), b"state-4")
    assert (reopened.log_start_offset, reopened.end_offset) == (4, 7)
    assert reopened.epoch_at(3) == 2
    assert [e.payload for e in reopened.read(4, 10)] == [b"p4", b"p5", b"x"]
    reopened.snapshot(7, 3, b"state-7")
    assert checkpoint_files(directory) == ["00000000000000000007-0000000003.checkpoint"]
    reopened.close()
    again = DiskRaftLog(directory)
    assert (again.log_start_offset, again.end_offset, again.last_epoch) == (7, 7, 3)
    assert again.latest_snapshot.data == b"state-7"


def test_install_snapshot_and_restart(tmp_path):
    directory = str(tmp_path)
    log = DiskRaftLog(directory)
    log.append(entries(0, [1, 1, 1]))
    log.flush()
    log.install_snapshot(Snapshot(OffsetAndEpoch(10, 4), b"leader-state"))
    assert segment_files(directory) == [segment_name(10)]
    with pytest.raises(LogError):
        log.install_snapshot(Snapshot(OffsetAndEpoch(9, 4), b"older"))
    log.close()
    reopened = DiskRaftLog(directory)
    assert (reopened.log_start_offset, reopened.end_offset, reopened.last_epoch) == (10, 10, 4)
    assert reopened.latest_snapshot.data == b"leader-state"


def old_segment_with_checkpoint(directory, epochs, snapshot):
    """The files a crash leaves between writing a checkpoint and rewriting the segment."""
    batch = written_log(directory, epochs)
    with open(os.path.join(directory, checkpoint_name(snapshot.snapshot_id)), "wb") as handle:
        handle.write(encode_checkpoint(snapshot))
    with open(os.path.join(directory, segment_name(snapshot.snapshot_id.offset) + ".tmp"),
              "wb") as handle:
        handle.write(b"half-written")
    return batch


def test_recovery_finishes_an_interrupted_snapshot(tmp_path):
    directory = str(tmp_path)
    snapshot = Snapshot(OffsetAndEpoch(3, 2), b"s3")
    batch = old_segment_with_checkpoint(directory, [1, 2, 2, 2, 3], snapshot)
    log = DiskRaftLog(directory)
    assert log.latest_snapshot == snapshot
    assert log.read(3, 10) == tuple(batch[3:])
    assert sorted(os.listdir(directory)) == [checkpoint_name(snapshot.snapshot_id),
                                             segment_name(3)]
    log.close()
    assert DiskRaftLog(directory).read(3, 10) == tuple(batch[3:])


def test_recovery_finishes_an_interrupted_install(tmp_path):
    """An installed snapshot the old entries do not match at its boundary replaces them."""
    directory = str(tmp_path)
    snapshot = Snapshot(OffsetAndEpoch(3, 5), b"from-leader")
    old_segment_with_checkpoint(directory, [1, 1, 1, 1, 1], snapshot)
    log = DiskRaftLog(directory)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (3, 3, 5)
    assert segment_files(directory) == [segment_name(3)]


def test_corrupt_checkpoint_raises(tmp_path):
    directory = str(tmp_path)
    log = DiskRaftLog(directory)
    log.append(entries(0, [1, 1]))
    log.snapshot(2, 1, b"state")
    log.close()
    path = os.path.join(directory, checkpoint_name(OffsetAndEpoch(2, 1)))
    with open(path, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        handle.write(b"!")
    with pytest.raises(LogCorruption, match="checkpoint"):
        DiskRaftLog(directory)


def test_other_files_are_left_alone(tmp_path):
    directory = str(tmp_path)
    with open(os.path.join(directory, "quorum-state"), "w") as handle:
        handle.write("{}")
    with open(os.path.join(directory, "quorum-state.tmp"), "w") as handle:
        handle.write("{")
    log = DiskRaftLog(directory)
    log.append(entries(0, [1]))
    log.snapshot(1, 1, b"s")
    log.close()
    DiskRaftLog(directory).close()
    assert {"quorum-state", "quorum-state.tmp"} <= set(os.listdir(directory))
