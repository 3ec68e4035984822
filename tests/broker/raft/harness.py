"""A minimal synchronous driver for unit tests: executes actions, keeps sent messages aside.

Nothing is delivered unless a test says so, so each test controls exactly which messages
arrive and when.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from moldau.broker.raft.actions import (
    Action,
    AppendToLog,
    CommitUpTo,
    FlushLog,
    InstallSnapshot,
    PersistState,
    Send,
    SnapshotLog,
    TruncateLog,
)
from moldau.broker.raft.log import LogEntry, RaftLog
from moldau.broker.raft.messages import Message
from moldau.broker.raft.node import NotLeader, Proposal, RaftNode
from moldau.broker.raft.state import QuorumState, RaftConfig

CONFIG = RaftConfig(request_timeout_ms=1000)


def make_log(epochs: Iterable[int], start: int = 0) -> RaftLog:
    """A log whose entry at offset start+i has epoch epochs[i] and payload b"e<epoch>o<off>"."""
    log = RaftLog()
    entries = [LogEntry(start + i, e, b"e%do%d" % (e, start + i)) for i, e in enumerate(epochs)]
    log.append(entries)
    return log


class Driver:
    def __init__(self, node_id: int, voters: Iterable[int], *, log: RaftLog | None = None,
                 state: QuorumState | None = None, config: RaftConfig = CONFIG, seed: int = 0,
                 now: int = 0, node_class: type[RaftNode] = RaftNode,
                 lost_state: bool = False) -> None:
        self.node_id = node_id
        self.voters = tuple(voters)
        self.log = log if log is not None else RaftLog()
        self.persisted = state or QuorumState()
        self.config = config
        self.node_class = node_class
        self.applied: list[LogEntry] = []
        self.applied_offset = self.log.log_start_offset
        self.outbox: list[Message] = []
        self.history: list[Action] = []
        self.flushed_end = self.log.end_offset
        self.node = node_class(node_id, self.voters, self.persisted, self.log,
                               random.Random(seed), config=config, now_ms=now,
                               lost_state=lost_state)

    def restart(self, now: int = 0, seed: int = 1) -> None:
        self.outbox.clear()
        self.applied_offset = self.log.log_start_offset
        self.node = self.node_class(self.node_id, self.voters, self.persisted, self.log,
                                    random.Random(seed), config=self.config, now_ms=now)

    def run(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            self.history.append(action)
            if isinstance(action, PersistState):
                self.persisted = action.state
            elif isinstance(action, AppendToLog):
                self.log.append(action.entries)
            elif isinstance(action, FlushLog):
                self.flushed_end = action.end_offset
            elif isinstance(action, TruncateLog):
                self.log.truncate(action.end_offset)
            elif isinstance(action, Send):
                self.outbox.append(action.message)
            elif isinstance(action, CommitUpTo):
                for offset in range(self.applied_offset, action.offset):
                    self.applied.append(self.log.entry(offset))
                self.applied_offset = action.offset
            elif isinstance(action, SnapshotLog):
                sid = action.snapshot_id
                assert self.applied_offset == sid.offset
                self.log.snapshot(sid.offset, sid.epoch, b"state@%d" % sid.offset)
            elif isinstance(action, InstallSnapshot):
                self.log.install_snapshot(action.snapshot)
                self.applied_offset = action.snapshot.snapshot_id.offset
        return actions

    def tick(self, now: int) -> list[Action]:
        return self.run(self.node.tick(now))

    def handle(self, message: Message, now: int) -> list[Action]:
        return self.run(self.node.handle(message, now))

    def propose(self, payloads: list[bytes], now: int) -> Proposal | NotLeader:
        outcome = self.node.propose(payloads, now)
        if isinstance(outcome, Proposal):
            self.run(outcome.actions)
        return outcome

    def take(self, kind: type | None = None, dst: int | None = None) -> list[Message]:
        """Remove and return the queued messages of a type (and destination)."""
        taken = [m for m in self.outbox
                 if (kind is None or isinstance(m, kind)) and (dst is None or m.dst == dst)]
        self.outbox = [m for m in self.outbox if m not in taken]
        return taken


class Cluster:
    """Drivers for every voter (ids 1..size) and observer (the ids after), and FIFO delivery of
    their messages on request."""

    def __init__(self, size: int = 3, *, observers: int = 0,
                 logs: dict[int, RaftLog] | None = None,
                 states: dict[int, QuorumState] | None = None,
                 config: RaftConfig = CONFIG) -> None:
        voters = tuple(range(1, size + 1))
        self.observers = tuple(range(size + 1, size + 1 + observers))
        logs = logs or {}
        states = states or {}
        self.drivers = {i: Driver(i, voters, log=logs.get(i), state=states.get(i),
                                  config=config, seed=i) for i in voters + self.observers}
        self.down: set[int] = set()

    def __getitem__(self, node_id: int) -> Driver:
        return self.drivers[node_id]

    def deliver(self, now: int, rounds: int = 200, drop: Iterable[int] = ()) -> None:
        """Deliver queued messages, and whatever they cause, until nothing is left.

        Messages to or from nodes in `drop` or `down` are discarded.
        """
        cut = set(drop) | self.down
        for _ in range(rounds):
            queued = [m for d in self.drivers.values() for m in d.outbox]
            if not queued:
                return
            for d in self.drivers.values():
                d.outbox.clear()
            for message in queued:
                if message.src in cut or message.dst in cut:
                    continue
                self.drivers[message.dst].handle(message, now)
        raise AssertionError("messages still flowing after many rounds")

    def run(self, now: int, until: int) -> int:
        """Tick nodes at their deadlines and deliver instantly, from `now` up to `until`."""
        while True:
            self.deliver(now)
            up = [d for i, d in self.drivers.items() if i not in self.down]
            upcoming = min(max(d.node.next_deadline_ms(), now) for d in up)
            if upcoming > until:
                return until
            now = upcoming
            for d in up:
                if d.node.next_deadline_ms() <= now:
                    d.tick(now)

    def elect(self, node_id: int, now: int) -> int:
        """Let `node_id` time out and win an election; returns the time after it."""
        driver = self.drivers[node_id]
        deadline = driver.node.next_deadline_ms()
        driver.tick(max(deadline, now))
        self.deliver(max(deadline, now))
        assert driver.node.leader_id == node_id, driver.node.role
        return max(deadline, now)
