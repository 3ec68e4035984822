"""Kafka's leader-side rules on one partition with a real log: the follower's
lastCaughtUpTime, the high watermark over the (maximal) ISR, ISR expansion and shrink
candidates."""

from __future__ import annotations

import uuid

import pytest

from moldau.broker.log.config import LogConfig
from moldau.broker.log.log import PartitionLog
from moldau.broker.metadata.records import PartitionRecord
from moldau.broker.replication.partition import FollowerState, Partition
from moldau.records.batch import parse_header
from moldau.records.codec import build_batch

LAG_MS = 10_000


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), "t", 0, LogConfig(), recovery_point=0,
                            log_start_offset=0, clean_shutdown=True)
    yield log
    log.close()


def append(log: PartitionLog, count: int, epoch: int = 0) -> None:
    buf = bytearray(build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(count)]))
    log.append_as_leader(buf, [parse_header(buf)], leader_epoch=epoch, log_append_time_ms=None)


def leader(plog: PartitionLog, replicas=(1, 2, 3), isr=(1, 2, 3), now=0) -> Partition:
    record = PartitionRecord(uuid.uuid4(), 0, tuple(replicas), tuple(isr), 1)
    partition = Partition("t", 0, record, plog, local_id=1, is_leader=True)
    partition.leader_epoch_start_offset = plog.assign_leader_epoch(0)
    partition.reset_followers(now, new_leader=True)
    return partition


def test_a_fetch_from_the_log_end_means_caught_up_now():
    state = FollowerState()
    state.on_fetch(10, 0, now_ms=500, leader_end_offset=10)
    assert state.last_caught_up_ms == 500
    assert state.log_end_offset == 10


def test_a_fetch_reaching_the_previous_fetch_time_log_end_means_caught_up_then():
    # Kafka's lastCaughtUpTime: at 100 the leader's log ended at 10; a fetch at 200 from 10
    # (the leader has 15 by now) proves the follower was caught up at 100, not at 200.
    state = FollowerState()
    state.on_fetch(5, 0, now_ms=100, leader_end_offset=10)
    assert state.last_caught_up_ms == 0
    state.on_fetch(10, 0, now_ms=200, leader_end_offset=15)
    assert state.last_caught_up_ms == 100
    state.on_fetch(12, 0, now_ms=300, leader_end_offset=20)  # behind the end seen at 200
    assert state.last_caught_up_ms == 100


def test_high_watermark_is_the_lowest_log_end_in_the_isr_and_never_decreases(plog):
    append(plog, 10)
    plog.high_watermark = 0
    partition = leader(plog)
    assert not partition.maybe_increment_high_watermark()  # followers' ends unknown
    partition.followers[2].on_fetch(6, 0, 1, 10)
    assert not partition.maybe_increment_high_watermark()  # replica 3 unknown still
    partition.followers[3].on_fetch(4, 0, 1, 10)
    assert partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 4
    partition.followers[3].on_fetch(10, 0, 2, 10)
    assert partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 6
    # A follower that truncated (fetches from lower) does not pull the HW down.
    partition.followers[2].on_fetch(3, 0, 3, 10)
    assert not partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 6


def test_followers_outside_the_isr_do_not_hold_the_high_watermark_back(plog):
    append(plog, 10)
    plog.high_watermark = 0
    partition = leader(plog, isr=(1, 2))
    partition.followers[2].on_fetch(10, 0, 1, 10)
    assert partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 10  # replica 3 has nothing and is not in the ISR


def test_a_pending_expansion_counts_and_a_pending_shrink_still_counts(plog):
    append(plog, 10)
    plog.high_watermark = 0
    partition = leader(plog, isr=(1, 2))
    partition.followers[2].on_fetch(10, 0, 1, 10)
    partition.followers[3].on_fetch(7, 0, 1, 10)
    partition.pending_isr = (1, 2, 3)  # expansion proposed: 3 already holds the HW
    assert partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 7
    partition.pending_isr = None
    partition.record = PartitionRecord(partition.record.topic_id, 0, (1, 2, 3), (1, 2, 3), 1)
    partition.pending_isr = (1, 3)  # shrink proposed: 2 counts until it is committed
    partition.followers[2].on_fetch(8, 0, 2, 10)
    partition.followers[3].on_fetch(10, 0, 2, 10)
    assert partition.maybe_increment_high_watermark()
    assert plog.high_watermark == 8


def test_expansion_needs_the_high_watermark_and_the_leader_epoch_start(plog):
    append(plog, 5)
    partition = leader(plog, isr=(1, 2))  # this leadership starts at offset 5
    assert partition.leader_epoch_start_offset == 5
    plog.high_watermark = 3
    partition.followers[3].on_fetch(4, 0, 1, 5)
    assert partition.expansion_candidate(3) is None  # past the HW, not the epoch start
    partition.followers[3].on_fetch(5, 0, 2, 5)
    assert partition.expansion_candidate(3) == (1, 2, 3)
    partition.alter_in_flight = True  # one AlterPartition at a time
    assert partition.expansion_candidate(3) is None


def test_out_of_sync_replicas_are_those_not_caught_up_for_the_lag_time(plog):
    append(plog, 10)
    partition = leader(plog, now=0)
    # Reset at 0: ISR members count as caught up then.
    assert partition.out_of_sync_replicas(LAG_MS, LAG_MS) == []
    partition.followers[2].on_fetch(10, 0, 5_000, 10)  # caught up at 5000
    partition.followers[3].on_fetch(4, 0, 5_000, 10)  # behind since the reset
    assert partition.out_of_sync_replicas(LAG_MS + 1, LAG_MS) == [3]
    # A follower at the leader's log end is in sync however long ago it fetched.
    assert partition.out_of_sync_replicas(10 * LAG_MS, LAG_MS) == [3]
    append(plog, 1)
    assert partition.out_of_sync_replicas(5_000 + LAG_MS + 1, LAG_MS) == [2, 3]
