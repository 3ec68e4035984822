"""Which __consumer_offsets partitions a node coordinates, as leadership notices arrive."""

from __future__ import annotations

from moldau.broker.coordinators.group.ownership import Ownership
from moldau.errors import ErrorCode

NONE, LOADING, NOT_COORDINATOR = (ErrorCode.none, ErrorCode.coordinator_load_in_progress,
                                  ErrorCode.not_coordinator)


def test_elect_load_resign():
    owned = Ownership()
    assert owned.error(0) is NOT_COORDINATOR
    load = owned.elect(0, 4)
    assert load is not None and (load.partition, load.epoch) == (0, 4)
    assert owned.error(0) is LOADING and owned.loading
    assert owned.elect(0, 4) is None  # the same notice twice loads once
    assert owned.finish(load) and owned.error(0) is NONE and not owned.loading
    assert owned.owned() == {0}
    assert owned.resign(0, 5) and owned.error(0) is NOT_COORDINATOR
    assert not owned.resign(0, 5)  # nothing left to unload


def test_stale_notices_are_ignored():
    owned = Ownership()
    load = owned.elect(1, 7)
    assert load is not None and owned.finish(load)
    assert not owned.resign(1, 6) and owned.error(1) is NONE
    assert owned.elect(1, 6) is None
    assert owned.resign(1, -1)  # no epoch: the partition is gone whatever the epoch


def test_a_load_overtaken_by_a_resignation_is_not_installed():
    owned = Ownership()
    first = owned.elect(2, 1)
    assert first is not None
    assert not owned.resign(2, 2)  # nothing was in memory yet
    assert first.cancelled
    second = owned.elect(2, 3)
    assert second is not None and second is not first
    assert not owned.finish(first)
    assert owned.error(2) is LOADING
    assert owned.finish(second) and owned.error(2) is NONE


def test_a_new_epoch_during_a_load_keeps_the_load():
    owned = Ownership()
    load = owned.elect(0, 1)
    assert load is not None
    assert owned.elect(0, 2) is None and load.epoch == 2
    assert owned.finish(load) and owned.error(0) is NONE


def test_failed_and_abandoned_loads():
    owned = Ownership()
    failed = owned.elect(0, 1)
    assert failed is not None
    owned.fail(failed)
    assert owned.error(0) is NOT_COORDINATOR
    retried = owned.elect(0, 1)  # the next notice tries again
    assert retried is not None
    owned.abandon()
    assert retried.cancelled and not owned.finish(retried)
    assert owned.error(0) is NOT_COORDINATOR
