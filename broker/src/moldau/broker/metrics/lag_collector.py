"""Consumer group offsets and lag under kafka-exporter's names, from the group coordinator:
each broker exports the groups it coordinates and the partitions it leads, so summing over
brokers counts everything once and no separate exporter is needed. The lag of a partition
led elsewhere uses its leader's end offset as last asked (end_offsets.RemoteEndOffsets)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from moldau.broker.metrics.families import gauge

if TYPE_CHECKING:
    from moldau.broker.metrics.end_offsets import RemoteEndOffsets
    from moldau.broker.server import Broker


class LagCollector:
    def __init__(self, broker: Broker, remote_ends: RemoteEndOffsets) -> None:
        self.broker = broker
        self.remote_ends = remote_ends

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        if not (broker.started and broker.config.is_broker):
            return  # start-up fills the partition table in a thread
        led = {p.key: p for p in broker.replicas.partitions.values() if p.is_leader}
        yield from self._partitions(led)
        # A partition led here may still be in the last remote answer: the local value wins.
        ends = {**self.remote_ends.offsets,
                **{key: p.log.high_watermark for key, p in led.items()}}
        yield from self._groups(ends)

    def _partitions(self, led: dict) -> Iterator[Metric]:
        labelled = [({"topic": topic, "partition": str(index)}, p)
                    for (topic, index), p in sorted(led.items())]
        for name, doc, value in (
                ("current_offset", "High watermark (the offset consumers read up to)",
                 lambda p: p.log.high_watermark),
                ("oldest_offset", "Log start offset", lambda p: p.log.log_start_offset),
                ("in_sync_replica", "Size of the ISR", lambda p: len(p.isr)),
                ("leader", "Id of the leader", lambda p: p.record.leader),
                ("leader_is_preferred", "1 if the leader is the first replica",
                 lambda p: int(p.record.replicas[:1] == (p.record.leader,))),
                ("replicas", "Size of the replica set", lambda p: len(p.record.replicas)),
                ("under_replicated_partition", "1 if the ISR is smaller than the replica set",
                 lambda p: int(len(p.isr) < len(p.record.replicas)))):
            yield gauge(f"kafka_topic_partition_{name}", doc,
                        series=((labels, value(p)) for labels, p in labelled))

    def _groups(self, ends: dict[tuple[str, int], int]) -> Iterator[Metric]:
        offsets, lags, members = [], [], []
        offset_sums: collections.Counter[tuple[str, str]] = collections.Counter()
        lag_sums: collections.Counter[tuple[str, str]] = collections.Counter()
        for group_id, group in sorted(self.broker.groups.groups.items()):
            members.append(({"consumergroup": group_id}, len(group.members)))
            for (topic, index), committed in sorted(group.offsets.items()):
                labels = {"consumergroup": group_id, "topic": topic, "partition": str(index)}
                offsets.append((labels, committed.offset))
                offset_sums[group_id, topic] += committed.offset
                end = ends.get((topic, index))
                if end is None:
                    continue  # its leader did not answer the last ListOffsets
                lag = max(end - committed.offset, 0)
                lags.append((labels, lag))
                lag_sums[group_id, topic] += lag
        yield gauge("kafka_consumergroup_members", "Members of the group", series=members)
        yield gauge("kafka_consumergroup_current_offset", "Committed offset of the group",
                    series=offsets)
        yield gauge("kafka_consumergroup_current_offset_sum", "Committed offsets of the group "
                    "summed over the topic's partitions", series=_by_topic(offset_sums))
        yield gauge("kafka_consumergroup_lag", "High watermark minus the committed offset",
                    series=lags)
        yield gauge("kafka_consumergroup_lag_sum", "Lag summed over the topic's partitions "
                    "whose end offset is known", series=_by_topic(lag_sums))


def committed_partitions(broker: Broker) -> Iterator[tuple[str, int]]:
    """Every partition a group coordinated here has committed an offset for."""
    if not (broker.started and broker.config.is_broker):
        return  # the coordinator exists once the broker has started
    for group in list(broker.groups.groups.values()):
        yield from list(group.offsets)


def _by_topic(sums: collections.Counter[tuple[str, str]]
              ) -> Iterator[tuple[dict[str, str], float]]:
    for (group_id, topic), value in sorted(sums.items()):
        yield {"consumergroup": group_id, "topic": topic}, value
