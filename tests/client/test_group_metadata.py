"""The consumer's group_metadata(), which a transactional producer sends with offsets."""

from __future__ import annotations

import pytest

from moldau.client.consumer import AsyncConsumer
from moldau.client.errors import InvalidGroupIdError  # type: ignore[attr-defined]
from moldau.client.types import ConsumerGroupMetadata

BOOT = {"bootstrap.servers": "127.0.0.1:9"}  # never contacted


def test_a_member_that_has_not_joined_has_no_generation_yet() -> None:
    consumer = AsyncConsumer({**BOOT, "group.id": "billing", "group.instance.id": "node-1"})
    assert consumer.group_metadata() == ConsumerGroupMetadata("billing", -1, "", "node-1")


def test_a_consumer_without_a_group_has_no_group_metadata() -> None:
    with pytest.raises(InvalidGroupIdError, match="group.id"):
        AsyncConsumer(BOOT).group_metadata()
