"""Deterministic simulation of a controller quorum under faults, checking safety on every step.

One seed fixes everything: the nodes' random timeouts, a virtual clock, a network that loses,
delays, duplicates and reorders messages and partitions nodes, crashes (possibly halfway through
a node's actions) that lose whatever was not fsynced, restarts, graceful resignations and client
proposals. Runs alternate chaos phases with calm ones (network healed, every node up); a calm
phase must elect a leader and commit a probe proposal on every node within LIVENESS_MS.

Besides the voters, each run has one or two observers (nodes outside the voters, drawn from the
seed unless --observers says), which crash, get partitioned and propose like the voters.

Checked on every step: election safety, log matching, leader completeness, state-machine safety,
one vote per node and epoch, and that nothing leaves a node before the state it depends on is
persisted; every LeaderChange entry names a voter, the voters and a majority of them that
elected it. Observers never vote, stand or lead, send nothing but fetches and answers, and never
apply an offset before a voter committed it (their applied prefix is the voters'); a calm phase
also waits for every observer to apply its probe, so observers catch up once partitions heal.
The "lost-disk" profile also wipes a voter's log and quorum state now and then and restarts it
in probation (node.py's lost_state); the vote record keeps its old votes for other candidates,
so a forgotten vote used twice is caught.

    python -m moldau.broker.raft.simulation --seed N [--nodes 3] [--observers K] [--steps S] -v
    python -m moldau.broker.raft.simulation --seeds 1000 --profile lost-disk
    python -m moldau.broker.raft.simulation --seeds 1000 [--start 0] [--nodes 5]
    python -m moldau.broker.raft.simulation --soak --seeds 100000 [--jobs 2]
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing
import os
import random
import struct
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TextIO

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
from moldau.broker.raft.log import LogEntry, RaftLog, Snapshot
from moldau.broker.raft.messages import (
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteResponse,
)
from moldau.broker.raft.node import LeaderChange, NotLeader, RaftNode
from moldau.broker.raft.state import QuorumState, RaftConfig, Role

LIVENESS_MS = 30_000  # a calm phase must commit a probe on every node within this much time
DEFAULT_STEPS = 2000
# "mixed" draws fault rates and batch sizes from each seed; "churn" fetches one entry at a time
# and often crashes leaders just after their election, the ground for committing an entry of an
# older epoch too early (Raft's "figure 8"); "lost-disk" is "mixed" where a voter also loses its
# whole directory now and then (one at a time) and restarts in probation (lost_state).
PROFILES = ("mixed", "churn", "lost-disk")

NodeFactory = Callable[..., RaftNode]

# What an observer may send: fetches, and answers (a vote refused) to whatever reached it.
_OBSERVER_MESSAGES = (FetchRequest, FetchSnapshotRequest, VoteResponse, BeginQuorumEpochResponse,
                      EndQuorumEpochResponse, FetchResponse, FetchSnapshotResponse)


class Violation(Exception):
    """A safety or liveness property failed."""


class DurableLog(RaftLog):
    """A RaftLog that remembers what an fsync made durable, so a crash can lose the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._durable_end = 0
        # Durable entries from `_durable_end` on that an unsynced truncation removed: a crash
        # before the next fsync brings them back, as it would on a real disk.
        self._lost: list[LogEntry] = []

    def truncate(self, end_offset: int) -> None:
        if end_offset < self._durable_end:
            removed = [self.entry(o) for o in range(end_offset, self._durable_end)]
            self._lost = removed + self._lost
            self._durable_end = end_offset
        super().truncate(end_offset)

    def flush(self) -> None:
        self._durable_end = self.end_offset
        self._lost = []

    def snapshot(self, end_offset: int, epoch: int, state: bytes) -> None:
        self.flush()  # the driver syncs the log before it writes a snapshot over its prefix
        super().snapshot(end_offset, epoch, state)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        super().install_snapshot(snapshot)
        self.flush()

    def crash(self) -> None:
        super().truncate(self._durable_end)
        if self._lost:
            super().append(self._lost)
        self.flush()


_SM_STATE = struct.Struct(">qI")


class StateMachine:
    """The replicated state of the simulation: how many entries were applied, and a digest."""

    def __init__(self, applied: int = 0, digest: int = 0) -> None:
        self.applied = applied
        self.digest = digest

    def apply(self, entry: LogEntry) -> None:
        self.digest = zlib.crc32(b"%d:%s" % (entry.epoch, entry.payload), self.digest)
        self.applied += 1

    def snapshot(self) -> bytes:
        # Padded so that a snapshot takes several FetchSnapshot chunks.
        return _SM_STATE.pack(self.applied, self.digest) + bytes(self.applied % 13)

    @classmethod
    def load(cls, data: bytes) -> StateMachine:
        applied, digest = _SM_STATE.unpack_from(data)
        return cls(applied, digest)


@dataclass
class SimNode:
    node_id: int
    observer: bool = False
    log: DurableLog = field(default_factory=DurableLog)
    quorum: QuorumState = field(default_factory=QuorumState)  # what survives a crash
    raft: RaftNode | None = None
    sm: StateMachine | None = None
    incarnation: int = 0
    tick_token: int = 0
    tick_at: int | None = None
    checked_leader_epochs: set[int] = field(default_factory=set)
    lost_state: bool = False  # lost its directory; kept (like the driver's marker) until caught up

    @property
    def alive(self) -> bool:
        return self.raft is not None


@dataclass
class SimResult:
    seed: int
    nodes: int
    steps_budget: int
    profile: str = "mixed"
    observers: int = 0
    steps: int = 0
    virtual_ms: int = 0
    violation: str | None = None
    violation_step: int | None = None
    detail: str | None = None
    leaders: int = 0
    committed: int = 0
    crashes: int = 0
    snapshots_installed: int = 0
    disks_lost: int = 0
    calm_phases: int = 0
    slowest_calm_ms: int = 0  # longest time a calm phase took to commit its probe everywhere

    @property
    def ok(self) -> bool:
        return self.violation is None

    def reproduce(self) -> str:
        profile = f" --profile {self.profile}" if self.profile != "mixed" else ""
        return (f".venv/bin/python -m moldau.broker.raft.simulation --seed {self.seed} "
                f"--nodes {self.nodes} --observers {self.observers} "
                f"--steps {self.steps_budget}{profile} -v")

    def report(self) -> str:
        if self.ok:
            return (f"seed {self.seed}: ok, {self.steps} steps, {self.virtual_ms} ms, "
                    f"{self.leaders} leaders, {self.committed} committed")
        return (f"seed {self.seed} ({self.nodes} nodes, {self.observers} observers) violated "
                f"at step {self.violation_step}: "
                f"{self.violation}\n  reproduce: {self.reproduce()}")


class Checker:
    """Global history shared by all nodes, against which every step is checked."""

    def __init__(self, voters: Sequence[int]) -> None:
        self.voters = tuple(sorted(voters))
        self.leaders: dict[int, int] = {}  # epoch -> the node that led it
        # (offset, epoch) -> (payload, epoch of the entry before it): log matching, by induction
        # over offsets, from checking each entry against its predecessor when it is appended.
        self.entries: dict[tuple[int, int], tuple[bytes, int]] = {}
        self.committed: list[LogEntry] = []  # the entry applied at each offset
        # Epoch in which each offset was first committed: leaders of later epochs must hold it
        # (a leader of an older epoch can still win an election late, and need not).
        self.commit_epochs: list[int] = []
        self.digests: list[int] = [0]  # state-machine digest after the first i entries
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> candidate

    def on_append(self, node: SimNode, entries: Sequence[LogEntry]) -> None:
        previous = node.log.last_epoch
        for entry in entries:
            key = (entry.offset, entry.epoch)
            known = self.entries.get(key)
            if known is None:
                self.entries[key] = (entry.payload, previous)
            elif known != (entry.payload, previous):
                raise Violation(
                    f"log matching: node {node.node_id} appends {show(entry)} at offset "
                    f"{entry.offset} after epoch {previous}; elsewhere that offset and epoch hold "
                    f"{known[0]!r} after epoch {known[1]}")
            if entry.control and known is None:
                self.check_leader_change(entry)
            previous = entry.epoch

    def check_leader_change(self, entry: LogEntry) -> None:
        try:
            change = LeaderChange.decode(entry.payload)
        except ValueError as exc:
            raise Violation(f"control entry {entry.offset}:{entry.epoch} is not a "
                            f"LeaderChangeMessage: {exc}") from exc
        granting = set(change.granting_voters)
        if (change.leader_id not in self.voters or change.voters != self.voters
                or change.leader_id not in granting or not granting <= set(self.voters)
                or len(granting) <= len(self.voters) // 2):
            raise Violation(f"LeaderChange at {entry.offset}:{entry.epoch} is {change}; the "
                            f"voters are {self.voters}")

    def on_apply(self, node: SimNode, entry: LogEntry, sm: StateMachine, epoch: int) -> bool:
        """Check an entry a node applies in `epoch`; True if nobody had applied it before."""
        offset = entry.offset
        if offset < len(self.committed):
            if self.committed[offset] != entry:
                raise Violation(
                    f"state-machine safety: node {node.node_id} applies {show(entry)} at offset "
                    f"{offset}, where {show(self.committed[offset])} was applied before")
            if self.digests[offset + 1] != sm.digest:
                raise Violation(f"node {node.node_id}'s state at offset {offset + 1} differs")
            return False
        if offset > len(self.committed):
            raise Violation(f"node {node.node_id} applies offset {offset} but only "
                            f"{len(self.committed)} offsets were ever committed")
        self.committed.append(entry)
        self.commit_epochs.append(epoch)
        self.digests.append(sm.digest)
        return True

    def check_leader_has_committed(self, node: SimNode, epoch: int, start: int = 0,
                                   upto: int | None = None) -> None:
        """Leader completeness: `node`, leading `epoch`, holds every entry committed in an
        earlier epoch (between offsets `start` and `upto`)."""
        log = node.log
        end = len(self.committed) if upto is None else upto
        if start == 0 and log.log_start_offset > 0:
            snap_start = log.log_start_offset
            snapshot = log.latest_snapshot
            assert snapshot is not None
            if snap_start >= len(self.digests) or \
                    StateMachine.load(snapshot.data).digest != self.digests[snap_start]:
                raise Violation(f"leader {node.node_id}'s snapshot at {snap_start} differs from "
                                f"the committed state")
        for offset in range(max(start, log.log_start_offset), end):
            if self.commit_epochs[offset] >= epoch:
                continue
            if offset >= log.end_offset:
                raise Violation(
                    f"leader completeness: leader {node.node_id} of epoch {epoch} ends at "
                    f"{log.end_offset} but offset {offset} was committed in epoch "
                    f"{self.commit_epochs[offset]}")
            entry = log.entry(offset)
            if entry != self.committed[offset]:
                raise Violation(
                    f"leader completeness: leader {node.node_id} of epoch {epoch} has "
                    f"{show(entry)} at offset {offset}, but {show(self.committed[offset])} was "
                    f"committed there in epoch {self.commit_epochs[offset]}")


def describe(obj: object) -> str:
    """A one-line description of a message or action for traces."""
    if isinstance(obj, Send):
        msg = obj.message
        return f"send {msg.src}->{msg.dst} {describe(msg)}"
    if isinstance(obj, AppendToLog):
        return f"append {_entries(obj.entries)}"
    if isinstance(obj, InstallSnapshot):
        return f"install snapshot {obj.snapshot.snapshot_id}"
    parts = []
    for f in fields(obj):  # type: ignore[arg-type]
        if f.name in ("src", "dst"):
            continue
        value = getattr(obj, f.name)
        if f.name == "records":
            value = _entries(value)
        elif f.name == "data" and isinstance(value, bytes):
            value = f"<{len(value)} bytes>"
        elif f.name == "error":
            value = value.name
        parts.append(f"{f.name}={value}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def show(entry: LogEntry) -> str:
    """offset:epoch:payload, with LC for a LeaderChange control entry."""
    payload = "LC" if entry.control else entry.payload.decode(errors="replace")
    return f"{entry.offset}:{entry.epoch}:{payload}"


def _entries(entries: Sequence[LogEntry]) -> str:
    if not entries:
        return "[]"
    shown = " ".join(show(e) for e in entries[:6])
    return f"[{shown}{' ...' if len(entries) > 6 else ''}]"


_CHAOS = "chaos"
_CALM = "calm"


class Simulation:
    def __init__(self, seed: int, nodes: int = 3, steps: int = DEFAULT_STEPS, *,
                 verbose: bool = False, node_factory: NodeFactory = RaftNode,
                 profile: str = "mixed", out: TextIO | None = None,
                 observers: int | None = None) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}")
        churn = profile == "churn"
        self.profile = profile
        self.seed = seed
        self.rng = random.Random(seed)
        self.budget = steps
        self.verbose = verbose
        self.out = out or sys.stdout
        self.node_factory = node_factory
        rng = self.rng
        # Small batches, frequent snapshots and short chunks so that every path gets exercised.
        self.config = RaftConfig(
            request_timeout_ms=rng.choice([700, 1000, 2000]),
            retry_backoff_ms=rng.choice([20, 50]),
            fetch_max_entries=1 if churn else rng.choice([1, 2, 3, 5, 10]),
            append_linger_ms=rng.choice([0, 5, 25, 60]),
            snapshot_max_entries=rng.randint(6, 60),
            snapshot_chunk_bytes=rng.randint(3, 24))
        self.mid_action_crash = rng.choice([0.0, 0.002, 0.01])
        # Client load stays below what replication moves with the configured batches.
        self.client_interval_ms = 80 if churn else rng.choice(
            [80, 250] if self.config.fetch_max_entries <= 2 else [20, 80, 250])
        self.fault_interval_ms = 500 if churn else rng.choice([200, 600, 1500])
        # New leaders cut off or dying in their first moments leave entries of their epoch on a
        # minority and followers half caught up: the ground on which a high watermark that
        # counted entries of older epochs would lose committed data.
        self.new_leader_crash = 0.05 if churn else rng.choice([0.0, 0.1, 0.3])
        self.new_leader_isolation = 0.9 if churn else rng.choice([0.0, 0.0, 0.2])
        drawn_observers = rng.choice([1, 2])  # drawn even when given, to keep the schedule
        observer_count = drawn_observers if observers is None else observers
        self.voters = tuple(range(1, nodes + 1))
        self.observers = tuple(range(nodes + 1, nodes + 1 + observer_count))
        self.nodes = {i: SimNode(i) for i in self.voters}
        self.nodes.update({i: SimNode(i, observer=True) for i in self.observers})
        self.checker = Checker(self.voters)
        self.queue: list[tuple[int, int, tuple[Any, ...]]] = []
        self._seq = 0
        self.now = 0
        self.step = 0
        self._same_time_steps = 0
        # Network.
        self.loss = 0.0
        self.duplicate = 0.0
        self.max_delay = 20
        self.groups: dict[int, int] | None = None
        # Phases.
        self.phase = _CHAOS
        self.phase_id = 0
        self.calm_start = 0
        self.probe: tuple[int, bytes, int] | None = None  # (offset, payload, proposed at)
        self.done = False
        self.values = 0
        self.result = SimResult(seed, nodes, steps, profile, observer_count)

    # -- plumbing ---------------------------------------------------------------------------------

    def _push(self, at: int, event: tuple[Any, ...]) -> None:
        self._seq += 1
        heapq.heappush(self.queue, (at, self._seq, event))

    def _trace(self, text: str) -> None:
        self.out.write(f"{self.now:>8} #{self.step:<6} {text}\n")

    # -- running ------------------------------------------------------------------------------

    def run(self) -> SimResult:
        result = self.result
        try:
            for node in self.nodes.values():
                self._start(node)
            self._begin_chaos()
            self._push(self.now + 1, ("client",))
            while not self.done:
                at, _, event = heapq.heappop(self.queue)
                if at == self.now:
                    self._same_time_steps += 1
                    if self._same_time_steps > 10_000:
                        raise Violation(f"livelock: 10000 events at time {at} without progress")
                else:
                    self._same_time_steps = 0
                self.now = at
                getattr(self, "_on_" + event[0])(*event[1:])
        except Violation as exc:
            result.violation = str(exc)
        except Exception as exc:  # an exception in a node is a failure of the run, not the tool
            result.violation = f"{type(exc).__name__}: {exc}"
            result.detail = traceback.format_exc()
        if result.violation is not None:
            result.violation_step = self.step
            if self.verbose:
                self._trace(f"VIOLATION {result.violation}")
                if result.detail:
                    self.out.write(result.detail)
        result.steps = self.step
        result.virtual_ms = self.now
        result.leaders = len(self.checker.leaders)
        result.committed = len(self.checker.committed)
        return result

    def _begin_chaos(self) -> None:
        self.phase = _CHAOS
        self.phase_id += 1
        if self.verbose:
            self._trace("--- chaos ---")
        self._push(self.now + self.rng.randint(2000, 8000), ("calm", self.phase_id))
        self._push(self.now + int(self.rng.expovariate(1 / self.fault_interval_ms)),
                   ("fault", self.phase_id))

    def _begin_calm(self) -> None:
        self.phase = _CALM
        self.phase_id += 1
        self.calm_start = self.now
        self.probe = None
        self.result.calm_phases += 1
        self.loss, self.duplicate, self.max_delay, self.groups = 0.0, 0.0, 20, None
        if self.verbose:
            self._trace("--- calm: network healed, all nodes up ---")
        for node in self.nodes.values():
            if not node.alive:
                self._start(node)
        self._push(self.now + 100, ("probe", self.phase_id))

    def _on_calm(self, phase_id: int) -> None:
        if phase_id == self.phase_id and self.phase == _CHAOS:
            self._begin_calm()

    def _counted_step(self) -> None:
        self.step += 1
        if self.phase == _CHAOS and self.step >= self.budget:
            self._begin_calm()

    # -- nodes ----------------------------------------------------------------------------------

    def _start(self, node: SimNode) -> None:
        snapshot = node.log.latest_snapshot
        node.sm = StateMachine.load(snapshot.data) if snapshot is not None else StateMachine()
        if node.sm.applied != node.log.log_start_offset:
            raise Violation(f"node {node.node_id}'s snapshot does not match its log start")
        node.incarnation += 1
        node.tick_at = None
        kwargs = {"lost_state": True} if node.lost_state else {}
        node.raft = self.node_factory(
            node.node_id, self.voters, node.quorum, node.log,
            random.Random(self.rng.getrandbits(64)), config=self.config, now_ms=self.now,
            **kwargs)
        if self.verbose:
            self._trace(f"n{node.node_id} starts as {node.raft.role.value} in epoch "
                        f"{node.raft.epoch}, log [{node.log.log_start_offset}, "
                        f"{node.log.end_offset})")
        self._after_step(node)

    def _crash(self, node: SimNode) -> None:
        node.raft = None
        node.sm = None
        node.log.crash()
        node.tick_at = None
        self.result.crashes += 1
        if self.verbose:
            self._trace(f"n{node.node_id} CRASHES; durable log [{node.log.log_start_offset}, "
                        f"{node.log.end_offset})")
        if self.phase == _CHAOS:
            self._push(self.now + self.rng.randint(50, 3000),
                       ("restart", node.node_id, node.incarnation))

    def _lose_disk(self, node: SimNode) -> None:
        if node.alive:
            self._crash(node)
        else:
            self._push(self.now + self.rng.randint(50, 3000),
                       ("restart", node.node_id, node.incarnation))
        node.log = DurableLog()
        node.quorum = QuorumState()
        node.lost_state = True
        # Its own candidacies died with the disk (only its quorum state could resume one), so
        # voting again in those epochs cannot make two leaders; a vote it gave another
        # candidate is still on record.
        votes = self.checker.votes
        for key in [k for k, candidate in votes.items() if k[0] == candidate == node.node_id]:
            del votes[key]
        self.result.disks_lost += 1
        if self.verbose:
            self._trace(f"n{node.node_id} LOSES ITS DISK")

    def _on_isolate(self, node_id: int, phase_id: int) -> None:
        if phase_id == self.phase_id and self.phase == _CHAOS:
            self.groups = {n: int(n == node_id) for n in self.nodes}
            if self.verbose:
                self._trace(f"partition [{node_id}] | the rest")

    def _on_restart(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if not node.alive and node.incarnation == incarnation:
            self._start(node)

    def _on_crash(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.alive and node.incarnation == incarnation and self.phase == _CHAOS:
            self._crash(node)

    def _after_step(self, node: SimNode) -> None:
        raft = node.raft
        if raft is None:
            return
        if node.lost_state and not raft.in_probation:
            node.lost_state = False
        if (node.observer or raft.in_probation) and raft.role not in (Role.UNATTACHED,
                                                                     Role.FOLLOWER):
            who = "observer" if node.observer else "voter in probation"
            raise Violation(f"{who} {node.node_id} is {raft.role.value} in epoch {raft.epoch}")
        if raft.role is Role.LEADER:
            epoch = raft.epoch
            leader = self.checker.leaders.setdefault(epoch, node.node_id)
            if leader != node.node_id:
                raise Violation(f"election safety: nodes {leader} and {node.node_id} both "
                                f"lead epoch {epoch}")
            if epoch not in node.checked_leader_epochs:
                node.checked_leader_epochs.add(epoch)
                if self.verbose:
                    self._trace(f"n{node.node_id} is LEADER of epoch {epoch}")
                self.checker.check_leader_has_committed(node, epoch)
                if self.phase == _CHAOS and self.rng.random() < self.new_leader_crash:
                    self._push(self.now + self.rng.randint(0, 100),
                               ("crash", node.node_id, node.incarnation))
                elif self.phase == _CHAOS and self.rng.random() < self.new_leader_isolation:
                    self._push(self.now + self.rng.randint(0, 60),
                               ("isolate", node.node_id, self.phase_id))
        deadline = max(raft.next_deadline_ms(), self.now)
        if node.tick_at != deadline:
            node.tick_token += 1
            node.tick_at = deadline
            self._push(deadline, ("tick", node.node_id, node.tick_token))

    def _on_tick(self, node_id: int, token: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or token != node.tick_token:
            return
        node.tick_at = None
        self._counted_step()
        actions = node.raft.tick(self.now)
        if self.verbose and actions:
            self._trace(f"n{node_id} tick")
        self._execute(node, actions)
        self._after_step(node)

    def _on_deliver(self, message: Message) -> None:
        node = self.nodes[message.dst]
        if node.raft is None or self._cut(message.src, message.dst):
            return
        self._counted_step()
        if self.verbose:
            self._trace(f"n{message.dst} <- n{message.src} {describe(message)}")
        self._execute(node, node.raft.handle(message, self.now))
        self._after_step(node)

    # -- the driver: executing actions ------------------------------------------------------------

    def _execute(self, node: SimNode, actions: Actions) -> None:
        crash_at = len(actions)
        if self.phase == _CHAOS and actions and self.rng.random() < self.mid_action_crash:
            crash_at = self.rng.randrange(len(actions))
        for index, action in enumerate(actions):
            if index == crash_at:
                if self.verbose:
                    self._trace(f"n{node.node_id} crashes before {describe(action)}")
                self._crash(node)
                return
            if self.verbose:
                self._trace(f"  n{node.node_id} {describe(action)}")
            self._apply(node, action)

    def _apply(self, node: SimNode, action: Action) -> None:
        raft = node.raft
        assert raft is not None and node.sm is not None
        log = node.log
        if isinstance(action, Send):
            self._check_send(node, action.message)
            self._send(action.message)
        elif isinstance(action, PersistState):
            state = action.state
            if state.epoch < node.quorum.epoch:
                raise Violation(f"node {node.node_id} persists epoch {state.epoch} after "
                                f"{node.quorum.epoch}")
            if node.observer and (state.voted_for is not None
                                  or state.leader_id == node.node_id):
                raise Violation(f"observer {node.node_id} persists {state}")
            if state.voted_for is not None:
                key = (node.node_id, state.epoch)
                earlier = self.checker.votes.setdefault(key, state.voted_for)
                if earlier != state.voted_for:
                    raise Violation(f"node {node.node_id} votes for {earlier} and "
                                    f"{state.voted_for} in epoch {state.epoch}")
            node.quorum = state
        elif isinstance(action, AppendToLog):
            self.checker.on_append(node, action.entries)
            log.append(action.entries)
        elif isinstance(action, FlushLog):
            if action.end_offset > log.end_offset:
                raise Violation(f"node {node.node_id} flushes to {action.end_offset} beyond its "
                                f"log end {log.end_offset}")
            log.flush()
        elif isinstance(action, TruncateLog):
            if raft.role is Role.LEADER:
                raise Violation(f"leader {node.node_id} truncates its log")
            if action.end_offset < node.sm.applied:
                raise Violation(f"node {node.node_id} truncates to {action.end_offset}, below "
                                f"its applied offset {node.sm.applied}")
            log.truncate(action.end_offset)
        elif isinstance(action, CommitUpTo):
            self._commit(node, action.offset)
        elif isinstance(action, SnapshotLog):
            snapshot_id = action.snapshot_id
            if node.sm.applied != snapshot_id.offset:
                raise Violation(f"node {node.node_id} snapshots at {snapshot_id.offset} with "
                                f"{node.sm.applied} applied")
            log.snapshot(snapshot_id.offset, snapshot_id.epoch, node.sm.snapshot())
        elif isinstance(action, InstallSnapshot):
            snapshot = action.snapshot
            loaded = StateMachine.load(snapshot.data)
            offset = snapshot.snapshot_id.offset
            if loaded.applied != offset:
                raise Violation(f"snapshot {snapshot.snapshot_id} holds {loaded.applied} entries")
            if offset >= len(self.checker.digests) or self.checker.digests[offset] != \
                    loaded.digest:
                raise Violation(f"node {node.node_id} installs snapshot {snapshot.snapshot_id} "
                                f"that differs from the committed state")
            if offset < node.sm.applied:
                raise Violation(f"node {node.node_id} installs a snapshot at {offset} below its "
                                f"applied offset {node.sm.applied}")
            log.install_snapshot(snapshot)
            node.sm = loaded
            self.result.snapshots_installed += 1
        else:
            raise Violation(f"unknown action {action!r}")

    def _check_send(self, node: SimNode, message: Message) -> None:
        if node.observer and (not isinstance(message, _OBSERVER_MESSAGES) or (
                isinstance(message, VoteResponse) and message.vote_granted)):
            raise Violation(f"observer {node.node_id} sends {describe(message)}")
        # The ordering rule: state a message depends on is durable before the message leaves.
        if message.epoch > node.quorum.epoch:
            raise Violation(f"node {node.node_id} sends epoch {message.epoch} with epoch "
                            f"{node.quorum.epoch} persisted: {describe(message)}")
        if isinstance(message, VoteResponse) and message.vote_granted and (
                node.quorum.epoch != message.leader_epoch
                or node.quorum.voted_for != message.dst):
            raise Violation(f"node {node.node_id} grants a vote to {message.dst} in epoch "
                            f"{message.leader_epoch} with {node.quorum} persisted")

    def _commit(self, node: SimNode, offset: int) -> None:
        sm = node.sm
        raft = node.raft
        assert sm is not None and raft is not None
        if offset <= sm.applied:
            raise Violation(f"node {node.node_id} commits up to {offset} after applying "
                            f"{sm.applied}")
        if offset > node.log.end_offset:
            raise Violation(f"node {node.node_id} commits up to {offset} beyond its log end "
                            f"{node.log.end_offset}")
        first_new = None
        for o in range(sm.applied, offset):
            entry = node.log.entry(o)
            sm.apply(entry)
            if self.checker.on_apply(node, entry, sm, raft.epoch) and first_new is None:
                if node.observer:
                    # The leader applies what it commits before any answer says so.
                    raise Violation(f"observer {node.node_id} applies offset {o} before any "
                                    f"voter committed it")
                first_new = o
        if first_new is None:
            return
        # Leaders of later epochs must hold what was just committed, even if elected before.
        for other in self.nodes.values():
            if other.raft is not None and other.raft.role is Role.LEADER \
                    and other.raft.epoch > raft.epoch:
                self.checker.check_leader_has_committed(other, other.raft.epoch, first_new,
                                                        offset)

    # -- network ------------------------------------------------------------------------------

    def _cut(self, a: int, b: int) -> bool:
        return self.groups is not None and self.groups[a] != self.groups[b]

    def _send(self, message: Message) -> None:
        rng = self.rng
        if self._cut(message.src, message.dst) or (self.loss and rng.random() < self.loss):
            return
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        for _ in range(copies):
            self._push(self.now + rng.randint(1, self.max_delay), ("deliver", message))

    # -- clients, faults, probes --------------------------------------------------------------

    def _propose(self, node: SimNode, payloads: list[bytes]) -> tuple[int, int] | None:
        """Propose at `node`, or at the leader it names; (node id, offset of the first)."""
        for _ in range(2):
            raft = node.raft
            if raft is None:
                return None
            outcome = raft.propose(payloads, self.now)
            if isinstance(outcome, NotLeader):
                if outcome.leader_id is None:
                    return None
                node = self.nodes[outcome.leader_id]
                continue
            if self.verbose:
                self._trace(f"n{node.node_id} client proposes {payloads} at "
                            f"{outcome.base_offset}")
            self._execute(node, outcome.actions)
            self._after_step(node)
            return node.node_id, outcome.base_offset
        return None

    def _on_client(self) -> None:
        alive = [n for n in self.nodes.values() if n.alive]
        if alive:
            self._counted_step()
            count = self.rng.randint(1, 3)
            payloads = [b"v%d" % (self.values + i) for i in range(count)]
            self.values += count
            self._propose(self.rng.choice(alive), payloads)
        self._push(self.now + 1 + int(self.rng.expovariate(1 / self.client_interval_ms)),
                   ("client",))

    def _on_fault(self, phase_id: int) -> None:
        if phase_id != self.phase_id or self.phase != _CHAOS:
            return
        self._counted_step()
        if self.phase != _CHAOS:  # the step budget just ended chaos
            return
        rng = self.rng
        alive = [n for n in self.nodes.values() if n.alive]
        kind = rng.choices(["crash", "partition", "heal", "network", "resign", "lose-disk"],
                           weights=[3, 2, 2, 2, 1, 1 if self.profile == "lost-disk" else 0])[0]
        if kind == "crash" and alive:
            self._crash(rng.choice(alive))
        elif kind == "lose-disk":
            # One at a time: a majority of lost disks loses committed data whatever is done.
            if not any(n.lost_state for n in self.nodes.values()):
                self._lose_disk(self.nodes[rng.choice(self.voters)])
        elif kind == "partition":
            ids = list(self.nodes)
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            self.groups = {n: (0 if i < cut else 1) for i, n in enumerate(ids)}
            if self.verbose:
                self._trace(f"partition {sorted(ids[:cut])} | {sorted(ids[cut:])}")
        elif kind == "heal":
            self.groups = None
            if self.verbose:
                self._trace("partition healed")
        elif kind == "network":
            self.loss = rng.choice([0.0, 0.05, 0.2, 0.5])
            self.duplicate = rng.choice([0.0, 0.05, 0.3])
            self.max_delay = rng.choice([5, 20, 100, 400])
            if self.verbose:
                self._trace(f"network loss={self.loss} duplicate={self.duplicate} "
                            f"max_delay={self.max_delay}")
        elif kind == "resign":
            # A graceful restart: the leader hands over, then its process goes down.
            for node in alive:
                if node.raft is not None and node.raft.role is Role.LEADER:
                    if self.verbose:
                        self._trace(f"n{node.node_id} resigns before a restart")
                    self._execute(node, node.raft.resign(self.now))
                    self._after_step(node)
                    self._push(self.now + rng.randint(0, 300),
                               ("crash", node.node_id, node.incarnation))
                    break
        self._push(self.now + 1 + int(rng.expovariate(1 / self.fault_interval_ms)),
                   ("fault", self.phase_id))

    def _on_probe(self, phase_id: int) -> None:
        if phase_id != self.phase_id or self.phase != _CALM:
            return
        committed = self.checker.committed
        if self.probe is not None:
            offset, payload, proposed_at = self.probe
            if offset < len(committed) and committed[offset].payload == payload and all(
                    n.sm is not None and n.sm.applied > offset for n in self.nodes.values()):
                took = self.now - self.calm_start
                self.result.slowest_calm_ms = max(self.result.slowest_calm_ms, took)
                if self.verbose:
                    self._trace(f"probe at {offset} committed on every node, {took} ms into "
                                f"the calm")
                if self.step >= self.budget:
                    self.done = True
                else:
                    self._begin_chaos()
                return
            lost = offset < len(committed) and committed[offset].payload != payload
            if lost or self.now - proposed_at > 5000:
                self.probe = None
        if self.now - self.calm_start > LIVENESS_MS:
            leaders = [(n.node_id, n.raft.epoch) for n in self.nodes.values()
                       if n.raft is not None and n.raft.role is Role.LEADER]
            raise Violation(f"liveness: nothing committed on every node {LIVENESS_MS} ms into "
                            f"a calm phase (leaders: {leaders})")
        if self.probe is None:
            leaders = [n for n in self.nodes.values()
                       if n.raft is not None and n.raft.role is Role.LEADER]
            if leaders:
                leader = max(leaders, key=lambda n: n.raft.epoch if n.raft else 0)
                payload = b"probe%d" % self.phase_id
                proposed = self._propose(leader, [payload])
                if proposed is not None:
                    self.probe = (proposed[1], payload, self.now)
        self._push(self.now + 50, ("probe", phase_id))


def run_seed(seed: int, nodes: int = 3, steps: int = DEFAULT_STEPS,
             node_factory: NodeFactory = RaftNode, profile: str = "mixed",
             observers: int | None = None) -> SimResult:
    return Simulation(seed, nodes, steps, node_factory=node_factory, profile=profile,
                      observers=observers).run()


def _run_args(args: tuple[int, int, int, NodeFactory, str, int | None]) -> SimResult:
    return run_seed(*args)


def run_seeds(seeds: Iterable[int], nodes: int = 3, steps: int = DEFAULT_STEPS, *,
              jobs: int = 1, node_factory: NodeFactory = RaftNode, profile: str = "mixed",
              observers: int | None = None, stop_on_failure: bool = False,
              progress: Callable[[SimResult], None] | None = None) -> list[SimResult]:
    """Run many seeds, in `jobs` processes; results in seed order (or up to a failure).

    `observers`: how many observers each run has; None draws one or two from each seed.
    """
    work = [(seed, nodes, steps, node_factory, profile, observers) for seed in seeds]
    results: list[SimResult] = []
    if jobs <= 1:
        for item in work:
            result = _run_args(item)
            results.append(result)
            if progress:
                progress(result)
            if stop_on_failure and not result.ok:
                break
        return results
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        for result in pool.imap(_run_args, work, chunksize=4):
            results.append(result)
            if progress:
                progress(result)
            if stop_on_failure and not result.ok:
                pool.terminate()
                break
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m moldau.broker.raft.simulation",
        description="Deterministic fault-injection runs of the controller quorum's Raft.")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed of a multi-seed run")
    parser.add_argument("--nodes", type=int, default=3, help="how many voters")
    parser.add_argument("--observers", type=int, default=None,
                        help="how many observers (default: one or two, drawn from the seed)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--profile", choices=PROFILES, default="mixed")
    parser.add_argument("--soak", action="store_true",
                        help="long run: keep going after failures, report every 1000 seeds")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-v", "--verbose", action="store_true", help="trace every step")
    args = parser.parse_args(argv)

    if args.seed is not None:
        result = Simulation(args.seed, args.nodes, args.steps, verbose=args.verbose,
                            profile=args.profile, observers=args.observers).run()
        print(result.report())
        if result.detail and not args.verbose:
            print(result.detail)
        return 0 if result.ok else 1

    seeds = range(args.start, args.start + args.seeds)
    began = time.monotonic()
    failures: list[SimResult] = []
    totals = {"steps": 0, "ms": 0, "leaders": 0, "committed": 0, "snapshots": 0, "crashes": 0,
              "disks_lost": 0, "slowest_calm": 0}

    def progress(result: SimResult) -> None:
        totals["steps"] += result.steps
        totals["ms"] += result.virtual_ms
        totals["leaders"] += result.leaders
        totals["committed"] += result.committed
        totals["snapshots"] += result.snapshots_installed
        totals["crashes"] += result.crashes
        totals["disks_lost"] += result.disks_lost
        totals["slowest_calm"] = max(totals["slowest_calm"], result.slowest_calm_ms)
        if not result.ok:
            failures.append(result)
            print(result.report(), flush=True)
        done = result.seed - args.start + 1
        if args.soak and done % 1000 == 0:
            print(f"{done} seeds, {len(failures)} failures, "
                  f"{time.monotonic() - began:.0f} s", flush=True)

    results = run_seeds(seeds, args.nodes, args.steps, jobs=args.jobs, profile=args.profile,
                        observers=args.observers, stop_on_failure=not args.soak,
                        progress=progress)
    elapsed = time.monotonic() - began
    print(f"{len(results)} seeds x {args.nodes} nodes, {totals['steps']} steps, "
          f"{totals['ms'] / 1000:.0f} s simulated, {totals['leaders']} elections won, "
          f"{totals['committed']} entries committed, {totals['snapshots']} snapshots installed, "
          f"{totals['crashes']} crashes, {totals['disks_lost']} disks lost, slowest recovery in "
          f"a calm phase "
          f"{totals['slowest_calm']} ms; {len(failures)} failing; {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
