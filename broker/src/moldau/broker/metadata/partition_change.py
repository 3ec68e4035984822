"""Partition state changes the controller decides: leader election and ISR edits.

Pure functions over a `PartitionRecord`; the controller commits what they return. The leader
epoch goes up whenever the leader changes, the partition epoch on every change, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from moldau.broker.metadata.records import PartitionRecord

NO_LEADER = -1


def changed(record: PartitionRecord, *, leader: int | None = None,
            isr: Iterable[int] | None = None, replicas: Iterable[int] | None = None,
            adding: Iterable[int] | None = None,
            removing: Iterable[int] | None = None) -> PartitionRecord | None:
    """The record with the given fields replaced and its epochs bumped; None when nothing
    changes."""
    new = replace(
        record,
        leader=record.leader if leader is None else leader,
        isr=record.isr if isr is None else tuple(isr),
        replicas=record.replicas if replicas is None else tuple(replicas),
        adding_replicas=record.adding_replicas if adding is None else tuple(adding),
        removing_replicas=record.removing_replicas if removing is None else tuple(removing))
    if new == record:
        return None
    return replace(new,
                   leader_epoch=record.leader_epoch + (new.leader != record.leader),
                   partition_epoch=record.partition_epoch + 1)


def elect_leader(record: PartitionRecord, isr: tuple[int, ...], usable: Callable[[int], bool],
                 *, unclean: bool = False) -> tuple[int, tuple[int, ...]]:
    """(leader, isr): the first replica in assignment order that is in the ISR and usable;
    with none, an out-of-sync usable replica only when unclean election is allowed (the ISR
    becomes that replica alone); else no leader and the ISR unchanged."""
    for replica in record.replicas:
        if replica in isr and usable(replica) and replica not in record.removing_replicas:
            return replica, isr
    for replica in record.replicas:
        if replica in isr and usable(replica):
            return replica, isr
    if unclean:
        for replica in record.replicas:
            if usable(replica):
                return replica, (replica,)
    return NO_LEADER, isr


def without_broker(record: PartitionRecord, broker_id: int, usable: Callable[[int], bool],
                   *, unclean: bool = False) -> PartitionRecord | None:
    """The broker leaves the ISR (unless it is the last member, which stays so that the
    partition can come back with it) and loses the leadership."""
    isr = record.isr
    if broker_id in isr and len(isr) > 1:
        isr = tuple(replica for replica in isr if replica != broker_id)
    leader = record.leader
    if leader in (broker_id, NO_LEADER):
        leader, isr = elect_leader(record, isr,
                                   lambda r: r != broker_id and usable(r), unclean=unclean)
    return changed(record, leader=leader, isr=isr)


def with_leader_if_offline(record: PartitionRecord, usable: Callable[[int], bool],
                           *, unclean: bool = False) -> PartitionRecord | None:
    """A partition without a leader gets one when an ISR member (or, unclean, any replica)
    is usable again."""
    if record.leader != NO_LEADER:
        return None
    leader, isr = elect_leader(record, record.isr, usable, unclean=unclean)
    if leader == NO_LEADER:
        return None
    return changed(record, leader=leader, isr=isr)


def with_preferred_leader(record: PartitionRecord,
                          usable: Callable[[int], bool]) -> PartitionRecord | None:
    """Leadership back to the first assigned replica, when it is in the ISR and usable."""
    preferred = record.replicas[0]
    if record.leader == preferred or preferred not in record.isr or not usable(preferred):
        return None
    return changed(record, leader=preferred)
