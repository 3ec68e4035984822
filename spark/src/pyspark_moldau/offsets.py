"""Offsets as Spark's Kafka connector writes them: JSON per topic and partition,
`{"topicA":{"0":23,"1":-1}}`, with -2 for earliest and -1 for latest."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

EARLIEST, LATEST = "earliest", "latest"
EARLIEST_OFFSET, LATEST_OFFSET = -2, -1

# (topic, partition) -> offset
TopicOffsets = dict[tuple[str, int], int]


def parse_offsets(text: str) -> TopicOffsets:
    """Spark's offset JSON; a malformed one is refused with Spark's example of the format."""
    try:
        parsed = json.loads(text)
        return {(topic, int(partition)): _offset(offset)
                for topic, partitions in parsed.items()
                for partition, offset in partitions.items()}
    except (ValueError, TypeError, AttributeError):
        raise ValueError('Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, '
                         f"got {text}") from None


def _offset(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(value)
    return value


def to_json_dict(offsets: TopicOffsets) -> dict[str, dict[str, int]]:
    """The JSON-ready form Spark keeps in its offset log, topics and partitions sorted."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json_dict(data: dict[str, dict[str, int]]) -> TopicOffsets:
    return {(topic, int(partition)): offset for topic, partitions in data.items()
            for partition, offset in partitions.items()}


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int


def split_ranges(start: TopicOffsets, end: TopicOffsets, max_records: int
                 ) -> list[OffsetRange]:
    """One range per partition with records between start and end, split into pieces of at
    most max_records, so one large partition still spreads over many tasks."""
    ranges = []
    for (topic, partition), until in sorted(end.items()):
        offset = start.get((topic, partition), until)
        while offset < until:
            piece = min(until, offset + max_records)
            ranges.append(OffsetRange(topic, partition, offset, piece))
            offset = piece
    return ranges
