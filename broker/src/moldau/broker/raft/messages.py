"""Messages of the controller quorum (KIP-595 and KIP-630) as plain dataclasses.

Each carries the fields of Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and
FetchSnapshot APIs that the Raft state machine needs; the network layer maps them to and from
the wire schemas. `src` and `dst` are node ids: on the wire they come from the connection (and
the request header's correlation id pairs a response with its request).
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.broker.raft.log import LogEntry, OffsetAndEpoch
from moldau.errors import ErrorCode

__all__ = [
    "FENCED_LEADER_EPOCH", "INCONSISTENT_VOTER_SET", "NONE", "NOT_LEADER_OR_FOLLOWER", "NO_LEADER",
    "POSITION_OUT_OF_RANGE", "SNAPSHOT_NOT_FOUND", "UNKNOWN_LEADER_EPOCH",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse", "EndQuorumEpochRequest",
    "EndQuorumEpochResponse", "ErrorCode", "FetchRequest", "FetchResponse",
    "FetchSnapshotRequest", "FetchSnapshotResponse", "Message", "VoteRequest", "VoteResponse",
]

NONE = ErrorCode.none
# The request's epoch is older than the receiver's.
FENCED_LEADER_EPOCH = ErrorCode.fenced_leader_epoch
# The request's epoch is newer than the receiver's: the receiver is the stale one.
UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_leader_epoch
# A leader-only request reached a node that is not the leader of that epoch.
NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower
# The sender is not one of the receiver's voters.
INCONSISTENT_VOTER_SET = ErrorCode.inconsistent_voter_set
# FetchSnapshot for a snapshot the leader no longer has (a newer one replaced it).
SNAPSHOT_NOT_FOUND = ErrorCode.snapshot_not_found
POSITION_OUT_OF_RANGE = ErrorCode.position_out_of_range

NO_LEADER = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    src: int
    dst: int

    @property
    def epoch(self) -> int:
        """The epoch the sender claims; the sender must have persisted at least this epoch."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest(Message):
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset (exclusive)

    @property
    def epoch(self) -> int:
        return self.candidate_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse(Message):
    error: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int  # the responder's epoch
    vote_granted: bool = False

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochRequest(Message):
    leader_id: int
    leader_epoch: int

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochResponse(Message):
    error: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochRequest(Message):
    leader_id: int
    leader_epoch: int
    # Voters in the order they should try to take over, most caught-up first.
    preferred_successors: tuple[int, ...] = ()

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochResponse(Message):
    error: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest(Message):
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int  # the follower's log end offset
    last_fetched_epoch: int  # epoch of the follower's last entry (or of its snapshot)
    max_wait_ms: int = 0  # how long the leader may hold the request when it has nothing new

    @property
    def epoch(self) -> int:
        return self.current_leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse(Message):
    error: ErrorCode = NONE
    leader_id: int = NO_LEADER  # current leader as the responder knows it
    leader_epoch: int
    high_watermark: int = -1
    records: tuple[LogEntry, ...] = ()
    # Set when the follower's log diverges: the leader's end offset for the largest epoch it has
    # that is <= the follower's last fetched epoch. The follower truncates and fetches again.
    diverging_epoch: OffsetAndEpoch | None = None
    # Set when the fetch offset is below the leader's log start: fetch this snapshot instead.
    snapshot_id: OffsetAndEpoch | None = None
    # Position of the request this answers. Not on the wire: the driver copies it from the
    # request that the correlation id names, so a stale or duplicated response is recognised.
    fetch_offset: int = -1
    last_fetched_epoch: int = -1

    @property
    def epoch(self) -> int:
        return self.leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotRequest(Message):
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int  # byte offset of the wanted chunk
    max_bytes: int

    @property
    def epoch(self) -> int:
        return self.current_leader_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotResponse(Message):
    error: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = 0  # total bytes of the snapshot
    position: int = 0
    data: bytes = b""

    @property
    def epoch(self) -> int:
        return self.leader_epoch
