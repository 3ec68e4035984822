"""The classic group coordinator: Kafka's join/sync/heartbeat/leave protocol and offsets.

All group state lives on the event loop and is changed without awaiting in between, so each
request sees and leaves a consistent group. Requests that must wait (a join until the
rebalance completes, a sync until the leader's assignment arrives) wait on futures that the
state machine completes. Writes to `__consumer_offsets` start when the state they record
changes (so the log keeps that order); a commit or an assignment is acknowledged only once
its write is (with replication: on every in-sync replica), and state may move on while it
waits, so what follows a write checks the group again.

This node coordinates the groups of the `__consumer_offsets` partitions it leads, once
their groups are loaded (see loading.py).

Offsets committed in a transaction (TxnOffsetCommit) stay pending until the transaction's
marker is written into the group's partition, which markers_written() is told of
(see offsets.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from moldau.broker.coordinators.group.group import (
    CommittedOffset,
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from moldau.broker.coordinators.group.loading import PartitionLoader
from moldau.broker.coordinators.group.offsets import OpenTransactions, keep_latest
from moldau.broker.coordinators.group.records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from moldau.broker.coordinators.group.replay import Entry, Record, replay
from moldau.broker.coordinators.group.writes import GroupWriter, TxnProducer, Write
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.broker.groups")

Stable, Empty = GroupState.STABLE, GroupState.EMPTY
Preparing, Completing, Dead = (GroupState.PREPARING_REBALANCE,
                               GroupState.COMPLETING_REBALANCE, GroupState.DEAD)


@dataclass(frozen=True)
class GroupSettings:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, settings: GroupSettings, write: Write,
                 partition_exists: Callable[[str, int], bool],
                 coordinates: Callable[[str], bool] | None = None, *,
                 partitions: int = 1,
                 read: Callable[[int], Iterable[Entry]] | None = None) -> None:
        """`read` gives a partition's records and markers (called in a thread); with it, this node
        coordinates only the partitions it was told it leads, once loaded. Without it,
        every group that `coordinates` accepts is this node's, loaded with load()."""
        self.settings = settings
        self._writer = GroupWriter(write)
        self._partition_exists = partition_exists
        self._coordinates = coordinates or (lambda _group_id: True)
        self.partitions = partitions
        self.groups: dict[str, Group] = {}
        self._open_txns = OpenTransactions()
        # Partition being loaded -> transactions ended there meanwhile (producer id, commit):
        # the load may have read the log before their markers.
        self._ended_while_loading: dict[int, list[tuple[int, bool]]] = {}
        self._loader = None if read is None else PartitionLoader(
            read, self._install, self._unload_partition)

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def group_error(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates the group now; else NOT_COORDINATOR (ask
        FindCoordinator again) or COORDINATOR_LOAD_IN_PROGRESS (retry here)."""
        if self._loader is None:
            return ErrorCode.none if self._coordinates(group_id) else \
                ErrorCode.not_coordinator
        return self._loader.ownership.error(self.partition_of(group_id))

    def coordinates(self, group_id: str) -> bool:
        return self.group_error(group_id) is ErrorCode.none

    def listing_error(self) -> ErrorCode:
        """ListGroups answers what is loaded, and says when that is not everything."""
        if self._loader is not None and self._loader.ownership.loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    # --- partition leadership ------------------------------------------------------------

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool,
                             leader_epoch: int) -> None:
        """The replica manager's hook, called on the loop for every hosted partition."""
        if topic == OFFSETS_TOPIC:
            self.on_partition_leadership(partition, is_leader, leader_epoch)

    def on_partition_leadership(self, partition: int, is_leader: bool, epoch: int
                                ) -> asyncio.Task[None] | None:
        """Becoming leader schedules loading the partition's groups (the load, if one was
        started, is returned); losing it unloads them."""
        if self._loader is None:
            raise RuntimeError("per-partition coordination needs a `read` of the log")
        return self._loader.on_leadership(partition, is_leader, epoch)

    async def load_partitions(self, led: Iterable[tuple[int, int]]) -> None:
        """Start-up: load every (partition, leader epoch) this node leads and return when
        all are in memory, so a single node serves its groups from its first request."""
        for partition, epoch in led:
            self.on_partition_leadership(partition, True, epoch)
        await self.wait_for_loads()
        log.info("Loaded %d group(s) from __consumer_offsets", len(self.groups))

    async def wait_for_loads(self) -> None:
        """Until the loads under way have ended."""
        if self._loader is not None:
            await self._loader.wait()

    def _install(self, partition: int, groups: dict[str, Group]) -> None:
        ended = self._ended_while_loading.pop(partition, [])
        self._unload_partition(partition)  # nothing should be there; never keep two copies
        self._add_groups(groups)
        for producer_id, commit in ended:
            self.complete_transaction(producer_id, [partition], commit)
        self._activate(groups.values())

    def _add_groups(self, groups: dict[str, Group]) -> None:
        self.groups.update(groups)
        for group_id, group in groups.items():
            for producer_id in group.pending_offsets.producers():
                self._open_txns.add(producer_id, group_id)

    def _unload_partition(self, partition: int) -> int:
        self._ended_while_loading.pop(partition, None)
        unloading = [group for group_id, group in self.groups.items()
                     if self.partition_of(group_id) == partition]
        for group in unloading:
            self._unload_group(group)
        return len(unloading)

    def _unload_group(self, group: Group) -> None:
        """Kafka's onGroupUnloaded: members waiting here are told to find the new
        coordinator; the group is Dead here."""
        group.shut_out(JoinResult(ErrorCode.not_coordinator.value, ""),
                       SyncResult(ErrorCode.not_coordinator.value), _now_ms())
        self._forget(group)

    def _forget(self, group: Group) -> None:
        del self.groups[group.group_id]
        for producer_id in group.pending_offsets.producers():
            self._open_txns.discard(producer_id, group.group_id)

    # --- loading without per-partition leadership ------------------------------------------

    def load(self, records: Iterable[Entry]) -> None:
        """Rebuild groups and offsets from `__consumer_offsets` records, in log order."""
        self._add_groups(replay(records))
        log.info("Loaded %d group(s) from __consumer_offsets", len(self.groups))

    def start_timers(self) -> None:
        """Put groups given by load() in service (needs the running loop)."""
        self._activate(self.groups.values())

    def _activate(self, groups: Iterable[Group]) -> None:
        """Give loaded members their session deadlines, and rebalance groups that hold more
        members than group.max.size now allows (KIP-389)."""
        for group in groups:
            for member in group.members.values():
                self._schedule_expiry(group, member)
            if len(group.members) > self.settings.max_size:
                self._prepare_rebalance(group, "the group is over group.max.size")

    # --- join ----------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   supports_skip_assignment: bool = True) -> JoinResult:
        settings = self.settings
        error = self.group_error(group_id)
        if error is not ErrorCode.none:
            return JoinResult(error.value, member_id)
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id.value, member_id)
        if not settings.min_session_timeout_ms <= session_timeout_ms <= \
                settings.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout.value, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id.value, member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp=_now_ms())
        if group.is_(Dead):
            return JoinResult(ErrorCode.coordinator_not_available.value, member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol.value, member_id)
        args = (instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols)
        if not member_id:
            return await self._join_new(group, require_known_member_id,
                                        supports_skip_assignment, *args)
        return await self._join_known(group, member_id, *args)

    async def _join_new(self, group: Group, require_known_member_id: bool,
                        supports_skip_assignment: bool, instance_id: str | None,
                        client_id: str, *rest: object) -> JoinResult:
        if len(group.members) + len(group.pending_members) >= self.settings.max_size:
            return JoinResult(ErrorCode.group_max_size_reached.value, "")
        new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return await self._replace_static_member(
                    group, old_id, new_id, supports_skip_assignment, instance_id, client_id,
                    *rest)
        elif require_known_member_id:
            # KIP-394: the client must come back with this id, so a lost response cannot
            # leave an orphan member behind. Unclaimed ids expire with the session timeout.
            session_ms = rest[1]
            assert isinstance(session_ms, int)
            loop = asyncio.get_running_loop()
            group.pending_members[new_id] = loop.call_later(
                session_ms / 1000, self._expire_pending, group, new_id)
            return JoinResult(ErrorCode.member_id_required.value, new_id)
        return await self._add_and_rebalance(group, new_id, instance_id, client_id, *rest)

    async def _join_known(self, group: Group, member_id: str, instance_id: str | None,
                          client_id: str, client_host: str, session_timeout_ms: int,
                          rebalance_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]]) -> JoinResult:
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return await self._add_and_rebalance(
                group, member_id, instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols)
        error = self._check_member(group, member_id, instance_id)
        if error is not None:
            return JoinResult(error.value, member_id)
        member = group.members[member_id]
        if group.is_(Empty, Dead):
            return JoinResult(ErrorCode.unknown_member_id.value, member_id)
        if group.is_(Preparing) and len(group.members) > self.settings.max_size and \
                sum(m.awaiting_join for m in group.members.values()) >= \
                self.settings.max_size:
            # Over capacity (the limit was lowered): the late members are turned away.
            self._remove_member(group, member_id, "the group is at group.max.size")
            return JoinResult(ErrorCode.group_max_size_reached.value, member_id)
        unchanged = member.same_protocols(protocols)
        if group.is_(Completing) and unchanged:
            return self._current_join_result(group, member)  # the join response was lost
        if group.is_(Stable) and unchanged and member_id != group.leader_id:
            return self._current_join_result(group, member)
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        waiter = member.join_waiter = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group, f"member {member_id} rejoined")
        self._maybe_complete_join(group)
        return await waiter

    async def _add_and_rebalance(self, group: Group, member_id: str, instance_id: str | None,
                                 client_id: str, client_host: str, session_timeout_ms: int,
                                 rebalance_timeout_ms: int, protocol_type: str,
                                 protocols: list[tuple[str, bytes]]) -> JoinResult:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, is_new=True)
        member.join_waiter = asyncio.get_running_loop().create_future()
        group.add_member(member)
        self._prepare_rebalance(group, f"member {member_id} joined")
        self._maybe_complete_join(group)
        return await member.join_waiter

    async def _replace_static_member(self, group: Group, old_id: str, new_id: str,
                                     supports_skip_assignment: bool, instance_id: str,
                                     client_id: str, client_host: str,
                                     session_timeout_ms: int, rebalance_timeout_ms: int,
                                     protocol_type: str, protocols: list[tuple[str, bytes]]
                                     ) -> JoinResult:
        """KIP-345: a restarted static member takes its old place without a rebalance."""
        old = group.members[old_id]
        was_leader = group.leader_id == old_id
        # Fence the old incarnation: its pending requests fail, its id is gone.
        group.remove_member(old_id)
        if old.awaiting_join and old.join_waiter is not None:
            old.join_waiter.set_result(JoinResult(ErrorCode.fenced_instance_id.value, old_id))
        if old.awaiting_sync and old.sync_waiter is not None:
            old.sync_waiter.set_result(SyncResult(ErrorCode.fenced_instance_id.value))
        member = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, assignment=old.assignment)
        group.add_member(member)
        if was_leader:
            group.leader_id = new_id
        if group.is_(Stable) and group.select_protocol() == group.protocol_name:
            # Same protocol: keep the assignment, store the new member and its metadata.
            self._schedule_expiry(group, member)
            error = await self._persist_group(group)
            if error is not ErrorCode.none:
                self._restore_static_member(group, old, member, was_leader)
                return JoinResult(error.value, "")
            if group.is_(Dead):  # unloaded while the write was under way
                return JoinResult(ErrorCode.not_coordinator.value, new_id)
            log.info("Static member %s of group %s rejoined as %s without a rebalance",
                     instance_id, group.group_id, new_id)
            result = self._current_join_result(group, member)
            if not was_leader:
                return result
            if supports_skip_assignment:
                # KIP-814: the leader learns it leads, and that it must not reassign.
                result.skip_assignment = True
                return result
            # Older clients cannot be told to skip the assignment: they are shown the old
            # leader id and no members, so they follow, and SyncGroup returns the assignment.
            result.leader, result.members = old_id, []
            return result
        member.join_waiter = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        self._maybe_complete_join(group)
        return await member.join_waiter

    def _restore_static_member(self, group: Group, old: Member, new: Member,
                               was_leader: bool) -> None:
        """The new member id could not be stored: the old one stays valid, as in Kafka."""
        if group.is_(Dead) or group.members.get(new.member_id) is not new:
            return  # unloaded or changed meanwhile: what happened since stands
        group.remove_member(new.member_id)
        group.add_member(old)
        if was_leader:
            group.leader_id = old.member_id
        self._schedule_expiry(group, old)

    def _current_join_result(self, group: Group, member: Member) -> JoinResult:
        self._schedule_expiry(group, member)
        return JoinResult(ErrorCode.none.value, member.member_id, group.generation,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members=self._member_list(group)
                          if member.member_id == group.leader_id else [])

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        assert group.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()]

    # --- rebalance -----------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(Preparing):
            return
        if group.is_(Completing):
            # The assignment in flight is void: members must rejoin.
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync and member.sync_waiter is not None:
                    member.sync_waiter.set_result(
                        SyncResult(ErrorCode.rebalance_in_progress.value))
        loop = asyncio.get_running_loop()
        initial = group.is_(Empty)
        group.transition(Preparing, _now_ms())
        log.info("Preparing to rebalance group %s in state PreparingRebalance with old "
                 "generation %d (reason: %s)", group.group_id, group.generation, reason)
        if group.join_timer is not None:
            group.join_timer.cancel()
        if initial and self.settings.initial_rebalance_delay_ms > 0:
            # Wait for more members to arrive before the first assignment.
            delay = self.settings.initial_rebalance_delay_ms / 1000
            group.join_deadline = loop.time() + max(group.max_rebalance_timeout_ms() / 1000,
                                                    delay)
            group.initial_delay = True
            group.join_timer = loop.call_later(delay, self._initial_delay_done, group,
                                               len(group.members))
        else:
            group.join_deadline = loop.time() + group.max_rebalance_timeout_ms() / 1000
            group.join_timer = loop.call_later(group.max_rebalance_timeout_ms() / 1000,
                                               self._complete_join, group)

    def _initial_delay_done(self, group: Group, members_before: int) -> None:
        loop = asyncio.get_running_loop()
        remaining = group.join_deadline - loop.time()
        if len(group.members) > members_before and remaining > 0:
            delay = min(self.settings.initial_rebalance_delay_ms / 1000, remaining)
            group.join_timer = loop.call_later(delay, self._initial_delay_done, group,
                                               len(group.members))
        else:
            group.join_timer = None
            group.initial_delay = False
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.is_(Preparing) and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_(Preparing):
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay = False
        for member in list(group.members.values()):
            # Dynamic members that did not rejoin in time are out; static ones keep
            # their place until their session expires (KIP-345).
            if not member.awaiting_join and member.group_instance_id is None:
                group.remove_member(member.member_id)
                log.info("Member %s of group %s did not rejoin and is removed",
                         member.member_id, group.group_id)
        for pending in group.pending_members.values():
            pending.cancel()
        group.pending_members.clear()
        group.generation += 1
        now = _now_ms()
        if group.is_empty:
            group.protocol_name = None
            group.leader_id = None
            group.transition(Empty, now)
            self._writer.store_later(group.group_id, self._group_records(group))
            log.info("Group %s with generation %d is now empty", group.group_id,
                     group.generation)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members or \
                not group.members[group.leader_id].awaiting_join:
            joined = [m.member_id for m in group.members.values() if m.awaiting_join]
            group.leader_id = joined[0] if joined else next(iter(group.members))
        group.transition(Completing, now)
        log.info("Stabilized group %s generation %d with %d member(s)", group.group_id,
                 group.generation, len(group.members))
        members = self._member_list(group)
        for member in group.members.values():
            member.is_new = False
            self._schedule_expiry(group, member)
            if member.awaiting_join and member.join_waiter is not None:
                leader = member.member_id == group.leader_id
                member.join_waiter.set_result(JoinResult(
                    ErrorCode.none.value, member.member_id, group.generation,
                    group.protocol_type, group.protocol_name, group.leader_id or "",
                    members=members if leader else []))

    # --- sync ----------------------------------------------------------------------------

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        owner_error = self.group_error(group_id)
        if owner_error is not ErrorCode.none:
            return SyncResult(owner_error.value)
        group = self.groups.get(group_id)
        if group is None or group.is_(Empty, Dead):
            return SyncResult(ErrorCode.unknown_member_id.value)
        error = self._check_member(group, member_id, instance_id)
        if error is not None:
            return SyncResult(error.value)
        if generation != group.generation:
            return SyncResult(ErrorCode.illegal_generation.value)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.inconsistent_group_protocol.value)
        member = group.members[member_id]
        if group.is_(Preparing):
            return SyncResult(ErrorCode.rebalance_in_progress.value)
        self._schedule_expiry(group, member)
        if group.is_(Stable):
            return self._sync_result(group, member)
        if member.awaiting_sync and member.sync_waiter is not None:
            # Sent again while the first still waits (the leader's may be being stored):
            # both get the one answer.
            return await asyncio.shield(member.sync_waiter)
        waiter = member.sync_waiter = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            await self._complete_sync(group, assignments)
        return await waiter

    async def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        """Store the leader's assignment; once stored, hand it out and be Stable."""
        generation = group.generation
        for each in group.members.values():
            each.assignment = assignments.get(each.member_id, b"")
        error = await self._persist_group(group)
        if not group.is_(Completing) or group.generation != generation:
            # Unloaded, or a member left or joined while the write was under way: the
            # rebalance that followed has answered the members waiting here.
            return
        if error is not ErrorCode.none:
            # Not durable, so not given out: everyone rejoins (Kafka does the same).
            for each in group.members.values():
                each.assignment = b""
                if each.awaiting_sync and each.sync_waiter is not None:
                    each.sync_waiter.set_result(SyncResult(error.value))
            self._prepare_rebalance(group, "the group could not be stored")
            return
        group.transition(Stable, _now_ms())
        for each in group.members.values():
            if each.awaiting_sync and each.sync_waiter is not None:
                each.sync_waiter.set_result(self._sync_result(group, each))

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none.value, group.protocol_type, group.protocol_name,
                          member.assignment)

    # --- heartbeat and leave -------------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> ErrorCode:
        owner_error = self.group_error(group_id)
        if owner_error is ErrorCode.coordinator_load_in_progress:
            # Kafka answers blindly while the group loads: the member is not at fault,
            # and its session starts afresh once the group is loaded.
            return ErrorCode.none
        if owner_error is not ErrorCode.none:
            return owner_error
        group = self.groups.get(group_id)
        if group is None or group.is_(Empty, Dead):
            return ErrorCode.unknown_member_id
        error = self._check_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._schedule_expiry(group, group.members[member_id])
        if group.is_(Preparing):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, leaving: Sequence[tuple[str, str | None]]
              ) -> list[ErrorCode]:
        owner_error = self.group_error(group_id)
        if owner_error is not ErrorCode.none:
            return [owner_error for _ in leaving]
        group = self.groups.get(group_id)
        if group is None or group.is_(Dead):
            return [ErrorCode.unknown_member_id for _ in leaving]
        results = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                mapped = group.static_members.get(instance_id)
                if mapped is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and mapped != member_id:
                    results.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = mapped
            if member_id in group.pending_members:
                group.pending_members.pop(member_id).cancel()
                self._maybe_complete_join(group)
                results.append(ErrorCode.none)
            elif member_id not in group.members:
                results.append(ErrorCode.unknown_member_id)
            else:
                self._remove_member(group, member_id, "the consumer left the group")
                results.append(ErrorCode.none)
        return results

    def _check_member(self, group: Group, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        if instance_id is not None:
            mapped = group.static_members.get(instance_id)
            if mapped is not None and mapped != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        return None

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.remove_member(member_id)
        if member is None:
            return
        log.info("Removed member %s from group %s: %s", member_id, group.group_id, reason)
        if member.awaiting_join and member.join_waiter is not None:
            member.join_waiter.set_result(JoinResult(ErrorCode.unknown_member_id.value,
                                                     member_id))
        if member.awaiting_sync and member.sync_waiter is not None:
            member.sync_waiter.set_result(SyncResult(ErrorCode.unknown_member_id.value))
        if group.is_(Stable, Completing):
            self._prepare_rebalance(group, f"removing member {member_id}: {reason}")
        self._maybe_complete_join(group)

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        member.cancel_timer()
        loop = asyncio.get_running_loop()
        member.session_timer = loop.call_later(member.session_timeout_ms / 1000,
                                               self._session_expired, group, member)

    def _session_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or member.awaiting_sync:
            # Waiting on the coordinator is not silence; the rebalance timeout bounds it.
            self._schedule_expiry(group, member)
            return
        self._remove_member(group, member.member_id,
                            f"session timeout of {member.session_timeout_ms} ms expired")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            log.info("Pending member %s of group %s never joined", member_id, group.group_id)
            self._maybe_complete_join(group)

    # --- persistence ---------------------------------------------------------------------

    async def _persist_group(self, group: Group) -> ErrorCode:
        error, _ = await self._writer.store(group.group_id, self._group_records(group),
                                            offsets=False)
        return error

    @staticmethod
    def _group_records(group: Group) -> list[Record]:
        members = tuple(MemberValue(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout_ms, m.session_timeout_ms,
            m.metadata(group.protocol_name) if group.protocol_name else b"", m.assignment)
            for m in group.members.values())
        value = GroupValue(group.protocol_type or "", group.generation, group.protocol_name,
                           group.leader_id, group.state_timestamp, members)
        return [(encode_group_key(GroupKey(group.group_id)), encode_group_value(value))]

    # --- offsets -------------------------------------------------------------------------

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, commits: Sequence[OffsetCommit], *,
                     producer: TxnProducer | None = None) -> list[ErrorCode]:
        """OffsetCommit; with `producer`, TxnOffsetCommit: the offsets are written in the
        producer's transaction and stay pending until it ends."""
        if not group_id:
            return [ErrorCode.invalid_group_id for _ in commits]
        owner_error = self.group_error(group_id)
        if owner_error is not ErrorCode.none:
            return [owner_error for _ in commits]
        group, error = self._committing_group(group_id, generation, member_id, instance_id,
                                              transactional=producer is not None)
        if error is not None:
            return [error for _ in commits]
        assert group is not None
        now = _now_ms()
        results: list[ErrorCode] = []
        records: list[Record] = []
        accepted: list[tuple[tuple[str, int], CommittedOffset]] = []
        for commit in commits:
            metadata = commit.metadata or ""
            if len(metadata.encode()) > self.settings.offset_metadata_max_bytes:
                results.append(ErrorCode.offset_metadata_too_large)
            elif not self._partition_exists(commit.topic, commit.partition):
                results.append(ErrorCode.unknown_topic_or_partition)
            else:
                stored = CommittedOffset(commit.offset, commit.leader_epoch, metadata, now)
                records.append((encode_offset_key(OffsetKey(group_id, commit.topic,
                                                            commit.partition)),
                                encode_offset_value(OffsetValue(stored.offset,
                                                                stored.leader_epoch,
                                                                metadata, now))))
                accepted.append(((commit.topic, commit.partition), stored))
                results.append(ErrorCode.none)
        if records:
            error, first_offset = await self._writer.store(group_id, records, offsets=True,
                                                           producer=producer)
            if error is not ErrorCode.none:
                return [error if result is ErrorCode.none else result for result in results]
            for index, (key, stored) in enumerate(accepted):
                stored.record_offset = first_offset + index if first_offset >= 0 else -1
                if producer is None:
                    keep_latest(group.offsets, key, stored)
                elif self.groups.get(group_id) is group:  # not unloaded meanwhile
                    group.pending_offsets.add(producer.producer_id, key, stored)
                    self._open_txns.add(producer.producer_id, group_id)
        return results

    def _committing_group(self, group_id: str, generation: int, member_id: str,
                          instance_id: str | None, transactional: bool
                          ) -> tuple[Group | None, ErrorCode | None]:
        """The group a commit goes to (created for a commit outside group management), or
        the error that refuses it: Kafka's validateOffsetCommit."""
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return None, ErrorCode.illegal_generation
            group = self.groups[group_id] = Group(group_id, state_timestamp=_now_ms())
            return group, None
        if group.is_(Dead):
            return group, ErrorCode.coordinator_not_available
        if generation < 0 and group.is_(Empty):
            return group, None  # a group that only stores offsets (manual assignment)
        if transactional and generation < 0 and not member_id and instance_id is None:
            return group, None  # TxnOffsetCommit before v3 names no member
        error = self._check_member(group, member_id, instance_id)
        if error is None and generation != group.generation:
            error = ErrorCode.illegal_generation
        if error is None and not transactional:
            # A transactional commit does not count as a sign of life, nor does it care
            # whether the assignment is being handed out.
            if group.is_(Completing):
                error = ErrorCode.rebalance_in_progress
            else:
                self._schedule_expiry(group, group.members[member_id])
        return group, error

    def complete_transaction(self, producer_id: int, partitions: Iterable[int],
                             commit: bool) -> None:
        """A COMMIT (or ABORT) marker of `producer_id` was written into these
        `__consumer_offsets` partitions: its pending offsets there are committed (dropped)."""
        partitions = set(partitions)
        if self._loader is not None:
            for partition in partitions:
                if self._loader.ownership.error(partition) is \
                        ErrorCode.coordinator_load_in_progress:
                    self._ended_while_loading.setdefault(partition, []).append(
                        (producer_id, commit))
        for group_id in self._open_txns.groups(producer_id):
            group = self.groups.get(group_id)
            if group is not None and self.partition_of(group_id) in partitions:
                group.pending_offsets.end(producer_id, commit, group.offsets)
                self._open_txns.discard(producer_id, group_id)

    def markers_written(self, producer_id: int, commit: bool,
                        partitions: Iterable[tuple[str, int]]) -> None:
        """The producer's COMMIT (or ABORT) marker is written and replicated on these
        partitions; those of `__consumer_offsets` end its pending offsets."""
        offsets = [index for topic, index in partitions if topic == OFFSETS_TOPIC]
        if offsets:
            self.complete_transaction(producer_id, offsets, commit)

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an ongoing transaction holds an offset of the partition for the group
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        group = self.groups.get(group_id)
        return group is not None and group.pending_offsets.has((topic, partition))

    def fetch_offsets(self, group_id: str, wanted: Sequence[tuple[str, Sequence[int]]] | None
                      ) -> dict[tuple[str, int], CommittedOffset | None]:
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if wanted is None:
            return dict(offsets)
        return {(topic, partition): offsets.get((topic, partition))
                for topic, partitions in wanted for partition in partitions}

    def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]
                       ) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None or group.is_(Dead):
            return ErrorCode.group_id_not_found, []
        subscribed: set[str] = set()
        if not group.is_(Empty):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, []
            subscribed = topics
        results = []
        records: list[Record] = []
        for topic, partition in partitions:
            if topic in subscribed:
                results.append(ErrorCode.group_subscribed_to_topic)
                continue
            if self._drop_offset(group, (topic, partition)):
                records.append((encode_offset_key(OffsetKey(group_id, topic, partition)), None))
            results.append(ErrorCode.none)
        if records:
            self._writer.store_later(group_id, records)
        return ErrorCode.none, results

    def drop_offsets_of_deleted_topics(self, exists: Callable[[str], bool]) -> int:
        """Forget offsets of topics that no longer exist, as Kafka does when a topic is
        deleted (otherwise tools describing the group fail on the missing topic)."""
        dropped = 0
        for group in list(self.groups.values()):
            gone = [key for key in self._all_offsets(group) if not exists(key[0])]
            if not gone:
                continue
            for key in gone:
                self._drop_offset(group, key)
            self._writer.store_later(group.group_id, [
                (encode_offset_key(OffsetKey(group.group_id, topic, partition)), None)
                for topic, partition in gone])
            dropped += len(gone)
            # A group left without offsets stays until the periodic expiry removes it.
        if dropped:
            log.info("Dropped %d committed offset(s) of deleted topics", dropped)
        return dropped

    def delete_groups(self, group_ids: Sequence[str]) -> list[ErrorCode]:
        results = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            owner_error = self.group_error(group_id)
            if not group_id:
                results.append(ErrorCode.invalid_group_id)
            elif owner_error is not ErrorCode.none:
                results.append(owner_error)
            elif group is None or group.is_(Dead):
                results.append(ErrorCode.group_id_not_found)
            elif not group.is_(Empty):
                results.append(ErrorCode.non_empty_group)
            else:
                self._delete_group(group)
                results.append(ErrorCode.none)
        return results

    def _delete_group(self, group: Group) -> None:
        records: list[Record] = [
            (encode_offset_key(OffsetKey(group.group_id, topic, partition)), None)
            for topic, partition in self._all_offsets(group)]
        records.append((encode_group_key(GroupKey(group.group_id)), None))
        self._writer.store_later(group.group_id, records)
        group.transition(Dead, _now_ms())
        self._forget(group)
        log.info("Deleted group %s", group.group_id)

    @staticmethod
    def _all_offsets(group: Group) -> set[tuple[str, int]]:
        """Partitions with a committed or a pending offset: what tombstones must cover."""
        return set(group.offsets) | group.pending_offsets.partitions()

    @staticmethod
    def _drop_offset(group: Group, key: tuple[str, int]) -> bool:
        """Forget the partition's offset, pending ones too (as its tombstone will); whether
        there was one."""
        had = key in group.offsets or group.pending_offsets.has(key)
        group.offsets.pop(key, None)
        group.pending_offsets.discard(key)
        return had

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets of empty groups older than offsets.retention.minutes (KIP-211)."""
        now = _now_ms() if now_ms is None else now_ms
        retention = self.settings.offsets_retention_ms
        expired = 0
        for group in list(self.groups.values()):
            expiring = self._expiry_rule(group)
            if expiring is None:
                continue
            records: list[Record] = []
            for (topic, partition), stored in list(group.offsets.items()):
                base = expiring(topic, stored)
                # An offset that a transaction is about to replace does not expire yet.
                if base is not None and now - base >= retention and \
                        not group.pending_offsets.has((topic, partition)):
                    del group.offsets[(topic, partition)]
                    records.append((encode_offset_key(OffsetKey(group.group_id, topic,
                                                                partition)), None))
            if records:
                self._writer.store_later(group.group_id, records)
                expired += len(records)
            if not group.offsets and not group.members and not group.pending_offsets:
                self._delete_group(group)
        if expired:
            log.info("Expired %d committed offset(s)", expired)
        return expired

    @staticmethod
    def _expiry_rule(group: Group) -> Callable[[str, CommittedOffset], int | None] | None:
        """Kafka's offset expiration condition: which offsets age, and from when. None: the
        group's offsets do not expire in its present state."""
        if group.protocol_type is None:
            return lambda _topic, stored: stored.commit_timestamp  # offsets-only group
        if group.is_(Empty):
            return lambda _topic, _stored: max(group.state_timestamp, 0)
        if group.protocol_type == "consumer" and group.is_(Stable):
            subscribed = group.subscribed_topics()
            if subscribed is not None:
                # Topics no member subscribes to any more age from their last commit.
                return lambda topic, stored: None if topic in subscribed \
                    else stored.commit_timestamp
        return None

    def shutdown(self) -> None:
        if self._loader is not None:
            self._loader.shutdown()
        for group in self.groups.values():
            if group.join_timer is not None:
                group.join_timer.cancel()
            for pending in group.pending_members.values():
                pending.cancel()
            for member in group.members.values():
                member.cancel_timer()
