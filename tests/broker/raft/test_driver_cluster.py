"""Three RaftDrivers on loopback TCP with real directories: election, replication, fail-over,
catch-up with truncation, snapshots, resignation, observers and DescribeQuorum."""

import asyncio
import json
import os
import struct
import time

import pytest

from moldau.broker.raft import wire
from moldau.broker.raft.disk_log import DiskRaftLog
from moldau.broker.raft.driver import NotLeaderError, ProposalFailed, RaftDriver
from moldau.broker.raft.messages import (
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.state import RaftConfig, Role
from moldau.broker.raft.tcp_transport import TcpTransport
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import encode_request, request_class

pytestmark = pytest.mark.timeout(60)

# Short enough for quick fail-overs, long enough that a node starved of CPU for a moment on
# a busy machine does not start an election the test did not ask for.
CONFIG = RaftConfig(election_timeout_ms=300, fetch_timeout_ms=1500, election_backoff_max_ms=300,
                    request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=100,
                    append_linger_ms=5)
VOTERS = (1, 2, 3)


class ListStateMachine:
    """Remembers every applied record; its snapshot is the whole list."""

    def __init__(self):
        self.records = []
        self.loads = 0

    def apply(self, offset, payload):
        assert not self.records or offset > self.records[-1][0]
        self.records.append((offset, payload))

    def snapshot(self):
        return json.dumps([[o, p.hex()] for o, p in self.records]).encode()

    def load(self, data):
        self.loads += 1
        self.records = [(o, bytes.fromhex(p)) for o, p in json.loads(data)]


class Gate:
    """A transport that can be told to drop everything the node sends."""

    def __init__(self, inner):
        self.inner = inner
        self.open = True

    def send(self, message):
        if self.open:
            self.inner.send(message)


LOWEST_VERSIONS = {key: low for key, (low, _high) in wire.SUPPORTED_VERSIONS.items()}


class Member:
    def __init__(self, node_id, directory, config, port, versions=None, lost_state=False):
        self.id = node_id
        self.observer = node_id not in VOTERS
        self.sm = ListStateMachine()
        self.transport = TcpTransport(node_id, port=port,
                                      request_timeout_ms=config.request_timeout_ms,
                                      reconnect_backoff_max_ms=200, versions=versions,
                                      cluster_id="test-cluster")
        self.gate = Gate(self.transport)
        self.driver = RaftDriver(node_id, VOTERS, directory, self.sm, self.gate, config=config,
                                 lost_state=lost_state)
        self.transport.describe_quorum = self.driver.describe_quorum


class LoopbackCluster:
    def __init__(self, base, config=CONFIG, versions=None, observers=()):
        self.base = str(base)
        self.config = config
        self.versions = versions
        self.observers = tuple(observers)
        self.members = {}
        self.ports = {}

    def directory(self, node_id):
        return os.path.join(self.base, f"node{node_id}", "__cluster_metadata-0")

    async def start(self):
        for node_id in VOTERS + self.observers:
            member = Member(node_id, self.directory(node_id), self.config, 0, self.versions)
            if member.observer:
                # A broker-only node need not listen: it only sends requests, and answers
                # come back on its own connections.
                member.transport.handler = member.driver.handle
            else:
                await member.transport.start(member.driver.handle)
                self.ports[node_id] = member.transport.port
            self.members[node_id] = member
        for member in self.members.values():
            # Every node, observers included, only knows the voters' addresses.
            for node_id in VOTERS:
                member.transport.set_peer(node_id, "127.0.0.1", self.ports[node_id])
            await member.driver.start()

    async def stop(self, node_id):
        member = self.members.pop(node_id)
        await member.transport.close()
        await member.driver.close()
        return member

    async def restart(self, node_id, config=None, lost_state=False):
        member = Member(node_id, self.directory(node_id), config or self.config,
                        self.ports[node_id], self.versions, lost_state)
        for peer in VOTERS:
            member.transport.set_peer(peer, "127.0.0.1", self.ports[peer])
        await member.transport.start(member.driver.handle)
        await member.driver.start()
        self.members[node_id] = member
        return member

    async def close(self):
        for node_id in list(self.members):
            await self.stop(node_id)

    async def wait_for(self, predicate, what, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            for member in self.members.values():
                assert member.driver.failure is None, member.driver.failure
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.005)

    async def leader(self, exclude=()):
        found = []

        def one_leader():
            leaders = [m for m in self.members.values()
                       if m.driver.role is Role.LEADER and m.id not in exclude]
            found[:] = leaders
            return len(leaders) == 1

        await self.wait_for(one_leader, "a leader")
        return found[0]

    async def all_applied(self, offset):
        await self.wait_for(
            lambda: all(m.driver.applied_offset > offset for m in self.members.values()),
            f"every node to apply offset {offset}")


def run(scenario, tmp_path, config=CONFIG, versions=None, observers=()):
    async def main():
        cluster = LoopbackCluster(tmp_path, config, versions, observers)
        try:
            await cluster.start()
            await scenario(cluster)
        finally:
            await cluster.close()

    asyncio.run(main())


async def describe_over_tcp(port, version=2):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_request(wire.ApiKey.DESCRIBE_QUORUM, version, 9, "admin",
                                    wire.describe_quorum_request(version)))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        frame = await reader.readexactly(size)
    finally:
        writer.close()
    correlation_id, body = wire.parse_response_frame(wire.ApiKey.DESCRIBE_QUORUM, version, frame)
    assert correlation_id == 9
    return wire.quorum_info_from_wire(body)


def test_elect_replicate_fail_over_and_catch_up(tmp_path):
    async def scenario(cluster):
        leader = await cluster.leader()
        first_epoch = leader.driver.epoch
        payloads = [b"r%03d" % i for i in range(200)]
        offsets = await asyncio.wait_for(
            asyncio.gather(*(leader.driver.propose([p]) for p in payloads)), 10)
        assert offsets == sorted(set(offsets))
        await cluster.all_applied(offsets[-1])
        committed = leader.sm.records
        assert [p for _, p in committed] == payloads
        assert [o for o, _ in committed] == offsets
        for member in cluster.members.values():
            assert member.sm.records == committed

        follower = next(m for m in cluster.members.values() if m is not leader)
        with pytest.raises(NotLeaderError) as refused:
            await follower.driver.propose([b"nope"])
        assert refused.value.leader_id == leader.id

        # Cut the leader off; what it appends now stays on its disk only, uncommitted.
        leader.gate.open = False
        doomed = [asyncio.ensure_future(leader.driver.propose([b"doomed%d" % i]))
                  for i in range(5)]
        end = offsets[-1] + 1
        await cluster.wait_for(lambda: leader.driver.log.end_offset == end + 5,
                               "the isolated leader to append")
        old = await cluster.stop(leader.id)
        for future in doomed:
            with pytest.raises(ProposalFailed):
                await future
        with DiskRaftLog(cluster.directory(old.id)) as on_disk:
            assert [e.payload for e in on_disk.read(end, 10)] == [b"doomed%d" % i
                                                                  for i in range(5)]

        new = await cluster.leader()
        assert new.id != old.id
        assert new.driver.epoch > first_epoch
        assert new.sm.records == committed  # committed entries survive the fail-over
        more = await asyncio.wait_for(
            asyncio.gather(*(new.driver.propose([b"m%d" % i]) for i in range(10))), 5)
        await cluster.all_applied(more[-1])

        # The old leader comes back from its directories: it must drop its divergent suffix.
        back = await cluster.restart(old.id)
        await cluster.all_applied(more[-1])
        expected = committed + [(o, b"m%d" % i) for i, o in enumerate(more)]
        for member in cluster.members.values():
            assert member.sm.records == expected
        assert back.driver.log.epoch_at(end) == new.driver.epoch
        assert not any(b"doomed" in e.payload
                       for e in back.driver.log.read(0, back.driver.log.end_offset))

        def all_caught_up(info):
            return (info.leader_id == new.id and len(info.voters) == 3 and all(
                v.log_end_offset == new.driver.log.end_offset and v.last_caught_up_timestamp > 0
                for v in info.voters))

        deadline = time.monotonic() + 5
        while True:
            info = await describe_over_tcp(cluster.ports[new.id])
            if all_caught_up(info) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        assert all_caught_up(info), info
        assert info.leader_epoch == new.driver.epoch
        assert info.high_watermark == new.driver.high_watermark
        assert sorted(v.replica_id for v in info.voters) == [1, 2, 3]
        # A follower knows who leads but not the voters' positions.
        other = next(m for m in cluster.members.values() if m is not new)
        from_follower = await describe_over_tcp(cluster.ports[other.id], version=1)
        assert from_follower.error == ErrorCode.not_leader_or_follower
        assert from_follower.leader_id == new.id

    run(scenario, tmp_path)


@pytest.mark.parametrize("versions", [None, LOWEST_VERSIONS], ids=["highest", "lowest"])
def test_resign_hands_leadership_to_another_voter(tmp_path, versions):
    async def scenario(cluster):
        leader = await cluster.leader()
        offset = await asyncio.wait_for(leader.driver.propose([b"before"]), 5)
        await cluster.all_applied(offset)
        epoch = leader.driver.epoch
        await leader.driver.resign()
        successor = await cluster.leader(exclude={leader.id})
        assert successor.driver.epoch > epoch
        after = await asyncio.wait_for(successor.driver.propose([b"after"]), 5)
        await cluster.all_applied(after)
        # The quorum state on disk records the new epoch and leader (written before the
        # new leader's first entry, so certainly by the time that entry is committed).
        state = successor.driver.store.load()
        assert (state.epoch, state.leader_id) == (successor.driver.epoch, successor.id)
        for member in cluster.members.values():
            assert [p for _, p in member.sm.records] == [b"before", b"after"]
            assert member.driver.leader_id == successor.id

    run(scenario, tmp_path, versions=versions)


def test_lagging_node_installs_a_snapshot(tmp_path):
    config = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=400,
                        election_backoff_max_ms=150, request_timeout_ms=300,
                        retry_backoff_ms=20, fetch_max_wait_ms=100, append_linger_ms=5,
                        snapshot_max_entries=20, snapshot_chunk_bytes=300)

    async def scenario(cluster):
        leader = await cluster.leader()
        lagging = next(m for m in cluster.members.values() if m is not leader)
        await cluster.stop(lagging.id)
        offsets = []
        for round_ in range(4):
            offsets += await asyncio.wait_for(asyncio.gather(
                *(leader.driver.propose([b"s%d-%d" % (round_, i)]) for i in range(25))), 5)
        await cluster.wait_for(
            lambda: leader.driver.log.log_start_offset > 1, "the leader to snapshot")

        def checkpoints():
            return [n for n in os.listdir(cluster.directory(leader.id))
                    if n.endswith(".checkpoint")]

        # A snapshot being taken (in a worker thread) briefly leaves the previous one behind.
        await cluster.wait_for(lambda: len(checkpoints()) == 1, "one checkpoint file")

        back = await cluster.restart(lagging.id, config)
        await cluster.all_applied(offsets[-1])
        assert back.sm.loads == 1  # it caught up from the leader's snapshot, in chunks
        assert back.driver.log.latest_snapshot is not None
        assert back.sm.records == leader.sm.records
        assert len(back.sm.records) == 100
        # And it replicates normally afterwards.
        last = await asyncio.wait_for(leader.driver.propose([b"tail"]), 5)
        await cluster.all_applied(last)
        assert back.sm.records[-1] == (last, b"tail")

    run(scenario, tmp_path, config)


def test_an_observer_applies_everything_follows_a_new_leader_and_is_described(tmp_path):
    observer_id = 4

    async def described_with_observer(port, leader):
        deadline = time.monotonic() + 5
        while True:
            info = await describe_over_tcp(port)
            observers = {o.replica_id: o for o in info.observers}
            seen = observers.get(observer_id)
            if (seen is not None and seen.log_end_offset == leader.driver.log.end_offset
                    and seen.last_caught_up_timestamp > 0) or time.monotonic() > deadline:
                return info
            await asyncio.sleep(0.02)

    async def scenario(cluster):
        observer = cluster.members[observer_id]
        assert observer.driver.node.is_observer
        assert set(observer.transport.peers) == set(VOTERS)
        leader = await cluster.leader()
        # The observer learns the leader from the voters it asks; wait for a settled quorum
        # (a loaded machine can depose a brand-new leader) before proposing.
        await cluster.wait_for(
            lambda: all(m.driver.leader_id == leader.id for m in cluster.members.values())
            and leader.driver.high_watermark > 0, "every node to follow the leader")
        offsets = await asyncio.wait_for(
            asyncio.gather(*(leader.driver.propose([b"o%03d" % i]) for i in range(100))), 10)
        await cluster.all_applied(offsets[-1])
        assert observer.sm.records == leader.sm.records
        assert [p for _, p in observer.sm.records] == [b"o%03d" % i for i in range(100)]
        assert (observer.driver.role, observer.driver.leader_id) == (Role.FOLLOWER, leader.id)
        with pytest.raises(NotLeaderError) as refused:
            await observer.driver.propose([b"nope"])
        assert refused.value.leader_id == leader.id

        info = await described_with_observer(cluster.ports[leader.id], leader)
        assert [o.replica_id for o in info.observers] == [observer_id]
        assert sorted(v.replica_id for v in info.voters) == list(VOTERS)
        # The high watermark counts voters only, so it never runs ahead of a voter majority.
        assert info.high_watermark == leader.driver.high_watermark

        # The leader goes away; the observer finds its successor by asking the voters.
        first_epoch = leader.driver.epoch
        await cluster.stop(leader.id)
        new = await cluster.leader()
        assert new.id != leader.id and new.id != observer_id
        await cluster.wait_for(lambda: observer.driver.leader_id == new.id,
                               "the observer to follow the new leader")
        assert observer.driver.epoch > first_epoch
        more = await asyncio.wait_for(
            asyncio.gather(*(new.driver.propose([b"n%d" % i]) for i in range(20))), 5)
        await cluster.all_applied(more[-1])
        assert observer.sm.records == new.sm.records
        info = await described_with_observer(cluster.ports[new.id], new)
        assert [o.replica_id for o in info.observers] == [observer_id]
        # Never a vote: the observer's quorum-state file names the leader, not a candidate.
        state = observer.driver.store.load()
        assert state.voted_for is None and state.leader_id == new.id
        own = observer.driver.describe_quorum()
        assert (own.error, own.leader_id) == (ErrorCode.not_leader_or_follower, new.id)
        assert observer_id not in cluster.ports  # it never listened

    run(scenario, tmp_path, observers=(observer_id,))


# -- the transport on its own ---------------------------------------------------------------


async def transport_pair(**options):
    inbox = {1: [], 2: []}
    one = TcpTransport(1, **options.get("one", {}))
    two = TcpTransport(2, **options.get("two", {}))
    await one.start(inbox[1].append)
    await two.start(inbox[2].append)
    one.set_peer(2, "127.0.0.1", two.port)
    two.set_peer(1, "127.0.0.1", one.port)
    return one, two, inbox


async def eventually(predicate, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_transport_request_and_response():
    async def main():
        one, two, inbox = await transport_pair()
        try:
            vote = VoteRequest(src=1, dst=2, candidate_epoch=3, candidate_id=1,
                               last_offset_epoch=2, last_offset=7)
            one.send(vote)
            await eventually(lambda: inbox[2])
            assert inbox[2] == [vote]
            two.send(VoteResponse(src=2, dst=1, leader_epoch=3, vote_granted=True))
            await eventually(lambda: inbox[1])
            assert inbox[1] == [VoteResponse(src=2, dst=1, leader_epoch=3, vote_granted=True)]
            # A response nobody asked for goes nowhere.
            two.send(VoteResponse(src=2, dst=1, leader_epoch=3))
            await asyncio.sleep(0.05)
            assert len(inbox[1]) == 1
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_transport_reconnects_when_a_request_goes_unanswered():
    async def main():
        one, two, inbox = await transport_pair(one={"request_timeout_ms": 100})
        try:
            first = FetchRequest(src=1, dst=2, replica_id=1, current_leader_epoch=1,
                                 fetch_offset=0, last_fetched_epoch=0, max_wait_ms=50)
            one.send(first)
            await eventually(lambda: len(inbox[2]) == 1)
            # Node 2 never answers the first fetch (as a leader that lost its epoch would not).
            await asyncio.sleep(0.15)
            second = FetchRequest(src=1, dst=2, replica_id=1, current_leader_epoch=1,
                                  fetch_offset=0, last_fetched_epoch=0, max_wait_ms=50)
            one.send(second)
            await eventually(lambda: len(inbox[2]) == 2)
            two.send(FetchResponse(src=2, dst=1, leader_id=2, leader_epoch=1, high_watermark=0,
                                   fetch_offset=0, last_fetched_epoch=0))
            await eventually(lambda: inbox[1])
            assert inbox[1][0].fetch_offset == 0 and inbox[1][0].leader_id == 2
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_transport_drops_messages_to_a_dead_peer_and_recovers():
    async def main():
        one, two, inbox = await transport_pair(one={"reconnect_backoff_ms": 20})
        port = two.port
        await two.close()
        vote = VoteRequest(src=1, dst=2, candidate_epoch=3, candidate_id=1,
                           last_offset_epoch=2, last_offset=7)
        try:
            one.send(vote)  # refused: dropped
            await asyncio.sleep(0.05)
            two = TcpTransport(2, port=port)
            await two.start(inbox[2].append)
            deadline = time.monotonic() + 3
            while not inbox[2] and time.monotonic() < deadline:
                one.send(vote)  # Raft resends; one gets through once the peer is back
                await asyncio.sleep(0.03)
            assert inbox[2][0] == vote
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_transport_rejects_another_cluster():
    async def main():
        one, two, inbox = await transport_pair(one={"cluster_id": "alpha"},
                                               two={"cluster_id": "beta"})
        try:
            one.send(VoteRequest(src=1, dst=2, candidate_epoch=3, candidate_id=1,
                                 last_offset_epoch=2, last_offset=7))
            await eventually(lambda: inbox[1])
            (answer,) = inbox[1]
            assert answer.error == ErrorCode.inconsistent_cluster_id
            assert answer.leader_epoch == -1
            assert inbox[2] == []
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_transport_answers_api_versions():
    async def main():
        transport = TcpTransport(1)
        await transport.start(lambda message: None)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", transport.port)
            body = build(request_class(wire.ApiKey.API_VERSIONS, 3),
                         {"client_software_name": "test", "client_software_version": "1"})
            writer.write(encode_request(wire.ApiKey.API_VERSIONS, 3, 4, "admin", body))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            writer.close()
            _cid, response = wire.parse_response_frame(wire.ApiKey.API_VERSIONS, 3, frame)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert ranges[wire.ApiKey.VOTE] == wire.SUPPORTED_VERSIONS[wire.ApiKey.VOTE]
            assert ranges[wire.ApiKey.FETCH] == (12, 18)
        finally:
            await transport.close()

    asyncio.run(main())


# -- one driver on its own ------------------------------------------------------------------


class Outbox:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def single(directory, sm=None, io_in_thread=True):
    return RaftDriver(1, (1,), str(directory), sm or ListStateMachine(), Outbox(),
                      config=CONFIG, io_in_thread=io_in_thread)


@pytest.mark.parametrize("io_in_thread", [True, False])
def test_single_voter_commits_and_replays_after_restart(tmp_path, io_in_thread):
    async def main():
        driver = single(tmp_path, io_in_thread=io_in_thread)
        await driver.start()
        with pytest.raises(NotLeaderError):
            await driver.propose([b"too early"])
        deadline = time.monotonic() + 3
        while driver.role is not Role.LEADER:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        last = await driver.propose([b"a", b"b", b"c"])
        assert last == 3  # offset 0 holds the LeaderChange control entry
        assert driver.state_machine.records == [(1, b"a"), (2, b"b"), (3, b"c")]
        await driver.close()
        with pytest.raises(ProposalFailed):
            await driver.propose([b"closed"])

        again = single(tmp_path, io_in_thread=io_in_thread)
        await again.start()
        deadline = time.monotonic() + 3
        while again.applied_offset < 4:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        assert again.state_machine.records == [(1, b"a"), (2, b"b"), (3, b"c")]
        assert again.epoch == 2
        await again.close()

    asyncio.run(main())


def test_a_failing_state_machine_stops_the_driver(tmp_path):
    class Broken(ListStateMachine):
        def apply(self, offset, payload):
            raise RuntimeError("disk full")

    async def main():
        driver = single(tmp_path, Broken())
        await driver.start()
        deadline = time.monotonic() + 3
        while driver.role is not Role.LEADER:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        with pytest.raises(ProposalFailed, match="disk full"):
            await driver.propose([b"x"])
        assert isinstance(driver.failure, RuntimeError)
        assert not driver.running
        await driver.close()
        assert driver.log.closed

    asyncio.run(main())
