"""The metadata-quorum checker on hand-made histories: a valid one passes, and each anomaly,
put in on its own, is reported."""

from __future__ import annotations

import pytest

from e2e.chaos.checker import FAIL, INFO, OK
from e2e.chaos.quorum_checker import (
    QuorumHistory,
    Reassignment,
    Sample,
    TopicOp,
    check,
    crashes,
    summary,
)


def valid() -> QuorumHistory:
    """Node 1 leads epoch 3, node 2 epoch 4 (node 3 follows each); one topic acknowledged,
    one failed, one unknown; t-0 moved twice, the second time with an unknown outcome."""
    samples = [Sample(1, 1.0, "metrics", 3, 1, True), Sample(3, 1.1, "describe-quorum", 3, 1,
                                                               False),
               Sample(2, 1.2, "metrics", 3, 1, False), Sample(1, 2.0, "metrics", 3, 1, True),
               Sample(2, 3.0, "metrics", 4, 2, True), Sample(3, 3.1, "metrics", 4, 2, False),
               Sample(1, 3.5, "metrics", 4, -1, False), Sample(1, 4.0, "metrics", 4, 2, False)]
    ops = [TopicOp("t-0", 1, OK), TopicOp("t-1", 2, FAIL, "INVALID_REPLICATION_FACTOR"),
           TopicOp("t-2", 3, INFO, "timed out")]
    moves = [Reassignment("t-0", 0, (2, 3), OK), Reassignment("t-0", 0, (3, 1), INFO)]
    return QuorumHistory(samples, ops, moves, {"t-0": {0: (3, 1)}, "t-2": {0: (1, 2)}})


def kinds(history: QuorumHistory) -> list[str]:
    return sorted({anomaly.kind for anomaly in check(history)})


def test_a_valid_history_has_no_anomaly() -> None:
    history = valid()
    assert check(history) == []
    history.final["t-0"][0] = (2, 3)  # the unknown move did not happen: also fine
    assert check(history) == []
    assert summary(history, []) == (
        "8 quorum samples over 2 epochs; CreateTopics 1 ok, 1 failed, 1 indeterminate; "
        "reassignments 1 ok, 0 failed, 1 indeterminate; anomalies: none")


@pytest.mark.parametrize("change, kind", [
    (lambda h: h.samples.append(Sample(3, 3.2, "metrics", 4, 3, True)),
     "two-active-controllers"),
    (lambda h: h.samples.append(Sample(3, 3.3, "describe-quorum", 3, 3, False)),
     "two-leaders-in-epoch"),
    (lambda h: h.samples.append(Sample(2, 5.0, "metrics", 3, 1, False)), "epoch-went-back"),
    (lambda h: h.final.pop("t-0"), "topic-lost"),
    (lambda h: h.final["t-0"].update({1: (1, 2)}), "partitions-changed"),
    (lambda h: h.final["t-0"].update({0: (1, 2)}), "reassignment-lost"),
    (lambda h: h.reassignments.append(Reassignment("t-0", 0, (1, 2), OK)),
     "reassignment-lost"),
])
def test_each_anomaly_is_found(change, kind: str) -> None:
    history = valid()
    change(history)
    found = kinds(history)
    if kind == "epoch-went-back":  # node 2 also named leader 1 for epoch 3 earlier: fine
        assert found == [kind]
    else:
        assert kind in found


def restarted(epochs_before: list[int], epoch_after: int, crash: bool = True) -> QuorumHistory:
    """Node 3 reports `epochs_before`, is killed (when `crash`), then reports `epoch_after`."""
    samples = [Sample(3, 1.0 + i, "metrics", epoch, -1, False)
               for i, epoch in enumerate(epochs_before)]
    samples.append(Sample(3, 10.0, "metrics", epoch_after, 2, False))
    return QuorumHistory(samples, crashes=[(3, 9.0)] if crash else [])


def test_a_crash_may_lose_the_last_epoch_change_only() -> None:
    # Epoch 2 shown while its quorum-state write was in flight, then the kill: the restarted
    # node is back in epoch 1, as it acted in nothing of epoch 2 (seed 138's soak history).
    assert check(restarted([1, 1, 2], 1)) == []
    assert check(restarted([1, 5], 1)) == []  # one input may jump several epochs
    assert check(restarted([1, 2, 2], 2)) == []
    # Epoch 2 was left for 3 by a later transition, so it was durable: losing it is a fault.
    assert kinds(restarted([1, 2, 3], 1)) == ["epoch-went-back"]
    # Without a crash in between, no epoch may be lost at all.
    assert kinds(restarted([1, 1, 2], 1, crash=False)) == ["epoch-went-back"]
    # A crash of another node excuses nothing.
    other = restarted([1, 1, 2], 1)
    other.crashes = [(1, 9.0)]
    assert kinds(other) == ["epoch-went-back"]
    # After the restart the usual rule holds again.
    later = restarted([1, 1, 2], 1)
    later.samples += [Sample(3, 11.0, "metrics", 4, -1, False),
                      Sample(3, 12.0, "metrics", 3, -1, False)]
    assert kinds(later) == ["epoch-went-back"]


def test_crashes_are_read_from_the_fault_events() -> None:
    events = [(1.0, "start", "crash node 2 (active controller)"),
              (2.0, "heal", "crash node 2 (active controller)"),
              (3.0, "start", "crash node 3 losing unsynced writes (10 of 20 bytes)"),
              (4.0, "start", "pause node 1"), (5.0, "start", "clock of node 3 +21600 s")]
    assert crashes(events) == [(2, 1.0), (3, 3.0)]
