"""Group subscription and assignment payloads round-trip in every version."""

from __future__ import annotations

import pytest

from moldau.client.consumer_protocol import Assignment, Subscription
from moldau.client.types import TopicPartition

PARTS = [TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 1)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip(version):
    sub = Subscription(["a", "b"], b"user", PARTS if version else [], 7 if version >= 2 else -1,
                       "rack-1" if version >= 3 else None, version)
    assert Subscription.decode(sub.encode()) == sub


@pytest.mark.parametrize("version", [0, 1, 3])
def test_assignment_round_trip(version):
    assignment = Assignment(PARTS, None, version)
    assert Assignment.decode(assignment.encode()) == assignment
    assert Assignment.decode(b"") == Assignment([])
