"""What a `RaftNode` asks its driver to do, in the order the driver must do it.

Every input (`tick`, `handle`, `propose`, `resign`) returns a list of actions. The driver runs
all of them, in order, before it gives the node its next input; each action must be complete
(durable where it says so) before the next one starts. That ordering is what makes the protocol
safe: a vote or a new epoch is on disk before any message acting on it leaves the node, and a
follower's entries are on disk before its next Fetch reports them to the leader.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.broker.raft.log import LogEntry, OffsetAndEpoch, Snapshot
from moldau.broker.raft.messages import Message
from moldau.broker.raft.state import QuorumState


@dataclass(frozen=True, slots=True)
class PersistState:
    """Write the quorum state (epoch, vote, leader) and fsync it before the next action."""

    state: QuorumState


@dataclass(frozen=True, slots=True)
class AppendToLog:
    """Append entries at the log end. Not durable until a later FlushLog."""

    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class FlushLog:
    """Fsync the log up to `end_offset` (everything appended so far) before the next action."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Remove every entry at or after `end_offset` (a follower's divergent suffix)."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class CommitUpTo:
    """Offsets below `offset` are committed: apply them to the state machine, in order.

    Control entries take offsets but carry no state-machine record. A proposal is committed
    when its offset is below `offset` and the log still holds it with the proposal's epoch.
    """

    offset: int


@dataclass(frozen=True, slots=True)
class SnapshotLog:
    """Snapshot the state machine and drop the log prefix it covers.

    The state machine has applied exactly the offsets below `end_offset` when this action runs
    (every earlier CommitUpTo is done); the driver stores its state with
    `log.snapshot(end_offset, epoch, state)`.
    """

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """Replace the log with a snapshot fetched from the leader and load it into the state machine.

    Durable before the next action, like PersistState.
    """

    snapshot: Snapshot


Action = PersistState | AppendToLog | FlushLog | TruncateLog | Send | CommitUpTo | SnapshotLog \
    | InstallSnapshot
Actions = list[Action]
