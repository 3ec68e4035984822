"""Which partitions the consumer reads and where it stands in each (Kafka's
SubscriptionState): a subscription (topics or a pattern, partitions from the group) or a
manual assignment, and per partition the fetch position, pause flag and pending reset."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum

from moldau.client.errors import IllegalStateError
from moldau.client.types import TopicPartition


class SubscriptionType(Enum):
    NONE = "none"
    AUTO_TOPICS = "topics"
    AUTO_PATTERN = "pattern"
    USER_ASSIGNED = "assigned"


class OffsetResetStrategy(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


class PartitionState:
    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "paused",
                 "position", "position_epoch", "reset")

    def __init__(self) -> None:
        self.position: int | None = None
        self.position_epoch: int | None = None  # leader epoch of the last record returned
        self.paused = False
        self.reset: OffsetResetStrategy | None = None
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None and self.reset is None


_SUBSCRIBE_MIXED = ("Subscription to topics, partitions and pattern are mutually exclusive")


class SubscriptionState:
    def __init__(self, default_reset: OffsetResetStrategy) -> None:
        self.default_reset = default_reset
        self.type = SubscriptionType.NONE
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        # Topics of the whole group (the leader needs metadata for all of them).
        self.group_topics: set[str] = set()
        self.assignment: dict[TopicPartition, PartitionState] = {}

    # -------------------------------------------------------------------------- changes

    def _set_type(self, kind: SubscriptionType) -> None:
        if self.type is SubscriptionType.NONE:
            self.type = kind
        elif self.type is not kind:
            raise IllegalStateError(_SUBSCRIBE_MIXED)

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Returns whether the topic set changed."""
        self._set_type(SubscriptionType.AUTO_TOPICS)
        new = set(topics)
        changed = new != self.topics
        self.topics = new
        self.group_topics |= new
        return changed

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        self._set_type(SubscriptionType.AUTO_PATTERN)
        self.pattern = pattern

    def matched_topics(self, topics: Iterable[str]) -> bool:
        """For a pattern subscription: the topics that now match; returns whether they
        changed."""
        new = set(topics)
        changed = new != self.topics
        self.topics = new
        self.group_topics |= new
        return changed

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_type(SubscriptionType.USER_ASSIGNED)
        wanted = list(dict.fromkeys(partitions))
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in wanted}
        self.topics = {tp.topic for tp in wanted}

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment; positions of partitions kept are kept."""
        if not self.has_auto_assignment:
            raise IllegalStateError("Attempt to apply a group assignment without a "
                                    "subscription")
        wanted = list(dict.fromkeys(partitions))
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in wanted}

    def unsubscribe(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics = set()
        self.group_topics = set()
        self.pattern = None
        self.assignment = {}

    # -------------------------------------------------------------------------- queries

    @property
    def has_auto_assignment(self) -> bool:
        return self.type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    def partitions(self) -> list[TopicPartition]:
        return list(self.assignment)

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return state

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self.assignment

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items()
                if not s.paused and s.has_valid_position]

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a pending reset: they need the group's
        committed offset (or the default reset when there is none)."""
        return [tp for tp, s in self.assignment.items() if s.position is None and
                s.reset is None]

    def awaiting_reset(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.reset is not None]

    def all_consumed(self) -> dict[TopicPartition, tuple[int, int | None]]:
        """Positions to commit: (offset, leader epoch) of partitions with a valid one."""
        return {tp: (s.position, s.position_epoch) for tp, s in self.assignment.items()
                if s.has_valid_position and s.position is not None}

    # -------------------------------------------------------------------------- positions

    def seek(self, tp: TopicPartition, offset: int, epoch: int | None = None) -> None:
        state = self.state(tp)
        state.position = offset
        state.position_epoch = epoch
        state.reset = None

    def request_reset(self, tp: TopicPartition,
                      strategy: OffsetResetStrategy | None = None) -> None:
        self.state(tp).reset = strategy or self.default_reset

    def pause(self, tp: TopicPartition) -> None:
        self.state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.assignment.items() if s.paused}
