"""Groups and offsets rebuilt from `__consumer_offsets` records.

Replaying runs off the event loop (a partition can hold many records), so it builds new
Group objects and touches nothing the coordinator shares; the coordinator installs them.
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

Record = tuple[bytes, bytes | None]

# How many records pass between checks whether the load is still wanted.
CANCEL_CHECK_INTERVAL = 1024


def replay(records: Iterable[Record],
           cancelled: Callable[[], bool] = lambda: False) -> dict[str, Group]:
    """The groups that `records` (in log order) leave behind. Stops early, with a partial
    result, once `cancelled()` says the result will not be used."""
    groups: dict[str, Group] = {}
    metadata: dict[str, GroupValue | None] = {}
    for count, (key_bytes, value) in enumerate(records):
        if count % CANCEL_CHECK_INTERVAL == 0 and cancelled():
            break
        key = decode_key(key_bytes)
        if isinstance(key, OffsetKey):
            group = groups.setdefault(key.group, Group(key.group))
            if value is None:
                group.offsets.pop((key.topic, key.partition), None)
            else:
                stored = decode_offset_value(value)
                group.offsets[(key.topic, key.partition)] = CommittedOffset(
                    stored.offset, stored.leader_epoch, stored.metadata,
                    stored.commit_timestamp)
        elif isinstance(key, GroupKey):
            metadata[key.group] = None if value is None else decode_group_value(value)
    for group_id, group_value in metadata.items():
        if group_value is None:
            # Deleted: gone unless offsets were committed after the deletion.
            group = groups.get(group_id)
            if group is not None and not group.offsets:
                del groups[group_id]
            continue
        restore(groups.setdefault(group_id, Group(group_id)), group_value)
    return groups


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
