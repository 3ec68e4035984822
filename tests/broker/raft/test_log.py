import pytest
from harness import make_log

from moldau.broker.raft.log import UNKNOWN_EPOCH, LogEntry, LogError, OffsetAndEpoch, Snapshot
from moldau.broker.raft.simulation import DurableLog


def test_empty_log():
    log = make_log([])
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.end_offset_for_epoch(7) == OffsetAndEpoch(0, 0)
    assert log.read(0, 10) == ()


def test_end_offset_for_epoch_answers_like_a_leader_epoch_cache():
    log = make_log([1, 1, 3, 3, 3, 6])
    assert log.end_offset == 6 and log.last_epoch == 6
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)  # largest epoch <= 2 is 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(6) == OffsetAndEpoch(6, 6)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(6, 6)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_append_rejects_gaps_and_older_epochs():
    log = make_log([1, 2])
    with pytest.raises(LogError):
        log.append([LogEntry(3, 2, b"x")])
    with pytest.raises(LogError):
        log.append([LogEntry(2, 1, b"x")])


def test_truncate_forgets_epochs():
    log = make_log([1, 1, 3, 3, 4])
    log.truncate(3)
    assert log.end_offset == 3 and log.last_epoch == 3
    log.truncate(2)
    assert log.last_epoch == 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 1)
    log.append([LogEntry(2, 5, b"x")])
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(3, 5)


def test_snapshot_drops_the_prefix():
    log = make_log([1, 1, 2, 2, 2, 3])
    log.snapshot(4, 2, b"state")
    assert (log.log_start_offset, log.end_offset, log.entry_count) == (4, 6, 2)
    assert log.latest_snapshot == Snapshot(OffsetAndEpoch(4, 2), b"state")
    assert log.epoch_at(3) == 2  # the entry just before the log start: the snapshot's epoch
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, UNKNOWN_EPOCH)
    assert [e.offset for e in log.read(4, 10)] == [4, 5]
    with pytest.raises(IndexError):
        log.read(3, 1)
    with pytest.raises(LogError):
        log.truncate(3)
    with pytest.raises(LogError):
        log.snapshot(5, 3, b"")  # entry 4 has epoch 2, not 3


def test_snapshot_of_the_whole_log():
    log = make_log([1, 2])
    log.snapshot(2, 2, b"s")
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (2, 2, 2)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(2, 2)
    log.append([LogEntry(2, 4, b"x")])
    assert log.last_epoch == 4
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 2)


def test_install_snapshot_replaces_everything():
    log = make_log([1, 1, 1])
    log.install_snapshot(Snapshot(OffsetAndEpoch(10, 4), b"s"))
    assert (log.log_start_offset, log.end_offset, log.last_epoch, log.entry_count) == (10, 10, 4, 0)


def test_durable_log_loses_only_what_was_not_flushed():
    log = DurableLog()
    log.append([LogEntry(0, 1, b"a"), LogEntry(1, 1, b"b")])
    log.flush()
    log.append([LogEntry(2, 1, b"c")])
    log.crash()
    assert [e.payload for e in log.read(0, 10)] == [b"a", b"b"]
    # An unsynced truncation comes undone by a crash, as on a real disk.
    log.truncate(1)
    log.append([LogEntry(1, 2, b"x")])
    log.crash()
    assert [(e.epoch, e.payload) for e in log.read(0, 10)] == [(1, b"a"), (1, b"b")]
    log.truncate(1)
    log.append([LogEntry(1, 2, b"x")])
    log.flush()
    log.crash()
    assert [(e.epoch, e.payload) for e in log.read(0, 10)] == [(1, b"a"), (2, b"x")]
