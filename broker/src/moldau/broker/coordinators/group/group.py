"""A classic consumer group: its members, generation, chosen protocol and offsets."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from moldau.broker.coordinators.group.offsets import CommittedOffset, PendingOffsets
from moldau.broker.coordinators.group.subscription import topics_of

__all__ = ["CommittedOffset", "Group", "GroupState", "JoinResult", "Member", "SyncResult"]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka allows only these moves; anything else is a bug, so it is checked.
_VALID_PREVIOUS = {
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass
class JoinResult:
    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    session_timer: asyncio.TimerHandle | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def cancel_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    pending_offsets: PendingOffsets = field(default_factory=PendingOffsets)  # transactional
    state_timestamp: int = -1
    join_timer: asyncio.TimerHandle | None = None
    join_deadline: float = 0.0  # loop time at which a pending join completes regardless
    initial_delay: bool = False  # waiting out group.initial.rebalance.delay.ms

    def transition(self, new_state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[new_state]:
            raise RuntimeError(f"group {self.group_id}: illegal move {self.state.value} -> "
                               f"{new_state.value}")
        self.state = new_state
        self.state_timestamp = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return not self.members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_timer()
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def shut_out(self, join_answer: JoinResult, sync_answer: SyncResult, now_ms: int) -> None:
        """This node stops coordinating the group: its timers stop, members waiting for a
        join or a sync get the answers given (with their own member id), and it is Dead."""
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None
        for pending in self.pending_members.values():
            pending.cancel()
        self.pending_members.clear()
        for member in self.members.values():
            member.cancel_timer()
            if member.awaiting_join and member.join_waiter is not None:
                member.join_waiter.set_result(replace(join_answer, member_id=member.member_id))
            if member.awaiting_sync and member.sync_waiter is not None:
                member.sync_waiter.set_result(sync_answer)
        self.transition(GroupState.DEAD, now_ms)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member fits if its protocol type matches and it shares a protocol."""
        if self.is_empty:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidates())

    def candidates(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes win."""
        candidates = self.candidates()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        # Ties go to the candidate some member listed first, for a stable choice.
        order = [name for member in self.members.values() for name, _ in member.protocols]
        return max(votes, key=lambda name: (votes[name], -order.index(name)))

    def all_joined(self) -> bool:
        return all(member.awaiting_join for member in self.members.values()) and \
            not self.pending_members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None when unknown."""
        if self.protocol_type != "consumer" or not self.protocol_name:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = topics_of(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def describe(self) -> dict[str, Any]:
        stable = self.state is GroupState.STABLE
        return {
            "group_id": self.group_id, "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(self.protocol_name)
                         if stable and self.protocol_name else b"",
                         "member_assignment": m.assignment if stable else b""}
                        for m in self.members.values()],
        }
