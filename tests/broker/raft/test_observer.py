"""Observers (KIP-595): nodes outside the voters that replicate the log but never vote."""

from dataclasses import replace

from harness import CONFIG, Cluster, Driver, make_log

from moldau.broker.raft import wire
from moldau.broker.raft.actions import InstallSnapshot, PersistState, Send, TruncateLog
from moldau.broker.raft.log import OffsetAndEpoch
from moldau.broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    INCONSISTENT_VOTER_SET,
    NO_LEADER,
    NOT_LEADER_OR_FOLLOWER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.node import NotLeader
from moldau.broker.raft.state import LeaderState, QuorumState, Role, UnattachedState

VOTERS = (1, 2, 3)
OBSERVER = 4


def sent(actions):
    return [a.message for a in actions if isinstance(a, Send)]


def payloads(driver):
    return [e.payload for e in driver.applied if not e.control]


def follower_fetch(dst, epoch, offset=0, last_epoch=0):
    return FetchRequest(src=OBSERVER, dst=dst, replica_id=OBSERVER, current_leader_epoch=epoch,
                        fetch_offset=offset, last_fetched_epoch=last_epoch,
                        max_wait_ms=CONFIG.fetch_max_wait_ms)


# -- finding the leader ---------------------------------------------------------------------


def test_an_observer_asks_a_random_voter_and_follows_the_leader_it_names():
    observer = Driver(OBSERVER, VOTERS)
    assert observer.node.is_observer and observer.node.role is Role.UNATTACHED
    (fetch,) = sent(observer.tick(0))
    # A bootstrap fetch: to some voter, at our log end, answered at once.
    assert isinstance(fetch, FetchRequest) and fetch.dst in VOTERS
    assert (fetch.replica_id, fetch.current_leader_epoch, fetch.fetch_offset,
            fetch.max_wait_ms) == (OBSERVER, 0, 0, 0)
    assert observer.node.next_deadline_ms() == CONFIG.request_timeout_ms  # resent if lost

    # The voter is in a newer epoch, led by node 2.
    actions = observer.handle(FetchResponse(
        src=fetch.dst, dst=OBSERVER, error=FENCED_LEADER_EPOCH, leader_id=2, leader_epoch=3,
        fetch_offset=0, last_fetched_epoch=0), 5)
    assert actions == [PersistState(QuorumState(3, leader_id=2)), Send(follower_fetch(2, 3))]
    assert observer.node.role is Role.FOLLOWER and observer.node.leader_id == 2


def test_a_voter_that_knows_no_leader_makes_the_observer_ask_again_soon():
    observer = Driver(OBSERVER, VOTERS, state=QuorumState(3))
    (fetch,) = sent(observer.tick(0))
    assert fetch.current_leader_epoch == 3
    assert observer.handle(FetchResponse(
        src=fetch.dst, dst=OBSERVER, error=NOT_LEADER_OR_FOLLOWER, leader_id=NO_LEADER,
        leader_epoch=3, fetch_offset=0, last_fetched_epoch=0), 5) == []
    retry = observer.node.next_deadline_ms()
    assert retry == 5 + CONFIG.retry_backoff_ms
    (again,) = sent(observer.tick(retry))
    assert again.max_wait_ms == 0
    # A follower of the leader names it in its NOT_LEADER_OR_FOLLOWER answer.
    actions = observer.handle(FetchResponse(
        src=again.dst, dst=OBSERVER, error=NOT_LEADER_OR_FOLLOWER, leader_id=1,
        leader_epoch=3, fetch_offset=0, last_fetched_epoch=0), retry + 5)
    assert actions == [PersistState(QuorumState(3, leader_id=1)), Send(follower_fetch(1, 3))]


def test_an_observer_that_hears_nothing_from_its_leader_asks_the_voters_again():
    observer = Driver(OBSERVER, VOTERS, log=make_log([1]), state=QuorumState(2, leader_id=1))
    assert sent(observer.tick(0)) == [follower_fetch(1, 2, 1, 1)]
    actions = observer.tick(CONFIG.fetch_timeout_ms)
    (fetch,) = sent(actions)
    assert actions[0] == PersistState(QuorumState(2))  # the leader is forgotten, not the epoch
    assert fetch.max_wait_ms == 0 and fetch.current_leader_epoch == 2
    assert observer.node.role is Role.UNATTACHED and observer.node.epoch == 2


def test_an_observer_whose_leader_gave_up_asks_the_voters_after_a_backoff():
    observer = Driver(OBSERVER, VOTERS, state=QuorumState(2, leader_id=1))
    observer.tick(0)
    not_leader = FetchResponse(src=1, dst=OBSERVER, error=NOT_LEADER_OR_FOLLOWER,
                               leader_epoch=2, fetch_offset=0, last_fetched_epoch=0)
    assert observer.handle(not_leader, 10) == []
    deadline = observer.node.next_deadline_ms()
    assert deadline == 10 + CONFIG.election_backoff_max_ms
    # It could be a late answer to a fetch from before node 1 led: a successful answer from
    # node 1 meanwhile keeps the observer following it.
    ok = FetchResponse(src=1, dst=OBSERVER, leader_id=1, leader_epoch=2, high_watermark=0,
                       fetch_offset=0, last_fetched_epoch=0)
    assert sent(observer.handle(ok, 20)) == [follower_fetch(1, 2)]
    assert observer.node.state.fetch_deadline == 20 + CONFIG.fetch_timeout_ms

    assert observer.handle(not_leader, 30) == []
    (fetch,) = sent(observer.tick(30 + CONFIG.election_backoff_max_ms))
    assert fetch.max_wait_ms == 0 and observer.node.role is Role.UNATTACHED


def test_an_observer_never_votes_and_only_learns_the_leader_from_begin_quorum_epoch():
    observer = Driver(OBSERVER, VOTERS, state=QuorumState(2, leader_id=1))
    vote = VoteRequest(src=2, dst=OBSERVER, candidate_epoch=3, candidate_id=2,
                       last_offset_epoch=5, last_offset=9)
    # Refused, and the candidate's epoch is not adopted: it may never win.
    assert observer.handle(vote, 10) == [Send(VoteResponse(
        src=OBSERVER, dst=2, error=INCONSISTENT_VOTER_SET, leader_id=1, leader_epoch=2))]
    assert observer.persisted == QuorumState(2, leader_id=1)

    fresh = Driver(OBSERVER, VOTERS)
    actions = fresh.handle(BeginQuorumEpochRequest(src=3, dst=OBSERVER, leader_id=3,
                                                   leader_epoch=4), 10)
    assert actions == [
        PersistState(QuorumState(4, leader_id=3)),
        Send(follower_fetch(3, 4)),
        Send(BeginQuorumEpochResponse(src=OBSERVER, dst=3, error=INCONSISTENT_VOTER_SET,
                                      leader_id=3, leader_epoch=4)),
    ]
    actions = fresh.handle(EndQuorumEpochRequest(src=3, dst=OBSERVER, leader_id=3,
                                                 leader_epoch=4, preferred_successors=(1,)), 20)
    assert sent(actions) == [EndQuorumEpochResponse(
        src=OBSERVER, dst=3, error=INCONSISTENT_VOTER_SET, leader_id=3, leader_epoch=4)]
    # It asks the voters who leads after the backoff.
    assert fresh.node.state.fetch_deadline == 20 + CONFIG.election_backoff_max_ms
    assert isinstance(fresh.node.propose([b"x"], 20), NotLeader)


def test_voters_refuse_a_candidacy_from_an_observer():
    voter = Driver(1, VOTERS, state=QuorumState(2))
    (answer,) = sent(voter.handle(VoteRequest(
        src=OBSERVER, dst=1, candidate_epoch=3, candidate_id=OBSERVER, last_offset_epoch=9,
        last_offset=9), 10))
    assert answer.error == INCONSISTENT_VOTER_SET and not answer.vote_granted
    assert voter.persisted == QuorumState(2)


# -- the leader's side ----------------------------------------------------------------------


def test_observers_replicate_but_do_not_count_for_the_high_watermark():
    cluster = Cluster(3, observers=1)
    now = cluster.elect(1, 0)
    now = cluster.run(now, now + 50)
    observer = cluster[OBSERVER]
    assert observer.node.role is Role.FOLLOWER and observer.node.leader_id == 1
    cluster[1].propose([b"a"], now)
    now = cluster.run(now, now + 100)
    assert payloads(observer) == [b"a"] and observer.node.high_watermark == 2

    # With both other voters away, the observer holds the new entry but it does not commit.
    cluster.down = {2, 3}
    cluster[1].propose([b"b"], now)
    now = cluster.run(now, now + 100)
    assert observer.log.end_offset == cluster[1].log.end_offset == 3
    assert cluster[1].node.high_watermark == 2
    assert payloads(observer) == [b"a"]
    leader_state = cluster[1].node.state
    assert isinstance(leader_state, LeaderState)
    assert leader_state.observers[OBSERVER].end_offset == 3
    assert OBSERVER not in leader_state.replicas and OBSERVER not in leader_state.fetched
    assert OBSERVER in leader_state.parked  # observers' fetches are long polls too
    # Check-quorum does not count the observer either.
    now = cluster.run(now, now + CONFIG.fetch_timeout_ms)
    assert cluster[1].node.role is Role.RESIGNED

    cluster.down = set()
    now = cluster.run(now, now + 5 * CONFIG.fetch_timeout_ms)
    leaders = [i for i in VOTERS if cluster[i].node.role is Role.LEADER]
    assert len(leaders) == 1 and observer.node.leader_id == leaders[0]
    assert observer.node.epoch == cluster[leaders[0]].node.epoch
    # "b" was never committed: a new leader without it makes the observer drop it as well.
    leader = cluster[leaders[0]]
    leader.propose([b"c"], now)
    cluster.run(now, now + 100)
    assert observer.log.read(0, 100) == leader.log.read(0, 100)
    assert payloads(observer) == payloads(leader)
    assert payloads(observer) in ([b"a", b"c"], [b"a", b"b", b"c"])
    assert not any(isinstance(m, VoteRequest) for m in sent(observer.history))


def test_an_observer_follows_the_next_leader_when_the_leader_dies():
    cluster = Cluster(3, observers=2)
    now = cluster.elect(1, 0)
    cluster[1].propose([b"a"], now)
    now = cluster.run(now, now + 100)
    cluster.down = {1}
    now = cluster.run(now, now + 5 * CONFIG.fetch_timeout_ms)
    (leader,) = [i for i in (2, 3) if cluster[i].node.role is Role.LEADER]
    cluster[leader].propose([b"b"], now)
    now = cluster.run(now, now + 100)
    for observer in cluster.observers:
        node = cluster[observer].node
        assert node.role is Role.FOLLOWER and node.leader_id == leader
        assert payloads(cluster[observer]) == [b"a", b"b"]
        assert all(a.state.voted_for is None for a in cluster[observer].history
                   if isinstance(a, PersistState))
    info = wire.quorum_info(cluster[leader].node, now_ms=now, wall_offset_ms=1000)
    assert [o.replica_id for o in info.observers] == list(cluster.observers)
    assert all(o.log_end_offset == cluster[leader].log.end_offset for o in info.observers)
    assert all(o.last_fetch_timestamp > 1000 for o in info.observers)
    assert [v.replica_id for v in info.voters] == list(VOTERS)


def test_observers_truncate_diverging_suffixes_and_load_snapshots():
    config = replace(CONFIG, snapshot_max_entries=5, snapshot_chunk_bytes=4)
    # Observer 4 holds entries of epochs 2 and 4 that the new leader never had.
    logs = {1: make_log([1, 1, 1, 3]), 2: make_log([1, 1, 1, 3]), 3: make_log([1]),
            4: make_log([1, 2, 2, 4])}
    states = {1: QuorumState(4), 2: QuorumState(4), 3: QuorumState(4), 4: QuorumState(4)}
    cluster = Cluster(3, observers=2, logs=logs, states=states, config=config)
    cluster.down = {5}
    now = cluster.elect(1, 0)
    now = cluster.run(now, now + 50)
    assert [a for a in cluster[4].history if isinstance(a, TruncateLog)] == [
        TruncateLog(3), TruncateLog(1)]
    assert cluster[4].log.read(0, 100) == cluster[1].log.read(0, 100)

    cluster[1].propose([b"v%d" % i for i in range(6)], now)
    now = cluster.run(now, now + 100)
    start = cluster[1].log.log_start_offset
    assert start > 0
    # Observer 5 starts with nothing, below the leader's log start.
    cluster.down = set()
    now = cluster.run(now, now + 2000)
    late = cluster[5]
    assert any(isinstance(m, FetchSnapshotRequest) for m in sent(late.history))
    (install,) = [a for a in late.history if isinstance(a, InstallSnapshot)]
    assert install.snapshot.snapshot_id == OffsetAndEpoch(start, 5)
    cluster[1].propose([b"after"], now)
    cluster.run(now, now + 100)
    assert payloads(late) == [b"after"]
    assert late.log.end_offset == cluster[1].log.end_offset


def test_the_leader_forgets_observers_that_stopped_fetching():
    config = replace(CONFIG, observer_session_timeout_ms=3000)
    cluster = Cluster(3, observers=1, config=config)
    now = cluster.elect(1, 0)
    now = cluster.run(now, now + 50)
    assert set(cluster[1].node.state.observers) == {OBSERVER}
    cluster.down = {OBSERVER}
    now = cluster.run(now, now + 2000)
    assert set(cluster[1].node.state.observers) == {OBSERVER}
    now = cluster.run(now, now + 2000)
    assert cluster[1].node.state.observers == {}
    assert wire.quorum_info(cluster[1].node, now_ms=now, wall_offset_ms=0).observers == ()


def test_an_observer_restarts_following_the_leader_it_persisted():
    observer = Driver(OBSERVER, VOTERS, log=make_log([1, 1]),
                      state=QuorumState(1, voted_for=3, leader_id=3))
    assert observer.node.role is Role.FOLLOWER and observer.node.leader_id == 3
    assert sent(observer.tick(0)) == [follower_fetch(3, 1, 2, 1)]
    # Once a voter that led (this node's id left the voters): it does not resume leading.
    former = Driver(OBSERVER, VOTERS, log=make_log([1]),
                    state=QuorumState(1, voted_for=OBSERVER, leader_id=OBSERVER))
    assert isinstance(former.node.state, UnattachedState)
    assert former.node.state.bootstrap_fetch_at == 0
