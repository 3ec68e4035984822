"""State transitions of RaftNode, driven message by message."""

from dataclasses import replace

from harness import CONFIG, Cluster, Driver, make_log

from moldau.broker.raft.actions import (
    AppendToLog,
    CommitUpTo,
    FlushLog,
    InstallSnapshot,
    PersistState,
    Send,
    SnapshotLog,
    TruncateLog,
)
from moldau.broker.raft.log import LogEntry, OffsetAndEpoch
from moldau.broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    INCONSISTENT_VOTER_SET,
    NOT_LEADER_OR_FOLLOWER,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.node import (
    LeaderChange,
    NotLeader,
    Proposal,
    RaftNode,
    decode_leader_change,
)
from moldau.broker.raft.state import QuorumState, Role

VOTERS = (1, 2, 3)


def vote_request(candidate, epoch, last_epoch, end, dst=1):
    return VoteRequest(src=candidate, dst=dst, candidate_epoch=epoch, candidate_id=candidate,
                       last_offset_epoch=last_epoch, last_offset=end)


def sent(actions):
    return [a.message for a in actions if isinstance(a, Send)]


# -- voting ---------------------------------------------------------------------------------


def test_vote_is_persisted_before_it_is_sent():
    voter = Driver(1, VOTERS, log=make_log([1, 1]), state=QuorumState(1, leader_id=2))
    actions = voter.handle(vote_request(3, 2, 1, 2), now=10)
    # One write holds both the new epoch and the vote, and it comes before the reply.
    assert actions == [
        PersistState(QuorumState(2, voted_for=3)),
        Send(VoteResponse(src=1, dst=3, leader_epoch=2, vote_granted=True)),
    ]
    assert voter.node.role is Role.VOTED


def test_vote_refused_to_a_candidate_with_an_older_last_epoch():
    voter = Driver(1, VOTERS, log=make_log([1, 2]), state=QuorumState(2, leader_id=2))
    # A longer log does not help: the last epoch is compared first.
    actions = voter.handle(vote_request(3, 3, 1, 5), now=10)
    assert actions == [
        PersistState(QuorumState(3)),  # the newer epoch is adopted even though the vote is not
        Send(VoteResponse(src=1, dst=3, leader_epoch=3, vote_granted=False)),
    ]
    assert voter.node.role is Role.UNATTACHED


def test_vote_compares_end_offsets_when_last_epochs_are_equal():
    voter = Driver(1, VOTERS, log=make_log([1, 2, 2]), state=QuorumState(2))
    assert sent(voter.handle(vote_request(2, 3, 2, 2), 10))[0].vote_granted is False
    assert sent(voter.handle(vote_request(3, 3, 2, 3), 10))[0].vote_granted is True


def test_one_vote_per_epoch_even_across_a_restart():
    voter = Driver(1, VOTERS)
    assert sent(voter.handle(vote_request(2, 1, 0, 0), 10))[0].vote_granted
    actions = voter.handle(vote_request(3, 1, 0, 0), 11)
    assert actions == [Send(VoteResponse(src=1, dst=3, leader_epoch=1, vote_granted=False))]
    # The same candidate asking again (a retry) gets the same answer, without a new write.
    assert voter.handle(vote_request(2, 1, 0, 0), 12) == [
        Send(VoteResponse(src=1, dst=2, leader_epoch=1, vote_granted=True))]
    voter.restart(now=20)
    assert voter.node.role is Role.VOTED
    assert not sent(voter.handle(vote_request(3, 1, 0, 0), 21))[0].vote_granted
    assert sent(voter.handle(vote_request(3, 2, 0, 0), 22))[0].vote_granted  # a new epoch


def test_stale_and_foreign_vote_requests_are_refused():
    voter = Driver(1, VOTERS, state=QuorumState(5))
    assert voter.handle(vote_request(2, 4, 9, 9), 10) == [Send(VoteResponse(
        src=1, dst=2, error=FENCED_LEADER_EPOCH, leader_epoch=5))]
    assert sent(voter.handle(vote_request(7, 6, 9, 9), 10))[0].error == INCONSISTENT_VOTER_SET
    assert voter.persisted == QuorumState(5)


# -- elections ------------------------------------------------------------------------------


def test_election_timeout_starts_a_candidacy_that_persists_its_vote_first():
    node = Driver(1, VOTERS, log=make_log([1]), state=QuorumState(1))
    deadline = node.node.next_deadline_ms()
    assert 1000 <= deadline < 2000  # the timeout plus up to as much random jitter
    assert node.tick(deadline - 1) == []
    actions = node.tick(deadline)
    assert actions == [PersistState(QuorumState(2, voted_for=1))] + [
        Send(VoteRequest(src=1, dst=v, candidate_epoch=2, candidate_id=1, last_offset_epoch=1,
                         last_offset=1)) for v in (2, 3)]
    assert node.node.role is Role.CANDIDATE


def test_majority_of_votes_makes_a_leader_that_announces_itself():
    node = Driver(1, VOTERS, log=make_log([1]), state=QuorumState(1))
    now = node.node.next_deadline_ms()
    node.tick(now)
    actions = node.handle(VoteResponse(src=3, dst=1, leader_epoch=2, vote_granted=True), now + 5)
    change = actions[1].entries[0]
    assert change.offset == 1 and change.epoch == 2 and change.control
    assert decode_leader_change(change.payload) == (1, VOTERS)
    # Kafka's LeaderChangeMessage: the voters that elected it are the leader and node 3.
    assert LeaderChange.decode(change.payload) == LeaderChange(1, VOTERS, (1, 3))
    assert actions == [
        PersistState(QuorumState(2, voted_for=1, leader_id=1)),
        AppendToLog((change,)),
        FlushLog(2),
        Send(BeginQuorumEpochRequest(src=1, dst=2, leader_id=1, leader_epoch=2)),
        Send(BeginQuorumEpochRequest(src=1, dst=3, leader_id=1, leader_epoch=2)),
    ]
    assert node.node.role is Role.LEADER and node.node.leader_id == 1


def test_rejected_candidate_backs_off_and_stands_again_in_the_next_epoch():
    node = Driver(1, VOTERS, state=QuorumState(1))
    now = node.node.next_deadline_ms()
    node.tick(now)
    for voter in (2, 3):
        node.handle(VoteResponse(src=voter, dst=1, leader_epoch=2, vote_granted=False), now + 1)
    retry = node.node.next_deadline_ms()
    assert now + 1 < retry <= now + 1 + CONFIG.election_backoff_max_ms
    assert node.tick(retry)[0] == PersistState(QuorumState(3, voted_for=1))


def test_begin_quorum_epoch_makes_followers_that_fetch():
    for state in (QuorumState(2), QuorumState(2, voted_for=3), QuorumState(2, voted_for=2),
                  QuorumState(1, leader_id=3)):
        node = Driver(2, VOTERS, log=make_log([1]), state=state)
        actions = node.handle(BeginQuorumEpochRequest(src=1, dst=2, leader_id=1, leader_epoch=2),
                              now=10)
        voted = state.voted_for if state.epoch == 2 else None
        assert actions[0] == PersistState(QuorumState(2, voted_for=voted, leader_id=1)), state
        assert node.node.role is Role.FOLLOWER and node.node.leader_id == 1
        assert sent(actions) == [
            FetchRequest(src=2, dst=1, replica_id=2, current_leader_epoch=2, fetch_offset=1,
                         last_fetched_epoch=1, max_wait_ms=CONFIG.fetch_max_wait_ms),
            BeginQuorumEpochResponse(src=2, dst=1, leader_id=1, leader_epoch=2),
        ]


def test_restarted_leader_gives_its_epoch_up():
    node = Driver(1, VOTERS, log=make_log([1]), state=QuorumState(1, voted_for=1, leader_id=1))
    assert node.node.role is Role.RESIGNED
    assert sent(node.tick(0)) == [
        EndQuorumEpochRequest(src=1, dst=v, leader_id=1, leader_epoch=1) for v in (2, 3)]
    assert isinstance(node.node.propose([b"x"], 0), NotLeader)


def test_follower_that_hears_nothing_for_the_fetch_timeout_stands():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    cluster.down = {1}
    cluster.run(now, now + CONFIG.fetch_timeout_ms - 1)
    assert {cluster[i].node.role for i in (2, 3)} == {Role.FOLLOWER}
    cluster.run(now, now + CONFIG.fetch_timeout_ms)
    assert Role.CANDIDATE in {cluster[i].node.role for i in (2, 3)}


# -- replication ----------------------------------------------------------------------------


def payloads(driver):
    return [e.payload for e in driver.applied if not e.control]


def test_proposals_replicate_and_commit_everywhere():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    assert isinstance(cluster[2].node.propose([b"x"], now), NotLeader)
    proposal = cluster[1].propose([b"a", b"b"], now)
    assert isinstance(proposal, Proposal) and (proposal.base_offset, proposal.last_offset) == (1, 2)
    cluster.run(now, now + 100)
    for i in VOTERS:
        assert payloads(cluster[i]) == [b"a", b"b"]
        assert cluster[i].node.high_watermark == 3


def test_followers_truncate_diverging_suffixes_over_several_rounds():
    # Node 2 holds entries of epochs 2 and 4 that the new leader never had; two rounds of
    # diverging epochs bring it back to the common prefix at offset 1.
    logs = {1: make_log([1, 1, 1, 3]), 2: make_log([1, 2, 2, 4]), 3: make_log([1])}
    states = {1: QuorumState(4, voted_for=2), 2: QuorumState(4, leader_id=2),
              3: QuorumState(4)}
    cluster = Cluster(logs=logs, states=states)
    cluster.elect(1, 0)
    assert cluster[1].node.epoch == 5
    truncations = [a for a in cluster[2].history if isinstance(a, TruncateLog)]
    assert truncations == [TruncateLog(3), TruncateLog(1)]
    diverging = [a.message.diverging_epoch for a in cluster[1].history
                 if isinstance(a, Send) and isinstance(a.message, FetchResponse)
                 and a.message.diverging_epoch is not None]
    assert diverging == [OffsetAndEpoch(4, 3), OffsetAndEpoch(3, 1)]
    leader_entries = cluster[1].log.read(0, 100)
    assert cluster[2].log.read(0, 100) == leader_entries
    assert [e.epoch for e in leader_entries] == [1, 1, 1, 3, 5]
    assert cluster[2].node.high_watermark == 5


def test_high_watermark_waits_for_an_entry_of_the_current_epoch():
    class CountsOldEpochs(RaftNode):
        """Counts replicas of older epochs' entries: what Raft forbids."""

        def _high_watermark_candidate(self, st):
            ends = sorted([self._flushed_end] + [r.end_offset for r in st.replicas.values()])
            return ends[-self._majority]

    def first_commit(node_class):
        # Offsets 0-2 are on a majority once node 2 fetches them, one entry per fetch, but
        # offset 2 (epoch 2) is not committed until the new leader's entry at 3 is.
        config = replace(CONFIG, fetch_max_entries=1)
        logs = {1: make_log([1, 1, 2]), 2: make_log([1, 1]), 3: make_log([1, 1])}
        states = {i: QuorumState(2) for i in VOTERS}
        cluster = Cluster(logs=logs, states=states, config=config)
        for driver in cluster.drivers.values():
            driver.node_class = node_class
            driver.restart()
        cluster.down = {3}
        cluster.elect(1, 0)
        assert cluster[1].node.epoch == 3
        reported = [m.fetch_offset for m in (a.message for a in cluster[2].history
                                             if isinstance(a, Send))
                    if isinstance(m, FetchRequest)]
        assert reported[:3] == [2, 3, 4]
        return [a.offset for a in cluster[1].history if isinstance(a, CommitUpTo)][0]

    assert first_commit(RaftNode) == 4
    assert first_commit(CountsOldEpochs) == 2  # offsets 0-1 of epoch 1, at node 2's first fetch


def test_leader_counts_only_its_flushed_entries():
    cluster = Cluster()
    cluster.down = {3}
    now = cluster.elect(1, 0)
    assert cluster[1].node.high_watermark == 1
    cluster[1].propose([b"a"], now)
    # The held fetch of node 2 gets the entry at once; the leader's fsync waits for the linger.
    cluster[1].tick(now)
    cluster.deliver(now)
    assert cluster[2].log.end_offset == 2 and cluster[2].flushed_end == 2
    assert cluster[1].node.high_watermark == 1
    assert cluster[1].node.next_deadline_ms() == now + CONFIG.append_linger_ms
    actions = cluster[1].tick(now + CONFIG.append_linger_ms)
    assert actions[:2] == [FlushLog(2), CommitUpTo(2)]


def test_duplicate_and_stale_fetch_responses_are_ignored():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    cluster[1].propose([b"a"], now)
    cluster[1].tick(now)
    response = [m for m in cluster[1].outbox if isinstance(m, FetchResponse) and m.dst == 2][0]
    cluster.run(now, now + 100)
    before = cluster[2].log.read(0, 100)
    assert cluster[2].handle(response, now + 100) == []
    assert cluster[2].log.read(0, 100) == before


def test_leader_rejects_fetches_from_other_epochs():
    cluster = Cluster()
    now = cluster.elect(1, 0)

    def fetch(epoch):
        request = FetchRequest(src=2, dst=1, replica_id=2, current_leader_epoch=epoch,
                               fetch_offset=0, last_fetched_epoch=0)
        return sent(cluster[1].handle(request, now))[0]

    assert (fetch(0).error, fetch(0).leader_id, fetch(0).leader_epoch) == (
        FENCED_LEADER_EPOCH, 1, 1)
    assert fetch(2).error == UNKNOWN_LEADER_EPOCH
    assert sent(cluster[2].handle(FetchRequest(
        src=3, dst=2, replica_id=3, current_leader_epoch=1, fetch_offset=0,
        last_fetched_epoch=0), now))[0].error == NOT_LEADER_OR_FOLLOWER


def test_follower_learns_a_newer_epoch_from_a_fenced_fetch():
    follower = Driver(2, VOTERS, state=QuorumState(1, leader_id=1))
    actions = follower.handle(FetchResponse(
        src=1, dst=2, error=FENCED_LEADER_EPOCH, leader_id=3, leader_epoch=4,
        fetch_offset=0, last_fetched_epoch=0), 10)
    assert actions[0] == PersistState(QuorumState(4, leader_id=3))
    assert sent(actions)[0].dst == 3


# -- snapshots ------------------------------------------------------------------------------


def test_snapshot_of_the_committed_prefix_and_its_transfer_to_a_far_behind_follower():
    config = replace(CONFIG, snapshot_max_entries=3, snapshot_chunk_bytes=4)
    cluster = Cluster(config=config)
    cluster.down = {3}
    now = cluster.elect(1, 0)
    cluster[1].propose([b"v%d" % i for i in range(6)], now)
    now = cluster.run(now, now + 100)
    assert SnapshotLog(OffsetAndEpoch(7, 1)) in cluster[1].history
    assert cluster[1].log.log_start_offset == 7 and cluster[1].log.entry_count == 0
    assert cluster[2].log.log_start_offset == 7  # followers snapshot their own logs too

    # Node 3 comes back with an empty log, below the leader's log start.
    cluster.down = set()
    cluster[3].restart(now)
    now = cluster.run(now, now + 2000)
    driver = cluster[3]
    requests = [a.message for a in driver.history
                if isinstance(a, Send) and isinstance(a.message, FetchSnapshotRequest)]
    assert [r.position for r in requests] == [0, 4]  # b"state@7" in chunks of 4 bytes
    installs = [a for a in driver.history if isinstance(a, InstallSnapshot)]
    assert [(i.snapshot.snapshot_id, i.snapshot.data) for i in installs] == [
        (OffsetAndEpoch(7, 1), b"state@7")]
    assert driver.log.log_start_offset == 7 and driver.node.high_watermark == 7

    cluster[1].propose([b"after"], now)
    cluster.run(now, now + 100)
    assert payloads(driver) == [b"after"]


def test_leader_keeps_a_snapshot_that_a_follower_is_downloading():
    config = replace(CONFIG, snapshot_max_entries=1)
    cluster = Cluster(config=config)
    cluster.down = {3}
    now = cluster.elect(1, 0)
    cluster[1].propose([b"a", b"b", b"c"], now)
    now = cluster.run(now, now + 100)
    snapshot_id = cluster[1].log.latest_snapshot.snapshot_id
    request = FetchSnapshotRequest(src=3, dst=1, replica_id=3, current_leader_epoch=1,
                                   snapshot_id=snapshot_id, position=0, max_bytes=2)
    assert sent(cluster[1].handle(request, now))[0].data == b"st"
    cluster[1].propose([b"d", b"e", b"f"], now)
    now = cluster.run(now, now + 100)
    assert cluster[1].log.latest_snapshot.snapshot_id == snapshot_id  # pinned meanwhile
    # A snapshot is due but held back; other work is not.
    cluster[1].propose([b"g"], now)
    now = cluster.run(now, now + 100)
    assert cluster[1].log.latest_snapshot.snapshot_id == snapshot_id
    assert payloads(cluster[2])[-4:] == [b"d", b"e", b"f", b"g"]
    now = cluster.run(now, now + CONFIG.request_timeout_ms)
    assert cluster[1].log.latest_snapshot.snapshot_id.offset == 8
    stale = sent(cluster[1].handle(replace(request, position=2), now))[0]
    assert isinstance(stale, FetchSnapshotResponse) and stale.error == SNAPSHOT_NOT_FOUND


# -- handing over ---------------------------------------------------------------------------


def test_resign_hands_leadership_to_the_caught_up_voter():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    cluster.down = {3}
    cluster[1].propose([b"a", b"b"], now)
    now = cluster.run(now, now + 100)
    assert (cluster[2].log.end_offset, cluster[3].log.end_offset) == (3, 1)
    cluster.down = set()

    cluster[1].run(cluster[1].node.resign(now))
    assert cluster[1].node.role is Role.RESIGNED
    ends = [m for m in cluster[1].outbox if isinstance(m, EndQuorumEpochRequest)]
    assert [(m.dst, m.preferred_successors) for m in ends] == [(2, (2, 3)), (3, (2, 3))]
    assert isinstance(cluster[1].node.propose([b"c"], now), NotLeader)

    now = cluster.run(now, now + 10)  # the first successor stands at once
    assert cluster[2].node.role is Role.LEADER and cluster[2].node.epoch == 2
    assert cluster[1].node.leader_id == 2 and cluster[3].node.leader_id == 2
    cluster[2].propose([b"c"], now)
    cluster.run(now, now + 100)
    for i in VOTERS:
        assert payloads(cluster[i]) == [b"a", b"b", b"c"]


def test_leader_cut_off_from_a_majority_resigns():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    cluster.down = {2, 3}
    cluster.run(now, now + CONFIG.fetch_timeout_ms - 1)
    assert cluster[1].node.role is Role.LEADER
    cluster.run(now, now + CONFIG.fetch_timeout_ms)
    assert cluster[1].node.role is Role.RESIGNED
    assert {m.dst for m in sent(cluster[1].history) if isinstance(m, EndQuorumEpochRequest)} == {
        2, 3}
    assert isinstance(cluster[1].node.propose([b"x"], now), NotLeader)


def test_leader_with_a_fetching_majority_stays():
    cluster = Cluster()
    now = cluster.elect(1, 0)
    cluster.down = {3}
    cluster.run(now, now + 3 * CONFIG.fetch_timeout_ms)
    assert cluster[1].node.role is Role.LEADER and cluster[1].node.epoch == 1


def test_log_entries_of_the_leader_are_what_followers_hold():
    cluster = Cluster(5)
    now = cluster.elect(3, 0)
    for i in range(5):
        cluster[3].propose([b"p%d" % i], now + i)
        now = cluster.run(now + i, now + i + 30)
    entries = cluster[3].log.read(0, 100)
    assert [e.payload for e in entries if not e.control] == [b"p%d" % i for i in range(5)]
    for i in range(1, 6):
        assert cluster[i].log.read(0, 100) == entries
        assert cluster[i].applied == list(entries)
    assert entries[0] == LogEntry(0, 1, entries[0].payload, True)


# -- LeaderChange records -------------------------------------------------------------------


def test_leader_change_is_kafkas_leader_change_message():
    change = LeaderChange(2, (1, 2, 3), (2, 3))
    # LeaderChangeMessage v0 is flexible: version int16, LeaderId int32, then Voters and
    # GrantingVoters as compact arrays (length + 1) of VoterId int32 with empty tagged fields,
    # then the message's empty tagged fields.
    expected = (b"\x00\x00" + b"\x00\x00\x00\x02"
                + b"\x04" + b"".join(b"\x00\x00\x00" + bytes([v]) + b"\x00" for v in (1, 2, 3))
                + b"\x03" + b"".join(b"\x00\x00\x00" + bytes([v]) + b"\x00" for v in (2, 3))
                + b"\x00")
    assert change.encode() == expected
    assert LeaderChange.decode(expected) == change
    assert decode_leader_change(expected) == (2, (1, 2, 3))


def test_leader_change_message_version_1_is_read_too():
    import io

    from kio.schema.leader_change_message.v1.data import LeaderChangeMessage, Voter
    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32

    message = LeaderChangeMessage(
        version=i16(1), leader_id=i32(3),
        voters=tuple(Voter(voter_id=i32(v), voter_directory_id=None) for v in (1, 2, 3)),
        granting_voters=(Voter(voter_id=i32(3), voter_directory_id=None),))
    out = io.BytesIO()
    entity_writer(LeaderChangeMessage)(out, message)
    assert LeaderChange.decode(out.getvalue()) == LeaderChange(3, (1, 2, 3), (3,))


def test_leader_change_of_a_single_voter_and_malformed_payloads():
    node = Driver(1, (1,))
    actions = node.tick(node.node.next_deadline_ms())
    (append,) = [a for a in actions if isinstance(a, AppendToLog)]
    assert LeaderChange.decode(append.entries[0].payload) == LeaderChange(1, (1,), (1,))
    for bad in (b"", b"\x00", b"\x00\x07" + bytes(8), LeaderChange(1, (1,), (1,)).encode() + b"x",
                LeaderChange(1, (1,), (1,)).encode()[:-2]):
        try:
            LeaderChange.decode(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} decoded")
