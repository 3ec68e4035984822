"""Partition reassignments (KIP-455) and elections asked for by an admin (KIP-460).

Pure functions over a `PartitionRecord`, as in `partition_change`; the controller commits
what they return.

A reassignment first grows the replica set to the target followed by the replicas being
removed (both difference sets in ascending broker order), with the ISR and the leader as they
were. The partition then carries `adding_replicas` (target - current) and `removing_replicas`
(current - target) until the reassignment completes: once every replica of the target is in
the ISR, the replica set becomes the target, the ISR loses the removed replicas, both lists are
cleared and, if the leader was removed, a replica of the target takes over. Every change is
checked for completion, so a reassignment that only drops or reorders replicas of the ISR
completes at once, and one that adds replicas completes with the AlterPartition that puts the
last of them into the ISR. Cancelling reverts to the replica set without the replicas being
added. Whenever replicas leave the set, the leader epoch goes up (with a new leader or the
same one), so a removed replica's fetches are fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import replace

from moldau.broker.metadata.partition_change import NO_LEADER, changed, elect_leader
from moldau.broker.metadata.records import PartitionRecord
from moldau.errors import ErrorCode, KafkaError

PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1

Usable = Callable[[int], bool]


def is_reassigning(record: PartitionRecord) -> bool:
    return bool(record.adding_replicas or record.removing_replicas)


def check_target(target: Sequence[int], registered: Container[int]) -> None:
    """A target replica list must be non-empty, without duplicates, of registered brokers
    (fenced ones included, as in Kafka); else INVALID_REPLICA_ASSIGNMENT."""
    if not target:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "The target replica list is empty.")
    seen: set[int] = set()
    for broker in target:
        if broker in seen:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"Broker {broker} appears more than once in the target replicas "
                             f"{list(target)}.")
        seen.add(broker)
    for broker in target:
        if broker not in registered:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The target replicas {list(target)} name broker {broker}, which "
                             "is not registered (unknown broker).")


def reassignment_replicas(current: Sequence[int], target: Sequence[int]
                          ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(replicas, adding, removing) while moving from `current` to `target`: the target
    followed by the replicas being removed; both difference sets sorted."""
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    return tuple(target) + removing, adding, removing


def _completed(replicas: tuple[int, ...], isr: tuple[int, ...], adding: tuple[int, ...],
               removing: tuple[int, ...]
               ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The reassignment finished when every replica of the target is in the ISR (which then
    leaves none of the target out and is not empty); else the state unchanged."""
    if not adding and not removing:
        return replicas, isr, adding, removing
    final_replicas = tuple(r for r in replicas if r not in removing)
    final_isr = tuple(r for r in isr if r not in removing)
    if not final_replicas or not final_isr or not set(final_replicas) <= set(final_isr):
        return replicas, isr, adding, removing
    return final_replicas, final_isr, (), ()


def settle(base: PartitionRecord, *, replicas: Sequence[int] | None = None,
           isr: Sequence[int] | None = None, leader: int | None = None,
           adding: Sequence[int] | None = None, removing: Sequence[int] | None = None,
           usable: Usable, unclean: bool = False) -> PartitionRecord | None:
    """`base` changed to the given state (unset fields as they are), with a reassignment it
    carries completed when it can be, a leader elected when the current one leaves the replicas
    or the ISR, and the epochs bumped once. None when nothing changes."""
    new_replicas = base.replicas if replicas is None else tuple(replicas)
    new_isr = base.isr if isr is None else tuple(isr)
    new_adding = base.adding_replicas if adding is None else tuple(adding)
    new_removing = base.removing_replicas if removing is None else tuple(removing)
    new_leader = base.leader if leader is None else leader
    new_replicas, new_isr, new_adding, new_removing = _completed(
        new_replicas, new_isr, new_adding, new_removing)
    if new_leader == NO_LEADER or new_leader not in new_replicas or new_leader not in new_isr:
        candidate = replace(base, replicas=new_replicas, adding_replicas=new_adding,
                            removing_replicas=new_removing)
        new_leader, new_isr = elect_leader(candidate, new_isr, usable, unclean=unclean)
    new = changed(base, leader=new_leader, isr=new_isr, replicas=new_replicas,
                  adding=new_adding, removing=new_removing)
    if new is not None and new.leader_epoch == base.leader_epoch \
            and not set(base.replicas) <= set(new.replicas):
        new = replace(new, leader_epoch=base.leader_epoch + 1)
    return new


def progressed(base: PartitionRecord, change: PartitionRecord,
               usable: Usable) -> PartitionRecord:
    """`change` (a change of `base`, e.g. an ISR expansion) with the reassignment it carries
    completed when that change allows it."""
    if not is_reassigning(change):
        return change
    settled = settle(base, replicas=change.replicas, isr=change.isr, leader=change.leader,
                     adding=change.adding_replicas, removing=change.removing_replicas,
                     usable=usable)
    return change if settled is None else settled


def start_reassignment(record: PartitionRecord, target: Sequence[int],
                       usable: Usable) -> PartitionRecord | None:
    """The record moving towards `target` (from its current replica set, which during a
    reassignment includes the replicas being added and removed); None when already there."""
    replicas, adding, removing = reassignment_replicas(record.replicas, target)
    return settle(record, replicas=replicas, adding=adding, removing=removing, usable=usable)


def cancel_reassignment(record: PartitionRecord, usable: Usable, *,
                        unclean_allowed: bool, name: str) -> PartitionRecord | None:
    """Back to the replicas without those being added, the ISR without them too. When the ISR
    held only added replicas, the first remaining replica becomes the ISR, which is an unclean
    election: refused (INVALID_REPLICA_ASSIGNMENT) unless the topic allows those."""
    if not is_reassigning(record):
        raise KafkaError(ErrorCode.no_reassignment_in_progress,
                         f"No reassignment of {name} is in progress.")
    adding = set(record.adding_replicas)
    replicas = tuple(r for r in record.replicas if r not in adding)
    isr = tuple(r for r in record.isr if r not in adding)
    if not isr:
        if not unclean_allowed:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"Cancelling the reassignment of {name} would need an unclean "
                             "leader election: every in-sync replica is one being added.")
        isr = replicas[:1]
    return settle(record, replicas=replicas, isr=isr, adding=(), removing=(), usable=usable,
                  unclean=unclean_allowed)


def elect(record: PartitionRecord, election_type: int,
          usable: Usable) -> PartitionRecord | KafkaError:
    """An admin's election (ElectLeaders): the new record, or the per-partition error.

    Preferred: the first assigned replica leads when it is in the ISR and usable; with no
    leader at all, another usable ISR member will do. Unclean: only for a partition without a
    leader, any usable replica when no ISR member is, the ISR becoming that replica alone.
    """
    if election_type == PREFERRED_ELECTION:
        preferred = record.replicas[0]
        if record.leader == preferred:
            return KafkaError(ErrorCode.election_not_needed,
                              f"The preferred replica {preferred} already leads.")
        if preferred in record.isr and usable(preferred):
            new = settle(record, leader=preferred, usable=usable)
            assert new is not None
            return new
        if record.leader == NO_LEADER:
            leader, _ = elect_leader(record, record.isr, usable)
            if leader != NO_LEADER:
                new = settle(record, leader=leader, usable=usable)
                assert new is not None
                return new
        why = "not in the ISR" if preferred not in record.isr else "not available"
        return KafkaError(ErrorCode.preferred_leader_not_available,
                          f"The preferred replica {preferred} is {why}.")
    if election_type == UNCLEAN_ELECTION:
        if record.leader != NO_LEADER:
            return KafkaError(ErrorCode.election_not_needed,
                              f"The partition already has leader {record.leader}.")
        leader, isr = elect_leader(record, record.isr, usable, unclean=True)
        if leader == NO_LEADER:
            return KafkaError(ErrorCode.eligible_leaders_not_available,
                              f"None of the replicas {list(record.replicas)} is available.")
        new = settle(record, leader=leader, isr=isr, usable=usable)
        assert new is not None
        return new
    raise KafkaError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
