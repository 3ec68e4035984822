"""Configuration, the persisted quorum state, and the in-memory state of each Raft role.

Roles follow KRaft's QuorumState: Unattached (epoch known, no vote, no leader), Voted,
Candidate, Leader, Follower and Resigned (a leader that gave up its epoch and waits for a
successor). An observer (a node that is not a voter) is only ever Unattached, looking for the
leader, or Follower. All times are milliseconds on the driver's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from moldau.broker.raft.log import OffsetAndEpoch
from moldau.broker.raft.messages import FetchRequest


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # controller.quorum.election.timeout.ms: the actual timeout is this plus up to this again.
    election_timeout_ms: int = 1000
    # controller.quorum.fetch.timeout.ms: a follower that hears nothing from its leader for this
    # long starts an election; a leader not fetched from by a majority for check_quorum_ms resigns.
    fetch_timeout_ms: int = 2000
    # controller.quorum.election.backoff.max.ms
    election_backoff_max_ms: int = 1000
    # controller.quorum.request.timeout.ms: resend a request that got no answer after this long.
    request_timeout_ms: int = 2000
    # controller.quorum.retry.backoff.ms
    retry_backoff_ms: int = 20
    # How long a leader holds a fetch that has nothing new to return (a long poll).
    fetch_max_wait_ms: int = 500
    fetch_max_entries: int = 1000
    # controller.quorum.append.linger.ms: proposals wait this long for one shared fsync.
    append_linger_ms: int = 25
    # Snapshot the committed prefix when the log holds more committed entries than this.
    snapshot_max_entries: int = 20_000
    snapshot_chunk_bytes: int = 1 << 20
    # None: the fetch timeout.
    check_quorum_ms: int | None = None
    # A leader forgets an observer (drops it from DescribeQuorum) that has not fetched for this
    # long.
    observer_session_timeout_ms: int = 300_000

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms if self.check_quorum_ms is None else self.check_quorum_ms


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What a node persists (the quorum-state file) and reads back on start-up."""

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None


class Role(enum.Enum):
    UNATTACHED = "unattached"
    VOTED = "voted"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass(slots=True)
class UnattachedState:
    epoch: int
    election_deadline: int  # never, for an observer
    # Observers only: when to send the next Fetch to a random voter to learn who leads.
    bootstrap_fetch_at: int | None = None
    role = Role.UNATTACHED


@dataclass(slots=True)
class VotedState:
    epoch: int
    voted_for: int
    election_deadline: int
    role = Role.VOTED


@dataclass(slots=True)
class CandidateState:
    epoch: int
    retries: int  # elections this node has run in a row, for the backoff
    election_deadline: int
    resend_at: int  # resend VoteRequests to voters that have not answered
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until: int | None = None  # lost or timed out: wait, then stand again
    role = Role.CANDIDATE


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows about one voter (or observer) in its epoch."""

    end_offset: int = -1  # validated fetch offset: the voter's log matches ours below it
    last_fetch_ms: int | None = None
    last_hw_sent: int = -1


@dataclass(slots=True)
class ParkedFetch:
    request: FetchRequest
    deadline: int


@dataclass(slots=True)
class LeaderState:
    epoch: int
    # Offset of this epoch's LeaderChange entry: the high watermark may only move past it.
    epoch_start_offset: int
    replicas: dict[int, ReplicaState]
    check_quorum_deadline: int
    begin_epoch_at: int  # next round of BeginQuorumEpoch to voters that are not fetching
    fetched: set[int] = field(default_factory=set)  # voters heard since the check-quorum reset
    # Nodes outside the voters that fetch from this leader: reported by DescribeQuorum, never
    # counted for the high watermark or check-quorum.
    observers: dict[int, ReplicaState] = field(default_factory=dict)
    flush_deadline: int | None = None  # appended but not flushed: fsync at this time
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    # No new snapshot before this: a follower is downloading the current one, and a newer one
    # would delete it under the follower (forever, if snapshots come faster than downloads).
    snapshot_pinned_until: int = 0
    role = Role.LEADER


@dataclass(slots=True)
class SnapshotDownload:
    snapshot_id: OffsetAndEpoch
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class FollowerState:
    epoch: int
    leader_id: int
    fetch_deadline: int  # no word from the leader by then: stand for election
    next_fetch_at: int  # send (or resend) a Fetch at this time
    download: SnapshotDownload | None = None
    role = Role.FOLLOWER


@dataclass(slots=True)
class ResignedState:
    epoch: int
    election_deadline: int
    resend_at: int
    preferred_successors: tuple[int, ...]
    acked: set[int] = field(default_factory=set)
    role = Role.RESIGNED


State = UnattachedState | VotedState | CandidateState | LeaderState | FollowerState \
    | ResignedState
