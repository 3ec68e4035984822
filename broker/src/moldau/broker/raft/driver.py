"""Runs a `RaftNode` on asyncio against a disk log, a quorum-state file and a transport.

Every input of the node (timer ticks, messages, proposals, resignations) goes through one
queue and one task, so the node sees them one at a time and each input's actions are executed
completely, in order, before the next input: PersistState, FlushLog, TruncateLog,
SnapshotLog and InstallSnapshot are durable before the action after them starts (the file
work runs in a worker thread, awaited, so the event loop keeps serving the network
meanwhile), and a Send leaves only after everything before it. That is the contract of
actions.py.

Committed entries reach the state machine in offset order, control entries skipped; a
proposal completes with its last offset once a CommitUpTo covers it and the log still holds
it in the proposal's epoch. It fails (ProposalFailed) when its entries are truncated, when this
node stops leading the epoch it was proposed in, or when the driver closes. A failed
proposal may still have been committed by a later leader (as after any timeout in a
consensus system): the state machine sees exactly what committed.

The properties (role, epoch, leader, high watermark) show the node's state, which runs ahead
of the actions still being executed: a node reports itself leader as soon as it counts the
votes, while the quorum-state write of that may still be in progress.

Directory layout (as Kafka's `__cluster_metadata-0`): the `quorum-state` file, the log
segment and the snapshot checkpoints, all in one directory.

A driver whose `node_id` is not in `voters` runs an observer (a broker-only node, KIP-595):
it replicates and applies the committed log like a voter but never votes or leads, and
`propose` always raises NotLeaderError. Its transport only needs the voters' addresses: the
observer finds the leader by fetching from voters, and the leader is always a voter.
Leaders answer a fetch on the connection it came in on, so no node needs the observer's
address.

`lost_state=True` starts a voter whose directory was lost and recreated empty (a replaced
disk) in probation: it neither votes nor stands until it has caught up with a leader (see
node.py). A `lost-state` marker file in the directory keeps the probation across restarts
until then. With static voters the driver cannot tell such a directory from a new node's, so
whoever replaces a disk must say so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random as random_module
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from moldau.broker.log.checkpoint import atomic_write
from moldau.broker.raft.actions import (
    Action,
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
from moldau.broker.raft.disk_log import DiskRaftLog
from moldau.broker.raft.messages import FetchRequest, Message
from moldau.broker.raft.node import NotLeader, RaftNode
from moldau.broker.raft.quorum_store import QUORUM_STATE_FILE, QuorumStateStore
from moldau.broker.raft.state import LeaderState, QuorumState, RaftConfig, Role
from moldau.broker.raft.wire import QuorumInfo, quorum_info

__all__ = ["LOST_STATE_FILE", "DriverClosed", "NotLeaderError", "ProposalFailed", "RaftDriver",
           "StateMachine", "Transport"]

log = logging.getLogger("moldau.broker.raft")

LOST_STATE_FILE = "lost-state"
_APPLY_CHUNK = 1000
_MAX_WAIT_S = 3600.0
_CLOSE_TIMEOUT_S = 10.0


class Transport(Protocol):
    def send(self, message: Message) -> None:
        """Hand a message over for delivery; it may be lost, and nothing waits for it."""


class StateMachine(Protocol):
    def apply(self, offset: int, payload: bytes) -> None:
        """A committed record, in offset order."""

    def snapshot(self) -> bytes:
        """The state after every record applied so far."""

    def load(self, data: bytes) -> None:
        """Replace the state with a snapshot's."""


class NotLeaderError(Exception):
    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ProposalFailed(Exception):
    """The proposal is not known to be committed: truncated, leadership lost, or closed."""


class DriverClosed(ProposalFailed):
    pass


@dataclass(slots=True)
class _Pending:
    base_offset: int
    last_offset: int
    epoch: int
    future: asyncio.Future[int]


class RaftDriver:
    def __init__(self, node_id: int, voters: Iterable[int], directory: str,
                 state_machine: StateMachine, transport: Transport, *,
                 config: RaftConfig | None = None,
                 random: random_module.Random | None = None,
                 io_in_thread: bool = True, lost_state: bool = False) -> None:
        self.node_id = node_id
        self.voters = tuple(sorted(voters))
        self.directory = directory
        self.state_machine = state_machine
        self.transport = transport
        self.config = config or RaftConfig()
        self._random = random or random_module.Random()
        self._io_in_thread = io_in_thread
        self.log: DiskRaftLog | None = None
        self.store = QuorumStateStore(os.path.join(directory, QUORUM_STATE_FILE))
        self._lost_state = lost_state
        self._lost_state_path = os.path.join(directory, LOST_STATE_FILE)
        self._node: RaftNode | None = None
        self._inbox: collections.deque[tuple[Any, ...]] = collections.deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._applied = 0
        self._t0 = time.monotonic()
        self._wall_offset_ms = 0
        self.failure: BaseException | None = None
        self._stopping = False  # no more inputs: closing, or the node failed
        self._closed = False
        # DescribeQuorum bookkeeping, in the node's clock: when each replica (voter or
        # observer) last held all the leader had, and (time, leader end offset) at its
        # previous fetch.
        self._caught_up_ms: dict[int, int] = {}
        self._previous_fetch: dict[int, tuple[int, int]] = {}
        self._tracked_epoch = -1

    # -- life cycle -----------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    async def start(self) -> None:
        """Open the log and the quorum state, load the snapshot, and start running."""
        if self._task is not None:
            raise RuntimeError("already started")
        os.makedirs(self.directory, exist_ok=True)
        self.log = await self._io(DiskRaftLog, self.directory)
        try:
            persisted = await self._io(self.store.load)
        except BaseException:
            self.log.close()
            raise
        snapshot = self.log.latest_snapshot
        if snapshot is not None:
            self.state_machine.load(snapshot.data)
        self._applied = self.log.log_start_offset
        probation = self._lost_state or os.path.exists(self._lost_state_path)
        if probation:
            # Durable before the node can act, so that a crash does not end the probation.
            await self._io(atomic_write, self._lost_state_path, b"")
        self._lost_state = probation
        now = self.now_ms()
        self._wall_offset_ms = int(time.time() * 1000) - now
        self._node = RaftNode(self.node_id, self.voters, persisted or QuorumState(), self.log,
                              self._random, config=self.config, now_ms=now,
                              lost_state=probation)
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name=f"raft-{self.node_id}")

    async def close(self) -> None:
        """Stop: no more inputs are handled; pending proposals fail; the log is closed."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            # Let the input in progress finish its actions (a file operation in a worker
            # thread cannot be interrupted anyway), then the loop sees the flag and ends.
            try:
                await asyncio.wait_for(asyncio.shield(self._task), _CLOSE_TIMEOUT_S)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        self._fail_all(DriverClosed("the driver is closed"))
        if self.log is not None:
            self.log.close()

    # -- what callers see ---------------------------------------------------------------------

    @property
    def node(self) -> RaftNode:
        if self._node is None:
            raise RuntimeError("the driver is not started")
        return self._node

    @property
    def role(self) -> Role:
        return self.node.role

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @property
    def leader_id(self) -> int | None:
        return self.node.leader_id

    @property
    def high_watermark(self) -> int:
        return self.node.high_watermark

    @property
    def applied_offset(self) -> int:
        """Offsets below this have been handed to the state machine (or are in its snapshot)."""
        return self._applied

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._stopping

    def describe_quorum(self) -> QuorumInfo:
        return quorum_info(self.node, now_ms=self.now_ms(), wall_offset_ms=self._wall_offset_ms,
                           caught_up_ms=self._caught_up_ms)

    # -- inputs -------------------------------------------------------------------------------

    def handle(self, message: Message) -> None:
        """A message from another node (called by the transport, on the event loop)."""
        if not self._stopping:
            self._inbox.append(("message", message))
            self._wakeup.set()

    async def propose(self, records: Sequence[bytes]) -> int:
        """Append records if this node leads; the offset of the last once committed.

        Raises NotLeaderError at once when this node does not lead, ProposalFailed later.
        """
        future = self._submit("propose", list(records))
        return await future

    async def resign(self) -> None:
        """Hand leadership over to the most caught-up voter (no-op when not leading)."""
        await self._submit("resign")

    def _submit(self, kind: str, *args: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.running:
            future.set_exception(DriverClosed("the driver is not running"))
            return future
        self._inbox.append((kind, *args, future))
        self._wakeup.set()
        return future

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        node = self.node
        try:
            while not self._stopping:
                if self._inbox:
                    await self._step(self._inbox.popleft())
                    continue
                now = self.now_ms()
                deadline = node.next_deadline_ms()
                if deadline <= now:
                    await self._execute(node.tick(now))
                    continue
                self._wakeup.clear()
                if self._inbox:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(),
                                           min((deadline - now) / 1000, _MAX_WAIT_S))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # The node or the disk failed: stop rather than act on a state we cannot trust.
            log.exception("Raft node %d stopped", self.node_id)
            self.failure = exc
            self._stopping = True
            self._fail_all(ProposalFailed(f"the node failed: {exc!r}"))

    async def _step(self, item: tuple[Any, ...]) -> None:
        node = self.node
        kind = item[0]
        now = self.now_ms()
        if kind == "message":
            message = item[1]
            end_before = self.log.end_offset if self.log is not None else 0
            actions = node.handle(message, now)
            if isinstance(message, FetchRequest):
                self._track_fetch(message, now, end_before)
            await self._execute(actions)
        elif kind == "propose":
            records, future = item[1], item[2]
            if future.done():
                return
            if not records:
                future.set_exception(ValueError("nothing to propose"))
                return
            outcome = node.propose(records, now)
            if isinstance(outcome, NotLeader):
                future.set_exception(NotLeaderError(outcome.leader_id, outcome.epoch))
                return
            self._pending.append(_Pending(outcome.base_offset, outcome.last_offset,
                                          outcome.epoch, future))
            await self._execute(outcome.actions)
        elif kind == "resign":
            future = item[1]
            await self._execute(node.resign(now))
            if not future.done():
                future.set_result(None)

    def _track_fetch(self, request: FetchRequest, now: int, leader_end: int) -> None:
        """Record when a replica was last caught up with the leader (for DescribeQuorum)."""
        st = self.node.state
        if not isinstance(st, LeaderState):
            return
        if st.epoch != self._tracked_epoch:
            self._tracked_epoch = st.epoch
            self._caught_up_ms.clear()
            self._previous_fetch.clear()
        replica_id = request.replica_id
        replica = st.replicas.get(replica_id)
        if replica is None:
            replica = st.observers.get(replica_id)
        if replica is None or replica.end_offset != request.fetch_offset:
            return  # not a fetch position the leader validated
        if len(self._previous_fetch) > len(st.replicas) + len(st.observers):
            # Forget the observers the leader forgot (it drops those that stopped fetching).
            for gone in set(self._previous_fetch) - set(st.replicas) - set(st.observers):
                del self._previous_fetch[gone]
                self._caught_up_ms.pop(gone, None)
        if replica.end_offset >= leader_end:
            self._caught_up_ms[replica_id] = now
        else:
            previous = self._previous_fetch.get(replica_id)
            if previous is not None and replica.end_offset >= previous[1]:
                # It now holds what the leader held at its previous fetch.
                self._caught_up_ms[replica_id] = previous[0]
        self._previous_fetch[replica_id] = (now, leader_end)

    async def _io(self, function: Callable[..., Any], *args: Any) -> Any:
        if self._io_in_thread:
            return await asyncio.to_thread(function, *args)
        return function(*args)

    async def _execute(self, actions: Actions) -> None:
        for action in actions:
            await self._apply(action)
        self._check_leadership()
        if self._lost_state and not self.node.in_probation:
            # Caught up (and flushed: a fetch only reports durable entries): the probation
            # is over for good.
            await self._io(os.remove, self._lost_state_path)
            self._lost_state = False

    async def _apply(self, action: Action) -> None:
        disk = self.log
        assert disk is not None
        if isinstance(action, Send):
            self.transport.send(action.message)
        elif isinstance(action, PersistState):
            await self._io(self.store.save, action.state)
        elif isinstance(action, AppendToLog):
            disk.append(action.entries)  # a buffered write; durable at the next FlushLog
        elif isinstance(action, FlushLog):
            await self._io(disk.flush)
        elif isinstance(action, TruncateLog):
            await self._io(disk.truncate, action.end_offset)
            self._fail_pending(lambda p: p.last_offset >= action.end_offset,
                               ProposalFailed(f"truncated at {action.end_offset}"))
        elif isinstance(action, CommitUpTo):
            self._commit(action.offset)
        elif isinstance(action, SnapshotLog):
            sid = action.snapshot_id
            if self._applied != sid.offset:
                raise RuntimeError(f"snapshot at {sid.offset} with {self._applied} applied")
            state = self.state_machine.snapshot()
            await self._io(disk.snapshot, sid.offset, sid.epoch, state)
        elif isinstance(action, InstallSnapshot):
            snapshot = action.snapshot
            await self._io(disk.install_snapshot, snapshot)
            self.state_machine.load(snapshot.data)
            self._applied = snapshot.snapshot_id.offset
            self._fail_pending(lambda p: True, ProposalFailed("replaced by a snapshot"))
        else:
            raise TypeError(f"unknown action {action!r}")

    def _commit(self, offset: int) -> None:
        disk = self.log
        assert disk is not None
        while self._applied < offset:
            entries = disk.read(self._applied, min(offset - self._applied, _APPLY_CHUNK))
            if not entries:
                raise RuntimeError(f"commit up to {offset} beyond the log end {disk.end_offset}")
            for entry in entries:
                if not entry.control:
                    self.state_machine.apply(entry.offset, entry.payload)
                self._applied = entry.offset + 1
            # Resolve proposals whose entries are now applied, while the log still holds them.
            while self._pending and self._pending[0].last_offset < self._applied:
                pending = self._pending.popleft()
                if pending.future.done():
                    continue
                if disk.epoch_at(pending.last_offset) == pending.epoch:
                    pending.future.set_result(pending.last_offset)
                else:
                    pending.future.set_exception(ProposalFailed(
                        f"offset {pending.last_offset} committed with another epoch"))

    def _check_leadership(self) -> None:
        if not self._pending:
            return
        node = self.node
        leading = node.role is Role.LEADER
        self._fail_pending(lambda p: not leading or p.epoch != node.epoch,
                           ProposalFailed("leadership lost before the proposal committed"))

    def _fail_all(self, error: ProposalFailed) -> None:
        """Fail every pending proposal and every input not yet taken from the queue."""
        self._fail_pending(lambda p: True, error)
        for item in self._inbox:
            future = item[-1]
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_exception(error)
        self._inbox.clear()

    def _fail_pending(self, which: Callable[[_Pending], bool], error: ProposalFailed) -> None:
        kept: collections.deque[_Pending] = collections.deque()
        for pending in self._pending:
            if which(pending):
                if not pending.future.done():
                    pending.future.set_exception(error)
            else:
                kept.append(pending)
        self._pending = kept
