"""Leader election and ISR edits as pure functions over a PartitionRecord."""

import uuid

from moldau.broker.metadata.partition_change import (
    NO_LEADER,
    changed,
    elect_leader,
    with_leader_if_offline,
    with_preferred_leader,
    without_broker,
)
from moldau.broker.metadata.records import PartitionRecord

TOPIC = uuid.UUID(int=7)


def record(replicas, isr, leader, *, leader_epoch=4, partition_epoch=9, removing=()):
    return PartitionRecord(TOPIC, 0, tuple(replicas), tuple(isr), leader, leader_epoch,
                           partition_epoch, removing_replicas=tuple(removing))


def usable_but(*down):
    return lambda replica: replica not in down


def test_changed_bumps_epochs_only_when_something_changes():
    base = record([1, 2, 3], [1, 2, 3], 1)
    assert changed(base) is None
    assert changed(base, leader=1, isr=[1, 2, 3]) is None
    shrunk = changed(base, isr=[1, 2])
    assert shrunk is not None
    assert (shrunk.isr, shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == \
        ((1, 2), 1, 4, 10)
    moved = changed(base, leader=2)
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch) == (2, 5, 10)


def test_election_follows_assignment_order_not_isr_order():
    base = record([3, 1, 2], [2, 1, 3], 3)
    assert elect_leader(base, base.isr, usable_but()) == (3, (2, 1, 3))
    assert elect_leader(base, base.isr, usable_but(3)) == (1, (2, 1, 3))
    assert elect_leader(base, base.isr, usable_but(3, 1)) == (2, (2, 1, 3))
    # Out of the ISR: never chosen in a clean election, however usable.
    assert elect_leader(base, (2,), usable_but(2)) == (NO_LEADER, (2,))


def test_replicas_being_removed_lead_only_when_nobody_else_can():
    base = record([1, 2, 3], [1, 2, 3], 1, removing=[1])
    assert elect_leader(base, base.isr, usable_but())[0] == 2
    assert elect_leader(base, base.isr, usable_but(2, 3))[0] == 1


def test_unclean_election_takes_an_out_of_sync_replica_as_the_whole_isr():
    base = record([1, 2, 3], [1], 1)
    assert elect_leader(base, base.isr, usable_but(1)) == (NO_LEADER, (1,))
    assert elect_leader(base, base.isr, usable_but(1), unclean=True) == (2, (2,))
    assert elect_leader(base, base.isr, usable_but(1, 2), unclean=True) == (3, (3,))
    assert elect_leader(base, base.isr, usable_but(1, 2, 3), unclean=True) == (NO_LEADER, (1,))
    # A usable ISR member is preferred to unclean election.
    assert elect_leader(base, base.isr, usable_but(), unclean=True) == (1, (1,))


def test_without_broker_moves_leadership_to_the_next_isr_member():
    base = record([2, 3, 1], [1, 2, 3], 2)
    change = without_broker(base, 2, usable_but())
    assert (change.leader, change.isr) == (3, (1, 3))
    assert (change.leader_epoch, change.partition_epoch) == (5, 10)
    # A follower leaving changes the ISR, not the leader nor its epoch.
    follower = without_broker(base, 1, usable_but())
    assert (follower.leader, follower.isr, follower.leader_epoch) == (2, (2, 3), 4)
    # The broker is not involved: nothing to change.
    assert without_broker(record([2, 3], [2, 3], 2), 1, usable_but()) is None
    # `usable` is asked about the others only: the leaving broker is never re-elected.
    assert without_broker(base, 2, usable_but(3)).leader == 1


def test_the_last_isr_member_stays_in_the_isr_without_leading():
    base = record([1, 2], [1], 1)
    change = without_broker(base, 1, usable_but())
    assert (change.leader, change.isr) == (NO_LEADER, (1,))
    assert (change.leader_epoch, change.partition_epoch) == (5, 10)
    # Leaderless already and the last member leaves again: nothing changes.
    assert without_broker(change, 1, usable_but()) is None


def test_without_broker_may_elect_unclean():
    base = record([1, 2], [1], 1)
    change = without_broker(base, 1, usable_but(), unclean=True)
    assert (change.leader, change.isr) == (2, (2,))


def test_an_offline_partition_gets_a_leader_back():
    offline = record([1, 2, 3], [2], NO_LEADER)
    assert with_leader_if_offline(offline, usable_but(2)) is None
    back = with_leader_if_offline(offline, usable_but())
    assert (back.leader, back.isr, back.leader_epoch, back.partition_epoch) == \
        (2, (2,), 5, 10)
    unclean = with_leader_if_offline(offline, usable_but(2), unclean=True)
    assert (unclean.leader, unclean.isr) == (1, (1,))
    # A partition with a leader is left alone.
    assert with_leader_if_offline(record([1, 2], [1, 2], 2), usable_but()) is None


def test_preferred_leader_takes_leadership_back_when_it_can():
    base = record([1, 2, 3], [1, 2, 3], 2)
    back = with_preferred_leader(base, usable_but())
    assert (back.leader, back.isr, back.leader_epoch, back.partition_epoch) == \
        (1, (1, 2, 3), 5, 10)
    assert with_preferred_leader(back, usable_but()) is None  # already leading
    assert with_preferred_leader(base, usable_but(1)) is None  # fenced or shutting down
    assert with_preferred_leader(record([1, 2, 3], [2, 3], 2), usable_but()) is None
