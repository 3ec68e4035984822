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
