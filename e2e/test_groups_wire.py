"""The classic group protocol byte by byte: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit and OffsetFetch built by hand (e2e/wire.py), so generations, leaders, member ids
and error codes can be checked exactly where client libraries hide them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from e2e import wire
from e2e.support import ck_create_topic, unique
from e2e.wire import (
    Conn,
    array,
    compact_array,
    compact_bytes,
    compact_string,
    int8,
    int16,
    int32,
    int64,
    nullable_bytes,
    string,
)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

SESSION_MS = 10000


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0."""
    return int16(0) + array([string(t) for t in topics]) + nullable_bytes(b"")


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    return int16(0) + array([string(topic) + array([int32(p) for p in partitions])]) + \
        nullable_bytes(b"")


@dataclass
class Joined:
    error: int
    generation: int
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]
    skip_assignment: bool = False


class Member:
    """One connection speaking for one group member."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str | None = None,
                 rebalance_ms: int = 30000, session_ms: int = SESSION_MS) -> None:
        self.conn = Conn(bootstrap, timeout=40)
        self.group = group
        self.topic = topic
        self.instance = instance
        self.rebalance_ms = rebalance_ms
        self.session_ms = session_ms
        self.member_id = ""
        self.generation = -1
        self.correlation = 0

    def close(self) -> None:
        self.conn.close()

    def _call(self, api_key: int, version: int, body: bytes, flexible: bool = False
              ) -> wire.Reader:
        self.correlation += 1
        self.conn.send(wire.request(api_key, version, self.correlation, body, flexible=flexible))
        correlation, reader = self.conn.recv_response(header_v1=flexible)
        assert correlation == self.correlation
        return reader

    def join(self, version: int = 5, protocols: list[tuple[str, bytes]] | None = None,
             member_id: str | None = None) -> Joined:
        """JoinGroup, coming back with the assigned id after MEMBER_ID_REQUIRED."""
        joined = self.join_once(version, protocols, member_id)
        if joined.error == MEMBER_ID_REQUIRED:
            joined = self.join_once(version, protocols, joined.member_id)
        return joined

    def join_once(self, version: int = 5, protocols: list[tuple[str, bytes]] | None = None,
                  member_id: str | None = None) -> Joined:
        protocols = protocols or [("range", subscription(self.topic))]
        member_id = self.member_id if member_id is None else member_id
        if version >= 6:
            body = (compact_string(self.group) + int32(self.session_ms) +
                    int32(self.rebalance_ms) + compact_string(member_id) +
                    compact_string(self.instance) + compact_string("consumer") +
                    compact_array([compact_string(n) + compact_bytes(m) + wire.TAGS
                                   for n, m in protocols]))
            if version >= 8:
                body += compact_string(None)  # reason
            reader = self._call(JOIN_GROUP, version, body + wire.TAGS, flexible=True)
            reader.int32()
            error, generation = reader.int16(), reader.int32()
            reader.compact_string()  # protocol type
            name, leader = reader.compact_string(), reader.compact_string()
            skip = reader.boolean() if version >= 9 else False
            member = reader.compact_string()
            members = []
            for _ in range(reader.compact_array_len()):
                members.append((reader.compact_string(), reader.compact_string(),
                                reader.compact_bytes()))
                reader.tags()
            reader.tags()
        else:
            body = string(self.group) + int32(self.session_ms)
            if version >= 1:
                body += int32(self.rebalance_ms)
            body += string(member_id)
            if version >= 5:
                body += string(self.instance)
            body += string("consumer") + array([string(n) + nullable_bytes(m)
                                                for n, m in protocols])
            reader = self._call(JOIN_GROUP, version, body)
            if version >= 2:
                reader.int32()
            error, generation = reader.int16(), reader.int32()
            name, leader, member = reader.string(), reader.string(), reader.string()
            skip = False
            members = []
            for _ in range(reader.array_len()):
                mid = reader.string()
                iid = reader.string() if version >= 5 else None
                members.append((mid, iid, reader.nullable_bytes()))
        reader.done()
        joined = Joined(error, generation, name, leader or "", member or "", members, skip)
        if error in (NONE, MEMBER_ID_REQUIRED):
            self.member_id = joined.member_id
        if error == NONE:
            self.generation = generation
        return joined

    def sync(self, assignments: dict[str, bytes] | None = None,
             generation: int | None = None) -> tuple[int, bytes]:
        body = (string(self.group) + int32(self.generation if generation is None else generation)
                + string(self.member_id) + string(self.instance) +
                array([string(m) + nullable_bytes(a) for m, a in (assignments or {}).items()]))
        reader = self._call(SYNC_GROUP, 3, body)
        reader.int32()
        error, data = reader.int16(), reader.nullable_bytes()
        reader.done()
        return error, data or b""

    def heartbeat(self, generation: int | None = None, member_id: str | None = None) -> int:
        body = (string(self.group) + int32(self.generation if generation is None else generation)
                + string(self.member_id if member_id is None else member_id) +
                string(self.instance))
        reader = self._call(HEARTBEAT, 3, body)
        reader.int32()
        error = reader.int16()
        reader.done()
        return error

    def leave(self) -> tuple[int, list[int]]:
        body = string(self.group) + array([string(self.member_id) + string(self.instance)])
        reader = self._call(LEAVE_GROUP, 3, body)
        reader.int32()
        error = reader.int16()
        errors = []
        for _ in range(reader.array_len()):
            reader.string()
            reader.string()
            errors.append(reader.int16())
        reader.done()
        return error, errors

    def commit(self, offsets: dict[tuple[str, int], int], generation: int | None = None,
               member_id: str | None = None) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[bytes]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                int32(partition) + int64(offset) + int32(-1) + string("m"))
        body = (string(self.group) + int32(self.generation if generation is None else generation)
                + string(self.member_id if member_id is None else member_id) +
                string(self.instance) +
                array([string(t) + array(parts) for t, parts in by_topic.items()]))
        reader = self._call(OFFSET_COMMIT, 7, body)
        reader.int32()
        out = {}
        for _ in range(reader.array_len()):
            topic = reader.string()
            for _ in range(reader.array_len()):
                partition = reader.int32()
                out[(topic, partition)] = reader.int16()
        reader.done()
        return out

    def fetch(self, partitions: dict[str, list[int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """OffsetFetch v5: {(topic, partition): (offset, error)}."""
        body = string(self.group) + array([string(t) + array([int32(p) for p in ps])
                                           for t, ps in partitions.items()])
        reader = self._call(OFFSET_FETCH, 5, body)
        reader.int32()
        out = {}
        for _ in range(reader.array_len()):
            topic = reader.string()
            for _ in range(reader.array_len()):
                partition, offset = reader.int32(), reader.int64()
                reader.int32()
                reader.string()
                out[(topic, partition)] = (offset, reader.int16())
        assert reader.int16() == NONE
        reader.done()
        return out


def find_coordinator(bootstrap: str, group: str) -> tuple[int, int, str, int]:
    """FindCoordinator v2: (error, node id, host, port)."""
    with Conn(bootstrap) as conn:
        conn.send(wire.request(FIND_COORDINATOR, 2, 1, string(group) + int8(0), flexible=False))
        _, reader = conn.recv_response(header_v1=False)
        reader.int32()
        error, _, node, host, port = (reader.int16(), reader.string(), reader.int32(),
                                      reader.string(), reader.int32())
        reader.done()
    return error, node, host or "", port


@pytest.fixture
def setup(module_broker):
    # Clients look the coordinator up first; that also creates __consumer_offsets.
    assert find_coordinator(module_broker.bootstrap, "any")[0] == NONE
    topic = unique("wire-grp")
    ck_create_topic(module_broker.bootstrap, topic, 4)
    members: list[Member] = []

    def member(group: str | None = None, **kwargs: object) -> Member:
        """A member of the test's group (or of `group`)."""
        if group is None:
            group = members[0].group if members else unique("g-wire")
        m = Member(module_broker.bootstrap, group, topic, **kwargs)
        members.append(m)
        return m

    yield topic, member
    for m in members:
        m.close()


def test_find_coordinator_names_this_broker(module_broker):
    error, node, host, port = find_coordinator(module_broker.bootstrap, unique("g"))
    assert (error, host, port) == (NONE, "127.0.0.1", module_broker.port)
    assert node >= 0


def test_group_requests_before_any_find_coordinator(broker_factory):
    """On a broker where no client has looked up a coordinator yet (so __consumer_offsets
    does not exist), a member that goes straight to JoinGroup must either be served fully
    or be sent to find the coordinator (Kafka: NOT_COORDINATOR); the broker must not fail
    internally and drop the connection half way through."""
    broker = broker_factory(BROKER_OVERRIDES)
    topic = unique("early")
    ck_create_topic(broker.bootstrap, topic, 1)
    a = Member(broker.bootstrap, unique("g-early"), topic)
    try:
        joined = a.join()
        if joined.error in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
            return
        assert joined.error == NONE, joined
        try:
            synced = a.sync({a.member_id: assignment(topic, [0])})
        except wire.Closed:
            pytest.fail("the broker closed the connection on SyncGroup (see its log)")
        assert synced == (NONE, assignment(topic, [0]))
        assert a.commit({(topic, 0): 1}) == {(topic, 0): NONE}
    finally:
        a.close()


def test_member_id_required_then_join(setup):
    """KIP-394 (JoinGroup v4+): a join without a member id is answered MEMBER_ID_REQUIRED with
    an id; joining with that id makes a group of generation 1 led by that member."""
    topic, member = setup
    a = member()
    first = a.join_once(version=4)
    assert first.error == MEMBER_ID_REQUIRED
    assert first.member_id and first.generation == -1
    second = a.join_once(version=4)
    assert second.error == NONE
    assert (second.member_id, second.generation, second.leader, second.protocol_name) == \
        (first.member_id, 1, first.member_id, "range")
    assert [m[0] for m in second.members] == [first.member_id]
    assert second.members[0][2] == subscription(topic)
    error, data = a.sync({a.member_id: assignment(topic, [0, 1, 2, 3])})
    assert (error, data) == (NONE, assignment(topic, [0, 1, 2, 3]))
    assert a.heartbeat() == NONE
    # Before v4 a member joins in one round trip.
    b = member(group=unique("g-wire-v3"))
    old = b.join_once(version=3)
    assert old.error == NONE and old.member_id, old


def test_rebalance_generations_leader_and_errors(setup):
    """Two members: the leader alone gets the member list and hands out assignments; the
    follower's SyncGroup waits for it; heartbeats tell the old member to rejoin; stale
    generations and unknown members are refused."""
    topic, member = setup
    a, b = member(), member()
    joined = a.join()
    assert (joined.error, joined.generation) == (NONE, 1)
    assert a.sync({a.member_id: assignment(topic, [0, 1, 2, 3])})[0] == NONE
    with ThreadPoolExecutor(2) as pool:
        b_join = pool.submit(b.join)
        deadline = time.monotonic() + 10
        while (beat := a.heartbeat()) == NONE:
            assert time.monotonic() < deadline, "the leader was never told to rejoin"
            time.sleep(0.05)
        assert beat == REBALANCE_IN_PROGRESS
        a_join = pool.submit(a.join)
        ja, jb = a_join.result(20), b_join.result(20)
    assert ja.error == jb.error == NONE
    assert ja.generation == jb.generation == 2
    assert ja.leader == jb.leader == a.member_id
    assert sorted(m[0] for m in ja.members) == sorted([a.member_id, b.member_id])
    assert jb.members == []
    # CompletingRebalance: heartbeats are fine, commits must wait for the assignment.
    assert b.heartbeat() == NONE
    assert b.commit({(topic, 0): 1}) == {(topic, 0): REBALANCE_IN_PROGRESS}
    assert a.heartbeat(generation=1) == ILLEGAL_GENERATION
    with ThreadPoolExecutor(1) as pool:
        b_sync = pool.submit(b.sync)
        time.sleep(0.3)
        assert not b_sync.done(), "a follower's SyncGroup must wait for the leader's"
        plan = {a.member_id: assignment(topic, [0, 1]), b.member_id: assignment(topic, [2, 3])}
        assert a.sync(plan) == (NONE, plan[a.member_id])
        assert b_sync.result(10) == (NONE, plan[b.member_id])
    assert b.heartbeat() == NONE
    assert a.heartbeat(member_id="nobody") == UNKNOWN_MEMBER_ID
    assert b.commit({(topic, 2): 5}, generation=1) == {(topic, 2): ILLEGAL_GENERATION}
    assert b.commit({(topic, 2): 5}, member_id="", generation=-1) == \
        {(topic, 2): UNKNOWN_MEMBER_ID}
    assert b.commit({(topic, 2): 5, (topic, 9): 5, ("no-such-topic", 0): 5}) == \
        {(topic, 2): NONE, (topic, 9): UNKNOWN_TOPIC_OR_PARTITION,
         ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert b.fetch({topic: [2, 3]}) == {(topic, 2): (5, NONE), (topic, 3): (-1, NONE)}
    # Leaving starts a rebalance for the rest.
    assert b.leave() == (NONE, [NONE])
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    rejoined = a.join()
    assert (rejoined.error, rejoined.generation, [m[0] for m in rejoined.members]) == \
        (NONE, 3, [a.member_id])


def test_member_that_does_not_rejoin_is_dropped_after_rebalance_timeout(setup):
    """A member that keeps heartbeating but does not rejoin is removed once the rebalance
    timeout (max.poll.interval.ms for Java consumers; the group waits for the largest of its
    members') runs out; the rebalance completes without it."""
    topic, member = setup
    a = member(rebalance_ms=2000)
    b = member(rebalance_ms=2000)
    assert a.join().error == NONE
    assert a.sync({a.member_id: assignment(topic, [0, 1, 2, 3])})[0] == NONE
    stop = threading.Event()
    beats: list[int] = []

    def keep_beating() -> None:
        while not stop.is_set():
            beats.append(a.heartbeat())
            time.sleep(0.2)

    beater = threading.Thread(target=keep_beating)
    beater.start()
    try:
        started = time.monotonic()
        joined = b.join()
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        beater.join()
    assert joined.error == NONE
    assert [m[0] for m in joined.members] == [b.member_id]
    assert joined.generation == 2
    assert 1.5 <= elapsed <= 5, f"the join completed after {elapsed:.1f} s (rebalance timeout 2 s)"
    assert REBALANCE_IN_PROGRESS in beats
    assert a.heartbeat() == UNKNOWN_MEMBER_ID


def test_invalid_session_timeout_and_inconsistent_protocol(setup):
    topic, member = setup
    a = member(session_ms=1000)
    assert a.join().error == INVALID_SESSION_TIMEOUT
    b = member()
    assert b.join().error == NONE
    c = member()
    assert c.join(protocols=[("roundrobin", subscription(topic))]).error == \
        INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("version", [5, 7, 9])
def test_static_leader_rejoin_keeps_generation(setup, version):
    """A static leader that comes back (new connection, no member id, same instance id) is
    given a new member id in the same generation, without a rebalance: the other member's
    heartbeats stay NONE and the old member id is fenced. Kafka answers JoinGroup before v9
    with the *old* leader id and no member list, so the restarted member does not run the
    assignor (its assignment would be ignored in a stable group); from v9 it is told it leads
    and to skip the assignment (KIP-814)."""
    topic, member = setup
    instance = unique("instance")
    a = member(instance=instance)
    b = member()
    assert a.join(version=version).error == NONE
    assert a.sync({a.member_id: assignment(topic, [0, 1, 2, 3])})[0] == NONE
    with ThreadPoolExecutor(2) as pool:
        b_join = pool.submit(b.join)
        while a.heartbeat() == NONE:
            time.sleep(0.05)
        ja = pool.submit(a.join, version).result(20)
        jb = b_join.result(20)
    generation = ja.generation
    assert jb.generation == generation and ja.leader == a.member_id
    plan = {a.member_id: assignment(topic, [0, 1]), b.member_id: assignment(topic, [2, 3])}
    with ThreadPoolExecutor(1) as pool:
        b_sync = pool.submit(b.sync)
        assert a.sync(plan)[0] == NONE
        assert b_sync.result(10) == (NONE, plan[b.member_id])
    old_id = a.member_id

    restarted = member(instance=instance)
    rejoined = restarted.join(version=version, member_id="")
    assert rejoined.error == NONE
    assert rejoined.generation == generation
    assert rejoined.member_id not in ("", old_id)
    assert rejoined.protocol_name == "range"
    assert restarted.sync() == (NONE, plan[old_id])
    assert b.heartbeat() == NONE
    assert restarted.heartbeat() == NONE
    assert a.heartbeat() == FENCED_INSTANCE_ID
    assert a.commit({(topic, 0): 1}) == {(topic, 0): FENCED_INSTANCE_ID}
    assert b.heartbeat() == NONE
    if version >= 9:
        assert (rejoined.leader, rejoined.skip_assignment) == (rejoined.member_id, True), (
            "from v9 Kafka tells the restarted static leader that it leads and to skip "
            "the assignment")
        assert sorted(m[0] for m in rejoined.members) == sorted([rejoined.member_id,
                                                                 b.member_id])
    else:
        assert (rejoined.leader, rejoined.members) == (old_id, []), (
            "before v9 Kafka returns the previous leader id and no members")
