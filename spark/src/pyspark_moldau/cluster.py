"""What the driver asks the cluster: which partitions a strategy names, and their offsets.

Both are asked afresh at every trigger (an admin client's Metadata request, ListOffsets), so
partitions and topics created while a query runs are seen at its next micro-batch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from moldau.client import Admin, Consumer, TopicPartition
from pyspark_moldau.offsets import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    TopicOffsets,
)
from pyspark_moldau.options import OptionError, Strategy, connection_settings

# The source decides where to read; the client never commits nor resets on its own.
CONSUMER_OVERRIDES = {"enable.auto.commit": "false", "auto.offset.reset": "none"}


def open_consumer(settings: dict[str, str]) -> Consumer:
    return Consumer({**settings, **CONSUMER_OVERRIDES})


class ClusterView:
    """A consumer kept open on the driver for planning (never pickled to the workers)."""

    def __init__(self, settings: dict[str, str]) -> None:
        self._consumer = open_consumer(settings)
        self._admin = Admin(connection_settings(settings))

    def close(self) -> None:
        self._consumer.close()
        self._admin.close()

    def partitions(self, strategy: Strategy) -> list[tuple[str, int]]:
        if strategy.assigned:
            return sorted(set(strategy.assigned))
        if strategy.pattern is not None:
            # Internal topics never match, as with the consumer's pattern subscription.
            described = self._admin.describe_topics()
            topics = [name for name, topic in described.items()
                      if not topic.is_internal and strategy.matches(name)]
        else:
            described = self._admin.describe_topics(strategy.topics)
            topics = list(strategy.topics)
        return [(topic, p.partition) for topic in sorted(set(topics))
                for p in described[topic].partitions]

    def earliest(self, partitions: Iterable[tuple[str, int]]) -> TopicOffsets:
        return self._ask(self._consumer.beginning_offsets, partitions)

    def latest(self, partitions: Iterable[tuple[str, int]]) -> TopicOffsets:
        """The high watermarks (the last stable offsets under read_committed)."""
        return self._ask(self._consumer.end_offsets, partitions)

    @staticmethod
    def _ask(call: Any, partitions: Iterable[tuple[str, int]]) -> TopicOffsets:
        wanted = [TopicPartition(topic, p) for topic, p in partitions]
        if not wanted:
            return {}
        return {(tp.topic, tp.partition): offset for tp, offset in call(wanted).items()}

    def resolve(self, spec: str | TopicOffsets, partitions: list[tuple[str, int]],
                option: str) -> TopicOffsets:
        """Concrete offsets for `earliest`, `latest` or Spark's per-partition JSON (whose -2
        and -1 mean earliest and latest); the JSON must name every partition."""
        if spec == EARLIEST:
            return self.earliest(partitions)
        if spec == LATEST:
            return self.latest(partitions)
        assert isinstance(spec, dict)
        if set(spec) != set(partitions):
            raise OptionError(
                f"If {option} contains specific offsets, you must specify all "
                f"TopicPartitions. Use -1 for latest, -2 for earliest. Specified: "
                f"{_names(spec)} Assigned: {_names(partitions)}")
        earliest = self.earliest(tp for tp, o in spec.items() if o == EARLIEST_OFFSET)
        latest = self.latest(tp for tp, o in spec.items() if o == LATEST_OFFSET)
        return {tp: earliest.get(tp, latest.get(tp, offset)) for tp, offset in spec.items()}


def _names(partitions: Iterable[tuple[str, int]]) -> str:
    return "{" + ", ".join(f"{topic}-{p}" for topic, p in sorted(partitions)) + "}"
