"""The Raft state machine of a KRaft-style controller quorum (KIP-595), free of I/O and clocks.

A `RaftNode` is driven by four inputs, each taking the driver's current time:

- `tick(now_ms)`: call it at (or after) `next_deadline_ms()`; timers fire here.
- `handle(message, now_ms)`: a message from another node.
- `propose(records, now_ms)`: append records if this node leads. The leader fsyncs them in one
  batch `append_linger_ms` later; followers may fetch them before that, but the leader's own
  copy only counts towards the high watermark once fsynced.
- `resign(now_ms)`: a leader hands over gracefully (before its process is restarted).

Each returns `Actions` (see actions.py) that the driver executes in order before the next input.
The node reads its log through a `LogView` and never writes it; the driver applies AppendToLog,
TruncateLog, SnapshotLog and InstallSnapshot, so the view is current when the next input comes.

Replication follows Kafka's pull model: followers Fetch from the leader, sending their log end
and last epoch; the leader answers with records, or with a diverging epoch to truncate to, or
with a snapshot id when the follower is below the log start. The high watermark is the largest
offset a majority of voters hold durably, counted only once it covers the leader's own
LeaderChange entry, i.e. an entry of the current epoch. That entry is Kafka's
LeaderChangeMessage (`LeaderChange`): the leader, the voters and the voters that elected it.

A node whose id is not among the voters is an observer (KIP-595): it fetches and applies the
log like a follower but never votes (it refuses Vote requests), never stands, and is never
counted for the high watermark or check-quorum. Without a leader it fetches from a random
voter, which answers with the leader it knows (NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
with the leader's id and epoch) or, if it leads, with records; the observer then fetches from
that leader, and goes back to asking random voters after a fetch timeout or when the leader
says it gave the epoch up. BeginQuorumEpoch only tells an observer who leads. Leaders answer
observers' fetches like voters' (diverging epochs, snapshots, long polls) and list them in
DescribeQuorum.

A voter that loses its directory (a replaced disk) and restarts empty forgets its votes and the
entries it helped commit. With static voters (no KIP-853 directory ids) it looks exactly like a
voter that has never run, and Raft's safety then rests on something false: with voters A, B, C,
entries committed on A and B, and C never started, B restarting empty can vote for C, and C
leads without the committed entries (or B votes twice in one epoch). No rule inside the
protocol can tell the two cases apart without ruling out a brand new cluster, so whoever
replaces a disk must say so: `lost_state=True` starts the voter in probation. In probation it
refuses every vote, never stands, and looks for the leader like an observer; it leaves
probation when a leader's answer shows it holds everything that leader has (every entry
committed before that leader's epoch, by leader completeness). The driver keeps this flag on
disk until then. What probation cannot cover: a restart from an empty directory without the
flag; a vote the lost disk gave in an epoch newer than the leader it then catches up with (a
candidacy still in flight can collect that vote twice); and catching up with a deposed leader
that does not know it yet. Only persistent replica identities (KIP-853) close these.
"""

from __future__ import annotations

import functools
import io
import random as random_module
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage as LeaderChangeMessageV0
from kio.schema.leader_change_message.v0.data import Voter as VoterV0
from kio.schema.leader_change_message.v1.data import LeaderChangeMessage as LeaderChangeMessageV1
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from moldau.broker.raft.actions import (
    Actions,
    AppendToLog,
    CommitUpTo,
    FlushLog,
    InstallSnapshot,
    PersistState,
    Send,
    SnapshotLog,
    TruncateLog,
)
from moldau.broker.raft.log import LogEntry, LogView, OffsetAndEpoch, Snapshot
from moldau.broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    INCONSISTENT_VOTER_SET,
    NO_LEADER,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    POSITION_OUT_OF_RANGE,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.state import (
    CandidateState,
    FollowerState,
    LeaderState,
    ParkedFetch,
    QuorumState,
    RaftConfig,
    ReplicaState,
    ResignedState,
    Role,
    SnapshotDownload,
    State,
    UnattachedState,
    VotedState,
)

__all__ = ["LeaderChange", "NotLeader", "Proposal", "RaftInvariantError", "RaftNode",
           "decode_leader_change"]

_NEVER = 1 << 62

# Outcomes of checking a follower's fetch position against the leader's log.
_VALID = "valid"
_DIVERGING = "diverging"
_SNAPSHOT = "snapshot"


class RaftInvariantError(Exception):
    """The protocol's assumptions broke (two leaders in one epoch, truncating committed data).

    The node cannot continue safely; the driver should stop it and report.
    """


@dataclass(frozen=True, slots=True)
class NotLeader:
    leader_id: int | None  # the leader this node follows, if it knows one
    epoch: int


@dataclass(frozen=True, slots=True)
class Proposal:
    base_offset: int
    last_offset: int
    epoch: int
    actions: Actions


_LEADER_CHANGE_SCHEMAS: dict[int, Any] = {0: LeaderChangeMessageV0, 1: LeaderChangeMessageV1}
# Kafka writes LeaderChangeMessage at version 0; version 1 (voter directory ids) is read too.
_LEADER_CHANGE_VERSION = 0
_INT16 = struct.Struct(">h")


@functools.cache
def _leader_change_writer() -> Any:
    return entity_writer(LeaderChangeMessageV0)


@functools.cache
def _leader_change_reader(version: int) -> Any:
    return entity_reader(_LEADER_CHANGE_SCHEMAS[version])


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """The value of a LeaderChange control record (control type 2): Kafka's
    LeaderChangeMessage, i.e. the new leader, the voters of its epoch and those that elected it.
    """

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]

    def encode(self) -> bytes:
        message = LeaderChangeMessageV0(
            version=i16(_LEADER_CHANGE_VERSION), leader_id=BrokerId(i32(self.leader_id)),
            voters=tuple(VoterV0(voter_id=i32(v)) for v in self.voters),
            granting_voters=tuple(VoterV0(voter_id=i32(v)) for v in self.granting_voters))
        out = io.BytesIO()
        _leader_change_writer()(out, message)
        return out.getvalue()

    @classmethod
    def decode(cls, payload: bytes) -> LeaderChange:
        """Raises ValueError when `payload` is not a LeaderChangeMessage this module reads."""
        if len(payload) < _INT16.size:
            raise ValueError("LeaderChangeMessage too short")
        (version,) = _INT16.unpack_from(payload)
        if version not in _LEADER_CHANGE_SCHEMAS:
            raise ValueError(f"LeaderChangeMessage version {version} is not supported")
        try:
            message, size = _leader_change_reader(version)(payload, 0)
        except Exception as exc:  # kio raises several types for truncated or bad input
            raise ValueError(f"malformed LeaderChangeMessage: {exc}") from exc
        if size != len(payload):
            raise ValueError(f"{len(payload) - size} bytes after the LeaderChangeMessage")
        return cls(int(message.leader_id), tuple(int(v.voter_id) for v in message.voters),
                   tuple(int(v.voter_id) for v in message.granting_voters))


def decode_leader_change(payload: bytes) -> tuple[int, tuple[int, ...]]:
    """(leader id, voters) of a LeaderChange control entry."""
    change = LeaderChange.decode(payload)
    return change.leader_id, change.voters


class RaftNode:
    def __init__(self, node_id: int, voters: Iterable[int], persisted_state: QuorumState,
                 log_view: LogView, random: random_module.Random, *,
                 config: RaftConfig | None = None, now_ms: int = 0,
                 lost_state: bool = False) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        # A node outside the voters is an observer: it replicates the log, never votes.
        self.is_observer = node_id not in self.voters
        # A voter whose directory was lost (see the module docstring) acts as an observer
        # until it has caught up with a leader: it may have forgotten a vote or committed data.
        self._probation = lost_state and not self.is_observer
        self.config = config or RaftConfig()
        if self.config.request_timeout_ms <= self.config.fetch_max_wait_ms:
            raise ValueError("request_timeout_ms must exceed fetch_max_wait_ms")
        self.log = log_view
        self.random = random
        self._majority = len(self.voters) // 2 + 1
        self._others = tuple(sorted(self.voters - {node_id}))  # every voter, for an observer
        self._persisted = persisted_state
        # The snapshot is committed; the high watermark above it is learned again after a start.
        self._commit = log_view.log_start_offset
        # Whatever the log holds at start-up survived a restart, so it is on disk.
        self._flushed_end = log_view.end_offset
        self._pending: Actions = []
        self._state: State = self._initial_state(persisted_state, now_ms)
        self._handlers: dict[type, Callable[[Any, int, Actions], None]] = {
            VoteRequest: self._on_vote_request,
            VoteResponse: self._on_vote_response,
            BeginQuorumEpochRequest: self._on_begin_quorum_epoch_request,
            BeginQuorumEpochResponse: self._on_begin_quorum_epoch_response,
            EndQuorumEpochRequest: self._on_end_quorum_epoch_request,
            EndQuorumEpochResponse: self._on_end_quorum_epoch_response,
            FetchRequest: self._on_fetch_request,
            FetchResponse: self._on_fetch_response,
            FetchSnapshotRequest: self._on_fetch_snapshot_request,
            FetchSnapshotResponse: self._on_fetch_snapshot_response,
        }

    def _initial_state(self, persisted: QuorumState, now: int) -> State:
        epoch = persisted.epoch
        if self.log.last_epoch > epoch:
            # The quorum state is written before any entry of a new epoch, so it was lost or
            # replaced; never act in an epoch older than the log's.
            self._persisted = QuorumState(self.log.last_epoch)
            self._pending.append(PersistState(self._persisted))
            return self._unattached_state(self.log.last_epoch, now)
        if self._passive:
            # A vote or leadership in the file dates from when this node was a voter; as an
            # observer it only follows a leader other than itself, or looks for one.
            if persisted.leader_id is not None and persisted.leader_id != self.node_id:
                deadline = now + self.config.fetch_timeout_ms
                return FollowerState(epoch, persisted.leader_id, deadline, now)
            return self._unattached_state(epoch, now)
        if persisted.leader_id == self.node_id:
            # A leader's replica bookkeeping died with the process: give the epoch up.
            return ResignedState(epoch, self._election_deadline(now), now, ())
        if persisted.leader_id is not None:
            deadline = now + self.config.fetch_timeout_ms
            return FollowerState(epoch, persisted.leader_id, deadline, now)
        if persisted.voted_for == self.node_id:
            return CandidateState(epoch, 1, self._election_deadline(now), now, {self.node_id})
        if persisted.voted_for is not None:
            return VotedState(epoch, persisted.voted_for, self._election_deadline(now))
        return UnattachedState(epoch, self._election_deadline(now))

    # -- what the driver and tests can see ----------------------------------------------------

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def in_probation(self) -> bool:
        """A voter started with `lost_state` that has not yet caught up with a leader."""
        return self._probation

    @property
    def _passive(self) -> bool:
        """Never stands for election; finds the leader by fetching from voters."""
        return self.is_observer or self._probation

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def state(self) -> State:
        return self._state

    @property
    def leader_id(self) -> int | None:
        if isinstance(self._state, LeaderState):
            return self.node_id
        if isinstance(self._state, FollowerState):
            return self._state.leader_id
        return None

    @property
    def quorum_state(self) -> QuorumState:
        """The last quorum state this node asked to persist."""
        return self._persisted

    @property
    def high_watermark(self) -> int:
        """Offsets below this are known to be committed (and were handed out in CommitUpTo)."""
        return self._commit

    def next_deadline_ms(self) -> int:
        """The earliest time `tick` has something to do (0: as soon as possible)."""
        if self._pending:
            return 0
        st = self._state
        deadline = self._role_deadline(st)
        if self._snapshot_due():
            pinned = st.snapshot_pinned_until if isinstance(st, LeaderState) else 0
            deadline = min(deadline, pinned)
        return deadline

    def _role_deadline(self, st: State) -> int:
        if isinstance(st, UnattachedState):
            if st.bootstrap_fetch_at is not None:
                return min(st.election_deadline, st.bootstrap_fetch_at)
            return st.election_deadline
        if isinstance(st, VotedState):
            return st.election_deadline
        if isinstance(st, FollowerState):
            return min(st.fetch_deadline, st.next_fetch_at)
        if isinstance(st, CandidateState):
            if len(st.granted) >= self._majority:
                return 0
            if st.backoff_until is not None:
                return st.backoff_until
            waiting = len(st.granted) + len(st.rejected) < len(self.voters)
            return min(st.election_deadline, st.resend_at if waiting else _NEVER)
        if isinstance(st, LeaderState):
            deadline = min(st.check_quorum_deadline, st.begin_epoch_at)
            if st.flush_deadline is not None:
                deadline = min(deadline, st.flush_deadline)
            for replica_id, parked in st.parked.items():
                if self._parked_has_news(st, replica_id, parked):
                    return 0
                deadline = min(deadline, parked.deadline)
            return deadline
        waiting = len(st.acked) < len(self._others)
        return min(st.election_deadline, st.resend_at if waiting else _NEVER)

    # -- inputs -------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Actions:
        actions = self._take_pending()
        self._maybe_snapshot(now_ms, actions)
        st = self._state
        if isinstance(st, (UnattachedState, VotedState)):
            if now_ms >= st.election_deadline:
                self._become_candidate(now_ms, actions)
            elif (isinstance(st, UnattachedState) and st.bootstrap_fetch_at is not None
                  and now_ms >= st.bootstrap_fetch_at):
                self._send_bootstrap_fetch(st, now_ms, actions)
        elif isinstance(st, FollowerState):
            if now_ms >= st.fetch_deadline:
                if self._passive:
                    # KIP-595: an observer that lost touch with its leader asks the voters
                    # again; it never stands.
                    self._lose_leader(st, now_ms, actions)
                else:
                    self._become_candidate(now_ms, actions)
            elif now_ms >= st.next_fetch_at:
                self._send_fetch(st, now_ms, actions)
        elif isinstance(st, CandidateState):
            self._tick_candidate(st, now_ms, actions)
        elif isinstance(st, LeaderState):
            self._tick_leader(st, now_ms, actions)
        elif now_ms >= st.election_deadline:
            self._become_candidate(now_ms, actions)
        elif now_ms >= st.resend_at:
            self._send_end_quorum_epoch(st, now_ms, actions)
        return actions

    def handle(self, message: Message, now_ms: int) -> Actions:
        actions = self._take_pending()
        handler = self._handlers.get(type(message))
        if handler is not None and message.dst == self.node_id:
            handler(message, now_ms, actions)
        return actions

    def propose(self, records: Sequence[bytes], now_ms: int) -> Proposal | NotLeader:
        st = self._state
        if not isinstance(st, LeaderState):
            return NotLeader(self.leader_id, self.epoch)
        if not records:
            raise ValueError("nothing to propose")
        base = self.log.end_offset
        entries = tuple(LogEntry(base + i, st.epoch, bytes(r)) for i, r in enumerate(records))
        if st.flush_deadline is None:
            st.flush_deadline = now_ms + self.config.append_linger_ms
        actions = self._take_pending()
        actions.append(AppendToLog(entries))
        return Proposal(base, base + len(entries) - 1, st.epoch, actions)

    def resign(self, now_ms: int) -> Actions:
        """Give up leadership so that the most caught-up voter takes over at once."""
        actions = self._take_pending()
        st = self._state
        if isinstance(st, LeaderState):
            successors = sorted(self._others, key=lambda v: (-st.replicas[v].end_offset, v))
            self._resign(st, now_ms, actions, tuple(successors))
        return actions

    # -- timers ---------------------------------------------------------------------------------

    def _unattached_state(self, epoch: int, now: int) -> UnattachedState:
        if self._passive:
            return UnattachedState(epoch, _NEVER, bootstrap_fetch_at=now)
        return UnattachedState(epoch, self._election_deadline(now))

    def _election_deadline(self, now: int) -> int:
        if len(self.voters) == 1 and self.node_id in self.voters:
            return now  # nobody to wait for: a lone voter elects itself at once
        timeout = self.config.election_timeout_ms
        return now + timeout + (self.random.randrange(timeout) if timeout > 0 else 0)

    def _election_backoff(self, retries: int) -> int:
        # Randomised and growing with consecutive failures, so competing candidates spread out.
        cap = min(self.config.election_backoff_max_ms,
                  self.config.retry_backoff_ms << min(retries, 20))
        return 1 + self.random.randrange(max(cap, 1))

    def _successor_backoff(self, successors: tuple[int, ...]) -> int:
        """How long a follower waits before standing when its leader resigns."""
        if self.node_id not in successors:
            return self.config.election_backoff_max_ms
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        return min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << position)

    def _tick_candidate(self, st: CandidateState, now: int, actions: Actions) -> None:
        if len(st.granted) >= self._majority:
            self._become_leader(st, now, actions)
        elif st.backoff_until is not None:
            if now >= st.backoff_until:
                self._become_candidate(now, actions)
        elif now >= st.election_deadline:
            st.backoff_until = now + self._election_backoff(st.retries)
        elif now >= st.resend_at:
            self._send_vote_requests(st, now, actions)

    def _tick_leader(self, st: LeaderState, now: int, actions: Actions) -> None:
        if st.flush_deadline is not None and now >= st.flush_deadline:
            self._flush_leader(st, now, actions)
        if now >= st.check_quorum_deadline:
            if len(st.fetched) + 1 < self._majority:
                # Check-quorum: a leader cut off from a majority stops acting as one, so that
                # clients and observers move on to the leader the others elect.
                self._resign(st, now, actions, ())
                return
            st.check_quorum_deadline = now + self.config.check_quorum_timeout_ms
        self._complete_parked(st, now, actions)
        if now >= st.begin_epoch_at:
            # Repeat BeginQuorumEpoch to voters that are not fetching: the first may be lost, or
            # the voter restarted without learning who leads.
            interval = self._begin_epoch_interval()
            for voter in self._others:
                last = st.replicas[voter].last_fetch_ms
                if last is None or now - last >= interval:
                    actions.append(Send(BeginQuorumEpochRequest(
                        src=self.node_id, dst=voter, leader_id=self.node_id,
                        leader_epoch=st.epoch)))
            st.begin_epoch_at = now + interval
            timeout = self.config.observer_session_timeout_ms
            for observer_id, observer in list(st.observers.items()):
                last = observer.last_fetch_ms
                if (last is None or now - last >= timeout) and observer_id not in st.parked:
                    del st.observers[observer_id]

    def _begin_epoch_interval(self) -> int:
        return min(self.config.request_timeout_ms, self.config.fetch_timeout_ms // 2)

    # -- transitions (each persists before anything that acts on it) ----------------------------

    def _persist(self, state: QuorumState, actions: Actions) -> None:
        if state != self._persisted:
            self._persisted = state
            if actions and isinstance(actions[-1], PersistState):
                # Nothing happened in between (e.g. a new epoch, then a vote in it): one write.
                actions[-1] = PersistState(state)
            else:
                actions.append(PersistState(state))

    def _leave_leadership(self, actions: Actions) -> None:
        # Later fetch offsets of this node must only cover durable entries.
        if isinstance(self._state, LeaderState) and self.log.end_offset > self._flushed_end:
            self._flushed_end = self.log.end_offset
            actions.append(FlushLog(self._flushed_end))

    def _become_unattached(self, epoch: int, now: int, actions: Actions) -> None:
        self._leave_leadership(actions)
        prev = self._state
        if self._passive:
            self._state = self._unattached_state(epoch, now)
            self._persist(QuorumState(epoch), actions)
            return
        if isinstance(prev, (UnattachedState, VotedState)) and prev.election_deadline < _NEVER:
            # Keep the running election timer: otherwise a lagging voter that stands again and
            # again (and is always rejected) would keep postponing everyone else's election.
            # (A probation that just ended left no timer running.)
            deadline = prev.election_deadline
        elif isinstance(prev, CandidateState):
            deadline = prev.backoff_until or prev.election_deadline
        else:
            deadline = self._election_deadline(now)
        self._state = UnattachedState(epoch, deadline)
        self._persist(QuorumState(epoch), actions)

    def _become_voted(self, candidate_id: int, now: int, actions: Actions) -> None:
        epoch = self.epoch
        self._state = VotedState(epoch, candidate_id, self._election_deadline(now))
        self._persist(QuorumState(epoch, voted_for=candidate_id), actions)

    def _become_follower(self, epoch: int, leader_id: int, now: int, actions: Actions) -> None:
        self._leave_leadership(actions)
        voted = self._persisted.voted_for if epoch == self._persisted.epoch else None
        st = FollowerState(epoch, leader_id, now + self.config.fetch_timeout_ms, now)
        self._state = st
        self._persist(QuorumState(epoch, voted, leader_id), actions)
        self._send_fetch(st, now, actions)

    def _lose_leader(self, st: FollowerState, now: int, actions: Actions) -> None:
        """An observer stops following: ask random voters who leads (KIP-595's bootstrap)."""
        unattached = UnattachedState(st.epoch, _NEVER, bootstrap_fetch_at=now)
        self._state = unattached
        self._persist(QuorumState(st.epoch), actions)
        self._send_bootstrap_fetch(unattached, now, actions)

    def _become_candidate(self, now: int, actions: Actions) -> None:
        if self._passive:
            raise RaftInvariantError(f"node {self.node_id} cannot stand for election (an "
                                     f"observer, or a voter in probation)")
        prev = self._state
        retries = prev.retries + 1 if isinstance(prev, CandidateState) else 1
        epoch = self.epoch + 1
        st = CandidateState(epoch, retries, self._election_deadline(now), now, {self.node_id})
        self._state = st
        self._persist(QuorumState(epoch, voted_for=self.node_id), actions)
        if len(st.granted) >= self._majority:
            self._become_leader(st, now, actions)
        else:
            self._send_vote_requests(st, now, actions)

    def _become_leader(self, candidate: CandidateState, now: int, actions: Actions) -> None:
        epoch = self.epoch
        start = self.log.end_offset
        st = LeaderState(
            epoch=epoch, epoch_start_offset=start,
            replicas={voter: ReplicaState() for voter in self._others},
            check_quorum_deadline=now + self.config.check_quorum_timeout_ms,
            begin_epoch_at=now + self._begin_epoch_interval())
        self._state = st
        self._persist(QuorumState(epoch, voted_for=self.node_id, leader_id=self.node_id), actions)
        # An entry of the new epoch, so the high watermark can move without waiting for a
        # proposal (entries of older epochs are only committed underneath it).
        record = LeaderChange(self.node_id, tuple(sorted(self.voters)),
                              tuple(sorted(candidate.granted)))
        change = LogEntry(start, epoch, record.encode(), True)
        actions.append(AppendToLog((change,)))
        actions.append(FlushLog(start + 1))
        self._flushed_end = start + 1
        for voter in self._others:
            actions.append(Send(BeginQuorumEpochRequest(
                src=self.node_id, dst=voter, leader_id=self.node_id, leader_epoch=epoch)))
        self._maybe_advance_high_watermark(st, now, actions)

    def _resign(self, st: LeaderState, now: int, actions: Actions,
                successors: tuple[int, ...]) -> None:
        self._leave_leadership(actions)
        resigned = ResignedState(st.epoch, self._election_deadline(now), now, successors)
        self._state = resigned
        self._send_end_quorum_epoch(resigned, now, actions)

    def _transition_to_newer_epoch(self, epoch: int, leader_id: int | None, now: int,
                                   actions: Actions) -> None:
        if leader_id is not None and leader_id != self.node_id:
            self._become_follower(epoch, leader_id, now, actions)
        else:
            self._become_unattached(epoch, now, actions)

    def _learn_leader(self, epoch: int, leader_id: int, now: int, actions: Actions) -> None:
        """Someone reports `leader_id` as the leader of our current epoch."""
        if epoch != self.epoch:
            return
        st = self._state
        if isinstance(st, FollowerState):
            if st.leader_id != leader_id:
                raise RaftInvariantError(
                    f"epoch {epoch} has two leaders: {st.leader_id} and {leader_id}")
        elif isinstance(st, (LeaderState, ResignedState)):
            if leader_id != self.node_id:
                raise RaftInvariantError(
                    f"node {self.node_id} leads epoch {epoch} but {leader_id} claims it too")
        elif leader_id == self.node_id:
            if self._probation:
                return  # we led this epoch before our disk was lost; it is over
            raise RaftInvariantError(f"node {self.node_id} is said to lead epoch {epoch}")
        else:
            self._become_follower(epoch, leader_id, now, actions)

    def _accept_response(self, epoch: int, leader_id: int, now: int, actions: Actions) -> bool:
        """Common handling of a response's epoch; True if it belongs to our current epoch."""
        leader = leader_id if leader_id != NO_LEADER else None
        if epoch > self.epoch:
            # An observer only moves to an epoch with a known leader: a leaderless one may be
            # a candidacy that never reaches the voters (its candidate lost its disk, say),
            # and no voter would ever answer a fetch in it.
            if not (self.is_observer and leader is None):
                self._transition_to_newer_epoch(epoch, leader, now, actions)
            return False
        if epoch < self.epoch:
            return False
        if leader is not None:
            self._learn_leader(epoch, leader, now, actions)
        return True

    def _known_leader(self) -> int:
        leader = self.leader_id
        return NO_LEADER if leader is None else leader

    def _take_pending(self) -> Actions:
        actions, self._pending = self._pending, []
        return actions

    # -- voting ---------------------------------------------------------------------------------

    def _candidate_log_ok(self, last_epoch: int, end_offset: int) -> bool:
        """A vote only goes to a candidate whose log is at least as up to date as ours."""
        return (last_epoch, end_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _can_grant_vote(self, request: VoteRequest) -> bool:
        if self._probation:
            return False  # our log may lack entries we once helped commit
        persisted = self._persisted
        if persisted.epoch == self.epoch and persisted.voted_for not in (None,
                                                                        request.candidate_id):
            return False  # never a second vote in one epoch, whatever the role says
        st = self._state
        if isinstance(st, UnattachedState):
            return self._candidate_log_ok(request.last_offset_epoch, request.last_offset)
        if isinstance(st, VotedState):
            return st.voted_for == request.candidate_id  # one vote per epoch; repeat it
        return False  # a candidate voted for itself; a leader or follower knows the leader

    def _on_vote_request(self, req: VoteRequest, now: int, actions: Actions) -> None:
        def reply(error: ErrorCode = NONE, granted: bool = False) -> None:
            actions.append(Send(VoteResponse(
                src=self.node_id, dst=req.src, error=error, leader_id=self._known_leader(),
                leader_epoch=self.epoch, vote_granted=granted)))

        if (self.is_observer or req.candidate_id not in self.voters
                or req.candidate_id != req.src):
            # Only voters vote, and only for voters. An observer does not even take the epoch
            # from a candidate: that would stall its fetches until the candidate wins.
            reply(INCONSISTENT_VOTER_SET)
            return
        if req.candidate_epoch < self.epoch:
            reply(FENCED_LEADER_EPOCH)
            return
        if req.candidate_epoch > self.epoch:
            self._become_unattached(req.candidate_epoch, now, actions)
        granted = self._can_grant_vote(req)
        if granted and isinstance(self._state, UnattachedState):
            self._become_voted(req.candidate_id, now, actions)
        reply(granted=granted)

    def _send_vote_requests(self, st: CandidateState, now: int, actions: Actions) -> None:
        end, last_epoch = self.log.end_offset, self.log.last_epoch
        for voter in self._others:
            if voter not in st.granted and voter not in st.rejected:
                actions.append(Send(VoteRequest(
                    src=self.node_id, dst=voter, candidate_epoch=st.epoch,
                    candidate_id=self.node_id, last_offset_epoch=last_epoch, last_offset=end)))
        st.resend_at = now + self.config.request_timeout_ms

    def _on_vote_response(self, resp: VoteResponse, now: int, actions: Actions) -> None:
        if not self._accept_response(resp.leader_epoch, resp.leader_id, now, actions):
            return
        st = self._state
        if not isinstance(st, CandidateState) or resp.src not in self.voters or resp.error != NONE:
            return
        if resp.vote_granted:
            st.granted.add(resp.src)
            st.rejected.discard(resp.src)
        elif resp.src not in st.granted:
            st.rejected.add(resp.src)
        if len(st.granted) >= self._majority:
            self._become_leader(st, now, actions)
        elif len(self.voters) - len(st.rejected) < self._majority and st.backoff_until is None:
            st.backoff_until = now + self._election_backoff(st.retries)

    # -- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------

    def _on_begin_quorum_epoch_request(self, req: BeginQuorumEpochRequest, now: int,
                                       actions: Actions) -> None:
        error = self._check_leader_claim(req.leader_id, req.src, req.leader_epoch, now, actions)
        if error == NONE and self.is_observer:
            # Leaders only announce themselves to voters; an observer learns the leader from
            # it but does not acknowledge as a voter would.
            error = INCONSISTENT_VOTER_SET
        actions.append(Send(BeginQuorumEpochResponse(
            src=self.node_id, dst=req.src, error=error, leader_id=self._known_leader(),
            leader_epoch=self.epoch)))

    def _check_leader_claim(self, leader_id: int, src: int, epoch: int, now: int,
                            actions: Actions) -> ErrorCode:
        """Validate and act on a request in which `leader_id` says it leads `epoch`."""
        if leader_id not in self.voters or leader_id != src:
            return INCONSISTENT_VOTER_SET
        if epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            self._transition_to_newer_epoch(epoch, leader_id, now, actions)
        else:
            self._learn_leader(epoch, leader_id, now, actions)
        return NONE

    def _on_begin_quorum_epoch_response(self, resp: BeginQuorumEpochResponse, now: int,
                                        actions: Actions) -> None:
        self._accept_response(resp.leader_epoch, resp.leader_id, now, actions)

    def _send_end_quorum_epoch(self, st: ResignedState, now: int, actions: Actions) -> None:
        for voter in self._others:
            if voter not in st.acked:
                actions.append(Send(EndQuorumEpochRequest(
                    src=self.node_id, dst=voter, leader_id=self.node_id, leader_epoch=st.epoch,
                    preferred_successors=st.preferred_successors)))
        st.resend_at = now + self.config.request_timeout_ms

    def _on_end_quorum_epoch_request(self, req: EndQuorumEpochRequest, now: int,
                                     actions: Actions) -> None:
        error = self._check_leader_claim(req.leader_id, req.src, req.leader_epoch, now, actions)
        st = self._state
        if error == NONE and isinstance(st, FollowerState) and st.leader_id == req.leader_id:
            # The first preferred successor stands at once, the others a little later (an
            # observer, never a successor, asks the voters who leads then).
            backoff = self._successor_backoff(req.preferred_successors)
            st.fetch_deadline = min(st.fetch_deadline, now + backoff)
        if error == NONE and self.is_observer:
            error = INCONSISTENT_VOTER_SET  # as for BeginQuorumEpoch
        actions.append(Send(EndQuorumEpochResponse(
            src=self.node_id, dst=req.src, error=error, leader_id=self._known_leader(),
            leader_epoch=self.epoch)))

    def _on_end_quorum_epoch_response(self, resp: EndQuorumEpochResponse, now: int,
                                      actions: Actions) -> None:
        if not self._accept_response(resp.leader_epoch, resp.leader_id, now, actions):
            return
        st = self._state
        if isinstance(st, ResignedState) and resp.error == NONE:
            st.acked.add(resp.src)

    # -- leader side of Fetch and FetchSnapshot -------------------------------------------------

    def _leader_request_error(self, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return UNKNOWN_LEADER_EPOCH
        if not isinstance(self._state, LeaderState):
            return NOT_LEADER_OR_FOLLOWER
        return None

    def _validate_fetch(self, offset: int, epoch: int) -> tuple[str, OffsetAndEpoch | None]:
        """Does a follower's log, ending at `offset` with `epoch`, match ours below `offset`?"""
        log = self.log
        snapshot = log.latest_snapshot
        if snapshot is not None:
            snapshot_id = snapshot.snapshot_id
            start = log.log_start_offset
            # Below the log start, or an epoch only the snapshot could vouch for: the follower
            # must load the snapshot.
            if (offset < start or (offset == start and epoch != snapshot_id.epoch)
                    or epoch < snapshot_id.epoch):
                return _SNAPSHOT, snapshot_id
        end = log.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return _DIVERGING, end
        return _VALID, None

    def _fetcher(self, st: LeaderState, replica_id: int, now: int) -> ReplicaState | None:
        """The leader's record of a fetching replica (an observer's is made on first sight)."""
        replica = st.replicas.get(replica_id)
        if replica is not None or replica_id in self.voters or replica_id < 0:
            return replica  # None for ourselves, or a fetch that names no replica
        observer = st.observers.get(replica_id)
        if observer is None:
            observer = st.observers[replica_id] = ReplicaState()
        observer.last_fetch_ms = now
        return observer

    @staticmethod
    def _replica_state(st: LeaderState, replica_id: int) -> ReplicaState | None:
        replica = st.replicas.get(replica_id)
        return replica if replica is not None else st.observers.get(replica_id)

    def _heard_from(self, st: LeaderState, voter: int, replica: ReplicaState, now: int) -> None:
        replica.last_fetch_ms = now
        st.fetched.add(voter)
        if len(st.fetched) + 1 >= self._majority:
            st.check_quorum_deadline = now + self.config.check_quorum_timeout_ms
            st.fetched.clear()

    def _high_watermark_candidate(self, st: LeaderState) -> int | None:
        """The offset a majority holds durably, if it may become the high watermark."""
        ends = sorted([self._flushed_end] + [r.end_offset for r in st.replicas.values()],
                      reverse=True)
        majority_end = ends[self._majority - 1]
        # Only once this epoch's first entry is on a majority: entries of older epochs are
        # committed by being under it, never by counting their own replicas (Raft's rule).
        return majority_end if majority_end > st.epoch_start_offset else None

    def _maybe_advance_high_watermark(self, st: LeaderState, now: int, actions: Actions) -> None:
        candidate = self._high_watermark_candidate(st)
        if candidate is not None and candidate > self._commit:
            self._commit = candidate
            actions.append(CommitUpTo(candidate))
            self._complete_parked(st, now, actions)

    def _flush_leader(self, st: LeaderState, now: int, actions: Actions) -> None:
        st.flush_deadline = None
        end = self.log.end_offset
        if end > self._flushed_end:
            actions.append(FlushLog(end))
            self._flushed_end = end
            self._maybe_advance_high_watermark(st, now, actions)

    def _on_fetch_request(self, req: FetchRequest, now: int, actions: Actions) -> None:
        error = self._leader_request_error(req.current_leader_epoch)
        st = self._state
        if error is not None or not isinstance(st, LeaderState):
            actions.append(Send(FetchResponse(
                src=self.node_id, dst=req.src, error=error or NOT_LEADER_OR_FOLLOWER,
                leader_id=self._known_leader(), leader_epoch=self.epoch,
                fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch)))
            return
        outcome, _ = self._validate_fetch(req.fetch_offset, req.last_fetched_epoch)
        replica = self._fetcher(st, req.replica_id, now)
        voter = req.replica_id in st.replicas
        if replica is not None:
            if voter:
                self._heard_from(st, req.replica_id, replica, now)
            if outcome == _VALID:
                # The follower holds (durably: it flushes before fetching) our entries below
                # its fetch offset. Only voters count towards the high watermark.
                replica.end_offset = req.fetch_offset
                if voter:
                    self._maybe_advance_high_watermark(st, now, actions)
        st.parked.pop(req.replica_id, None)  # a newer fetch replaces a held one
        if (replica is not None and outcome == _VALID and req.max_wait_ms > 0
                and req.fetch_offset == self.log.end_offset
                and replica.last_hw_sent == self._commit):
            # Nothing new for this follower: hold the fetch until there is, or max wait.
            wait = min(req.max_wait_ms, self.config.fetch_max_wait_ms)
            st.parked[req.replica_id] = ParkedFetch(req, now + wait)
            return
        actions.append(Send(self._fetch_response(st, req)))

    def _fetch_response(self, st: LeaderState, req: FetchRequest) -> FetchResponse:
        outcome, position = self._validate_fetch(req.fetch_offset, req.last_fetched_epoch)
        records: tuple[LogEntry, ...] = ()
        if outcome == _VALID:
            records = self.log.read(req.fetch_offset, self.config.fetch_max_entries)
            replica = self._replica_state(st, req.replica_id)
            if replica is not None:
                replica.last_hw_sent = self._commit
        return FetchResponse(
            src=self.node_id, dst=req.src, leader_id=self.node_id, leader_epoch=st.epoch,
            high_watermark=self._commit, records=records,
            diverging_epoch=position if outcome == _DIVERGING else None,
            snapshot_id=position if outcome == _SNAPSHOT else None,
            fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch)

    def _parked_has_news(self, st: LeaderState, replica_id: int, parked: ParkedFetch) -> bool:
        replica = self._replica_state(st, replica_id)
        return (replica is None or self.log.end_offset > parked.request.fetch_offset
                or self._commit > replica.last_hw_sent)

    def _complete_parked(self, st: LeaderState, now: int, actions: Actions) -> None:
        for replica_id, parked in list(st.parked.items()):
            if now >= parked.deadline or self._parked_has_news(st, replica_id, parked):
                del st.parked[replica_id]
                actions.append(Send(self._fetch_response(st, parked.request)))

    def _on_fetch_snapshot_request(self, req: FetchSnapshotRequest, now: int,
                                   actions: Actions) -> None:
        def reply(error: ErrorCode = NONE, size: int = 0, data: bytes = b"") -> None:
            actions.append(Send(FetchSnapshotResponse(
                src=self.node_id, dst=req.src, error=error, leader_id=self._known_leader(),
                leader_epoch=self.epoch, snapshot_id=req.snapshot_id, size=size,
                position=req.position, data=data)))

        error = self._leader_request_error(req.current_leader_epoch)
        st = self._state
        if error is not None or not isinstance(st, LeaderState):
            reply(error or NOT_LEADER_OR_FOLLOWER)
            return
        replica = self._fetcher(st, req.replica_id, now)
        if replica is not None and req.replica_id in st.replicas:
            self._heard_from(st, req.replica_id, replica, now)
        snapshot = self.log.latest_snapshot
        if snapshot is None or snapshot.snapshot_id != req.snapshot_id:
            reply(SNAPSHOT_NOT_FOUND)
            return
        # Keep this snapshot until the follower has it and has fetched past it.
        st.snapshot_pinned_until = now + self.config.request_timeout_ms
        if not 0 <= req.position <= len(snapshot.data):
            reply(POSITION_OUT_OF_RANGE)
            return
        size = max(1, min(req.max_bytes, self.config.snapshot_chunk_bytes))
        reply(size=len(snapshot.data), data=snapshot.data[req.position:req.position + size])

    # -- follower side ------------------------------------------------------------------------

    def _send_fetch(self, st: FollowerState, now: int, actions: Actions,
                    end: int | None = None, last_epoch: int | None = None) -> None:
        """Fetch from the leader at our log end (given explicitly if this input changed it)."""
        if st.download is not None:
            self._send_fetch_snapshot(st, now, actions)
            return
        actions.append(Send(FetchRequest(
            src=self.node_id, dst=st.leader_id, replica_id=self.node_id,
            current_leader_epoch=st.epoch,
            fetch_offset=self.log.end_offset if end is None else end,
            last_fetched_epoch=self.log.last_epoch if last_epoch is None else last_epoch,
            max_wait_ms=self.config.fetch_max_wait_ms)))
        st.next_fetch_at = now + self.config.request_timeout_ms  # resend if unanswered

    def _send_bootstrap_fetch(self, st: UnattachedState, now: int, actions: Actions) -> None:
        """An observer without a leader fetches from a random voter: the answer names the
        leader (an error with its id and epoch, or records if the voter leads)."""
        actions.append(Send(FetchRequest(
            src=self.node_id, dst=self.random.choice(self._others), replica_id=self.node_id,
            current_leader_epoch=st.epoch, fetch_offset=self.log.end_offset,
            last_fetched_epoch=self.log.last_epoch, max_wait_ms=0)))
        st.bootstrap_fetch_at = now + self.config.request_timeout_ms  # resend if unanswered

    def _advance_commit(self, offset: int, actions: Actions) -> None:
        if offset > self._commit:
            self._commit = offset
            actions.append(CommitUpTo(offset))

    def _on_fetch_response(self, resp: FetchResponse, now: int, actions: Actions) -> None:
        before = self._state
        accepted = self._accept_response(resp.leader_epoch, resp.leader_id, now, actions)
        st = self._state
        if st is not before:
            return  # this answer named the leader, and a Fetch to it is on its way
        if isinstance(st, UnattachedState) and st.bootstrap_fetch_at is not None:
            # The voter we asked cannot name a leader we can follow (it knows none, or it is
            # behind us): ask another one soon.
            st.bootstrap_fetch_at = min(st.bootstrap_fetch_at,
                                        now + self.config.retry_backoff_ms)
            return
        if not accepted:
            return
        if (not isinstance(st, FollowerState) or resp.src != st.leader_id
                or st.download is not None):
            return
        log = self.log
        if resp.fetch_offset != log.end_offset or resp.last_fetched_epoch != log.last_epoch:
            return  # answers a fetch from before our log last changed
        if resp.error == NOT_LEADER_OR_FOLLOWER:
            # Our leader gave this epoch up (it resigned, or restarted and cannot resume it):
            # stop fetching and stand after the backoff, as if told by EndQuorumEpoch (an
            # observer asks the voters who leads instead). A late answer to a Fetch sent
            # before the leader was elected looks the same, so a successful answer from it in
            # the meantime resets the deadline.
            st.fetch_deadline = min(st.fetch_deadline, now + self._successor_backoff(()))
            st.next_fetch_at = st.fetch_deadline
            return
        if resp.error != NONE:
            st.next_fetch_at = min(st.next_fetch_at, now + self.config.retry_backoff_ms)
            return
        st.fetch_deadline = now + self.config.fetch_timeout_ms
        if resp.diverging_epoch is not None:
            self._truncate_diverging(st, resp.diverging_epoch, now, actions)
            return
        if resp.snapshot_id is not None:
            st.download = SnapshotDownload(resp.snapshot_id)
            self._send_fetch_snapshot(st, now, actions)
            return
        end, last_epoch = log.end_offset, log.last_epoch
        if self._probation and not resp.records:
            # We hold everything the leader of this epoch has, so every committed entry:
            # votes based on our log are sound again.
            self._probation = False
        if resp.records:
            if resp.records[0].offset != end:
                raise RaftInvariantError(
                    f"records start at {resp.records[0].offset}, log ends at {end}")
            actions.append(AppendToLog(resp.records))
            end = resp.records[-1].offset + 1
            last_epoch = resp.records[-1].epoch
            # Durable before the next Fetch tells the leader we have them.
            actions.append(FlushLog(end))
            self._flushed_end = end
        # Our log matches the leader's below `end`, so its high watermark applies up to there.
        self._advance_commit(min(resp.high_watermark, end), actions)
        self._send_fetch(st, now, actions, end, last_epoch)

    def _truncate_diverging(self, st: FollowerState, diverging: OffsetAndEpoch, now: int,
                            actions: Actions) -> None:
        # The leader's log ends epoch `diverging.epoch` at `diverging.offset`. Below both that
        # and our own end of that epoch the logs agree; above it ours has entries the leader
        # does not. Several rounds may be needed when many epochs diverge.
        log = self.log
        local = log.end_offset_for_epoch(diverging.epoch)
        target = max(min(diverging.offset, local.offset), log.log_start_offset)
        if target < self._commit:
            raise RaftInvariantError(
                f"leader {st.leader_id} asks to truncate to {target}, below the high watermark "
                f"{self._commit}")
        if target >= log.end_offset:
            raise RaftInvariantError(f"diverging epoch {diverging} does not shorten a log "
                                     f"ending at {log.end_offset}")
        last_epoch = log.epoch_at(target - 1)
        actions.append(TruncateLog(target))
        self._flushed_end = min(self._flushed_end, target)
        self._send_fetch(st, now, actions, target, last_epoch)

    def _send_fetch_snapshot(self, st: FollowerState, now: int, actions: Actions) -> None:
        assert st.download is not None
        actions.append(Send(FetchSnapshotRequest(
            src=self.node_id, dst=st.leader_id, replica_id=self.node_id,
            current_leader_epoch=st.epoch, snapshot_id=st.download.snapshot_id,
            position=len(st.download.data), max_bytes=self.config.snapshot_chunk_bytes)))
        st.next_fetch_at = now + self.config.request_timeout_ms

    def _on_fetch_snapshot_response(self, resp: FetchSnapshotResponse, now: int,
                                    actions: Actions) -> None:
        if not self._accept_response(resp.leader_epoch, resp.leader_id, now, actions):
            return
        st = self._state
        if not isinstance(st, FollowerState) or resp.src != st.leader_id:
            return
        download = st.download
        if download is None or resp.snapshot_id != download.snapshot_id:
            return
        if resp.error != NONE or (not resp.data and resp.size > len(download.data)):
            # Usually a newer snapshot replaced this one: start over with a Fetch.
            st.download = None
            st.next_fetch_at = min(st.next_fetch_at, now + self.config.retry_backoff_ms)
            return
        if resp.position != len(download.data):
            return  # a duplicate or an answer to an earlier request
        st.fetch_deadline = now + self.config.fetch_timeout_ms
        download.data += resp.data
        if len(download.data) < resp.size:
            self._send_fetch_snapshot(st, now, actions)
            return
        st.download = None
        snapshot = Snapshot(download.snapshot_id, bytes(download.data))
        offset = snapshot.snapshot_id.offset
        if offset < self._commit:
            raise RaftInvariantError(f"snapshot at {offset} is below the high watermark "
                                     f"{self._commit}")
        actions.append(InstallSnapshot(snapshot))
        self._flushed_end = offset
        self._commit = offset
        self._send_fetch(st, now, actions, offset, snapshot.snapshot_id.epoch)

    # -- snapshots --------------------------------------------------------------------------

    def _snapshot_due(self) -> bool:
        return self._commit - self.log.log_start_offset > self.config.snapshot_max_entries

    def _maybe_snapshot(self, now: int, actions: Actions) -> None:
        st = self._state
        if not self._snapshot_due() or (
                isinstance(st, LeaderState) and now < st.snapshot_pinned_until):
            return
        end = self._commit
        actions.append(SnapshotLog(OffsetAndEpoch(end, self.log.epoch_at(end - 1))))
