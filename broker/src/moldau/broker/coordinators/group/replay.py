"""Groups and offsets rebuilt from `__consumer_offsets` records.

Replaying runs off the event loop (a partition can hold many records), so it builds new
Group objects and touches nothing the coordinator shares; the coordinator installs them.
Offsets written in a transaction stay pending until the transaction's marker: a marker
later in the log commits or drops them, and without one they are still pending when the
replay ends (see offsets.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from moldau.broker.coordinators.group.group import CommittedOffset, Group, GroupState, Member
from moldau.broker.coordinators.group.records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from moldau.broker.coordinators.topic import Entry, LogRecord, Record, TxnEnd

__all__ = ["Entry", "LogRecord", "Record", "TxnEnd", "replay"]

# How many records pass between checks whether the load is still wanted.
CANCEL_CHECK_INTERVAL = 1024


def replay(entries: Iterable[Entry],
           cancelled: Callable[[], bool] = lambda: False) -> dict[str, Group]:
    """The groups that `entries` (in log order) leave behind. Stops early, with a partial
    result, once `cancelled()` says the result will not be used."""
    groups: dict[str, Group] = {}
    metadata: dict[str, GroupValue | None] = {}
    open_txns: dict[int, set[str]] = {}  # producer id -> groups with its pending offsets
    for count, entry in enumerate(entries):
        if count % CANCEL_CHECK_INTERVAL == 0 and cancelled():
            break
        if isinstance(entry, TxnEnd):
            for group_id in open_txns.pop(entry.producer_id, ()):
                group = groups[group_id]
                group.pending_offsets.end(entry.producer_id, entry.commit, group.offsets)
            continue
        key = decode_key(entry.key)
        if isinstance(key, OffsetKey):
            group = groups.setdefault(key.group, Group(key.group))
            _replay_offset(group, (key.topic, key.partition), entry)
            if entry.producer_id >= 0 and entry.value is not None:
                open_txns.setdefault(entry.producer_id, set()).add(key.group)
        elif isinstance(key, GroupKey):
            value = entry.value
            metadata[key.group] = None if value is None else decode_group_value(value)
    for group_id, group_value in metadata.items():
        if group_value is None:
            # Deleted: gone unless offsets were committed (or are pending) after the deletion.
            group = groups.get(group_id)
            if group is not None and not group.offsets and not group.pending_offsets:
                del groups[group_id]
            continue
        restore(groups.setdefault(group_id, Group(group_id)), group_value)
    return groups


def _replay_offset(group: Group, partition: tuple[str, int], entry: LogRecord) -> None:
    if entry.value is None:
        group.offsets.pop(partition, None)
        group.pending_offsets.discard(partition)
        return
    value = decode_offset_value(entry.value)
    stored = CommittedOffset(value.offset, value.leader_epoch, value.metadata,
                             value.commit_timestamp, entry.offset)
    if entry.producer_id >= 0:
        group.pending_offsets.add(entry.producer_id, partition, stored)
    else:
        group.offsets[partition] = stored


def restore(group: Group, value: GroupValue) -> None:
    group.protocol_type = value.protocol_type or None
    group.generation = value.generation
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    group.state_timestamp = value.state_timestamp
    for stored in value.members:
        member = Member(stored.member_id, stored.group_instance_id, stored.client_id,
                        stored.client_host, stored.rebalance_timeout_ms,
                        stored.session_timeout_ms, value.protocol_type,
                        [(value.protocol or "", stored.subscription)], stored.assignment)
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id
    # Members must heartbeat within their session timeout, or they are removed.
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
