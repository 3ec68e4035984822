"""A voter that restarts from an empty directory after losing its disk (see node.py)."""

import asyncio
import os
import shutil
import time

from harness import CONFIG, Cluster, Driver
from test_driver_cluster import ListStateMachine, Outbox, run

from moldau.broker.raft.actions import PersistState, Send
from moldau.broker.raft.driver import LOST_STATE_FILE, RaftDriver
from moldau.broker.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.state import QuorumState, Role

VOTERS = (1, 2, 3)


def payloads(driver):
    return [e.payload for e in driver.log.read(driver.log.log_start_offset, 1000)
            if not e.control]


def committed_on_1_and_2():
    """Node 1 leads; "a" and "b" are committed on nodes 1 and 2 only."""
    cluster = Cluster(3)
    now = cluster.elect(1, 0)
    cluster.down = {3}
    cluster[1].propose([b"a", b"b"], now)
    now = cluster.run(now, now + 100)
    assert cluster[1].node.high_watermark == 3 and payloads(cluster[2]) == [b"a", b"b"]
    assert payloads(cluster[3]) == []
    return cluster, now


def lose_disk(cluster, node_id, now, *, lost_state):
    cluster.drivers[node_id] = Driver(node_id, VOTERS, now=now, seed=7, lost_state=lost_state)


def test_without_the_flag_a_voter_that_lost_its_disk_can_elect_a_leader_missing_commits():
    # The limitation the module docstring describes, shown so that the flag's value is clear.
    cluster, now = committed_on_1_and_2()
    lose_disk(cluster, 2, now, lost_state=False)
    cluster.down = {1}
    now = cluster.run(now, now + 10 * CONFIG.fetch_timeout_ms)
    assert cluster[3].node.role is Role.LEADER
    assert payloads(cluster[3]) == []  # "a" and "b" were committed, and are gone


def test_a_voter_in_probation_neither_votes_nor_stands_until_it_has_caught_up():
    cluster, now = committed_on_1_and_2()
    lose_disk(cluster, 2, now, lost_state=True)
    assert cluster[2].node.in_probation
    cluster.down = {1}
    now = cluster.run(now, now + 10 * CONFIG.fetch_timeout_ms)
    # Node 3 stands again and again; node 2 refuses: no leader is better than a lossy one.
    assert not any(d.node.role is Role.LEADER for i, d in cluster.drivers.items() if i != 1)
    history = [a.message for a in cluster[2].history if isinstance(a, Send)]
    assert any(isinstance(m, VoteResponse) for m in history)
    assert not any(isinstance(m, VoteResponse) and m.vote_granted for m in history)
    assert not any(isinstance(m, VoteRequest) for m in history)
    assert all(a.state.voted_for is None for a in cluster[2].history
               if isinstance(a, PersistState))

    # Node 1 comes back and wins with node 3's vote; node 2 catches up and rejoins for good.
    cluster.down = set()
    now = cluster.run(now, now + 10 * CONFIG.fetch_timeout_ms)
    assert cluster[1].node.role is Role.LEADER
    assert not cluster[2].node.in_probation
    assert payloads(cluster[2]) == [b"a", b"b"]
    cluster[1].propose([b"c"], now)
    now = cluster.run(now, now + 100)
    # Now its vote counts again: with node 3 away, node 1 still commits with node 2.
    cluster.down = {3}
    cluster[1].propose([b"d"], now)
    now = cluster.run(now, now + 100)
    assert [e.payload for e in cluster[2].applied if not e.control][-2:] == [b"c", b"d"]


def test_probation_ends_with_an_answer_that_has_nothing_more():
    node = Driver(2, VOTERS, lost_state=True)
    assert node.node.role is Role.UNATTACHED and node.node.in_probation
    node.handle(BeginQuorumEpochRequest(src=1, dst=2, leader_id=1, leader_epoch=3), 10)
    assert node.node.role is Role.FOLLOWER
    # A vote request in the leader's epoch is refused even if the candidate looks fine.
    vote = VoteRequest(src=3, dst=2, candidate_epoch=4, candidate_id=3, last_offset_epoch=9,
                       last_offset=99)
    node.handle(vote, 11)
    (answer,) = node.take(VoteResponse)
    assert not answer.vote_granted
    assert node.node.in_probation
    node.handle(BeginQuorumEpochRequest(src=3, dst=2, leader_id=3, leader_epoch=4), 12)
    fetch = [m for m in node.take(FetchRequest) if m.dst == 3][-1]
    node.handle(FetchResponse(src=3, dst=2, leader_id=3, leader_epoch=4, high_watermark=0,
                              fetch_offset=fetch.fetch_offset,
                              last_fetched_epoch=fetch.last_fetched_epoch), 13)
    assert not node.node.in_probation


def test_the_driver_keeps_the_probation_across_restarts(tmp_path):
    async def main():
        directory = str(tmp_path)
        driver = RaftDriver(2, VOTERS, directory, ListStateMachine(), Outbox(), config=CONFIG,
                            lost_state=True)
        await driver.start()
        marker = os.path.join(directory, LOST_STATE_FILE)
        assert os.path.exists(marker) and driver.node.in_probation
        await driver.close()

        # Restarted without the flag (a crash during the probation): still in probation.
        outbox = Outbox()
        again = RaftDriver(2, VOTERS, directory, ListStateMachine(), outbox, config=CONFIG)
        await again.start()
        assert again.node.in_probation
        again.handle(BeginQuorumEpochRequest(src=1, dst=2, leader_id=1, leader_epoch=1))
        deadline = time.monotonic() + 3
        while not any(isinstance(m, FetchRequest) and m.dst == 1 for m in outbox.sent):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        fetch = [m for m in outbox.sent if isinstance(m, FetchRequest) and m.dst == 1][-1]
        again.handle(FetchResponse(src=1, dst=2, leader_id=1, leader_epoch=1, high_watermark=0,
                                   fetch_offset=fetch.fetch_offset,
                                   last_fetched_epoch=fetch.last_fetched_epoch))
        while os.path.exists(marker):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        assert not again.node.in_probation
        assert again.store.load() == QuorumState(1, leader_id=1)
        await again.close()

    asyncio.run(main())


def test_a_voter_restarted_on_a_new_disk_catches_up_over_tcp(tmp_path):
    async def scenario(cluster):
        leader = await cluster.leader()
        offsets = await asyncio.wait_for(
            asyncio.gather(*(leader.driver.propose([b"d%d" % i]) for i in range(30))), 10)
        await cluster.all_applied(offsets[-1])
        lost = next(m for m in cluster.members.values() if m is not leader)
        await cluster.stop(lost.id)
        shutil.rmtree(cluster.directory(lost.id))
        back = await cluster.restart(lost.id, lost_state=True)
        await cluster.all_applied(offsets[-1])
        marker = os.path.join(cluster.directory(lost.id), LOST_STATE_FILE)
        # The driver removes the marker in its I/O thread just after the node leaves probation.
        await cluster.wait_for(lambda: not back.driver.node.in_probation
                               and not os.path.exists(marker), "the probation to end")
        assert back.sm.records == leader.sm.records

    run(scenario, tmp_path)
