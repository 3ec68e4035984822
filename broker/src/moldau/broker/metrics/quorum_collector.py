"""The controller's and the Raft quorum's metrics under Strimzi's names: KafkaController
gauges (non-zero on the active controller only, so a sum over nodes reads as in Kafka)
and raft-metrics (`kafka_server_raftmetrics_*`)."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from moldau.broker.metrics.families import counter, gauge
from moldau.broker.raft.state import Role

if TYPE_CHECKING:
    from moldau.broker.metadata.controller import Controller
    from moldau.broker.metadata.image import MetadataImage
    from moldau.broker.metadata.quorum import MetadataQuorum
    from moldau.broker.raft.driver import RaftDriver
    from moldau.broker.raft.tcp_transport import ChannelCounters

# Kafka's rates are over a 30 s window (two samples of metrics.sample.window.ms).
RATE_WINDOW_S = 30.0


class EndOffsetRate:
    """Records per second added to the metadata log, from the log end offsets seen at
    scrapes in the last window: nothing is counted on the Raft path itself."""

    def __init__(self) -> None:
        self._seen: collections.deque[tuple[float, int]] = collections.deque()

    def observe(self, end_offset: int, now: float) -> float:
        seen = self._seen
        seen.append((now, end_offset))
        while len(seen) > 2 and now - seen[1][0] >= RATE_WINDOW_S:
            seen.popleft()
        first_time, first_offset = seen[0]
        if now <= first_time:
            return 0.0
        return max(end_offset - first_offset, 0) / (now - first_time)


class QuorumCollector:
    def __init__(self, quorum: MetadataQuorum, controller: Controller) -> None:
        self.quorum = quorum
        self.controller = controller
        self._rate = EndOffsetRate()

    def collect(self) -> Iterator[Metric]:
        quorum = self.quorum
        active = quorum.is_active
        yield gauge("kafka_controller_kafkacontroller_activecontrollercount",
                    "1 on the active controller, 0 elsewhere", 1 if active else 0)
        image = quorum.image
        partitions = [record for topic in image.topics.values()
                      for record in topic.partitions.values()]
        brokers = image.brokers.values()
        for name, doc, value in (
                ("offlinepartitionscount", "Partitions without a leader",
                 sum(1 for record in partitions if record.leader < 0)),
                ("globalpartitioncount", "Partitions in the cluster", len(partitions)),
                ("globaltopiccount", "Topics in the cluster", len(image.topics)),
                ("activebrokercount", "Registered, unfenced brokers",
                 sum(1 for broker in brokers if not broker.fenced)),
                ("fencedbrokercount", "Registered, fenced brokers",
                 sum(1 for broker in brokers if broker.fenced))):
            yield gauge(f"kafka_controller_kafkacontroller_{name}", doc,
                        value if active else 0)
        yield counter("kafka_controller_controllerstats_uncleanleaderelections", "Leaders "
                      "this node elected, as controller, from outside the ISR",
                      self.controller.unclean_elections)
        if active:
            yield from _cluster(image)
        if quorum.transport is not None:
            yield from _channel(quorum.transport.counters)
        driver = quorum.driver
        if driver is None or driver.log is None:
            return
        yield from self._raft(driver)

    def _raft(self, driver: RaftDriver) -> Iterator[Metric]:
        node = driver.node
        role = node.role
        state = "observer" if node.is_observer and role is not Role.LEADER else role.value
        yield gauge("kafka_server_raftmetrics_current_state",
                    "1, labelled with this node's Raft state",
                    series=[({"current_state": state}, 1)])
        leader = driver.leader_id
        yield gauge("kafka_server_raftmetrics_current_leader", "Id of the quorum leader, -1 "
                    "when unknown", -1 if leader is None else leader)
        persisted = node.quorum_state
        vote = persisted.voted_for if persisted.epoch == node.epoch else None
        yield gauge("kafka_server_raftmetrics_current_vote", "Id this node voted for in the "
                    "current epoch, -1 for none", -1 if vote is None else vote)
        yield gauge("kafka_server_raftmetrics_current_epoch", "The quorum's epoch", node.epoch)
        yield gauge("kafka_server_raftmetrics_high_watermark", "The metadata log's high "
                    "watermark", driver.high_watermark)
        assert driver.log is not None
        end_offset = driver.log.end_offset
        yield gauge("kafka_server_raftmetrics_log_end_offset", "End offset of the metadata "
                    "log here", end_offset)
        rate = self._rate.observe(end_offset, time.monotonic())
        leading = role is Role.LEADER
        yield gauge("kafka_server_raftmetrics_append_records_rate", "Records appended per "
                    "second as leader", rate if leading else 0.0)
        yield gauge("kafka_server_raftmetrics_fetch_records_rate", "Records fetched per "
                    "second from the leader", 0.0 if leading else rate)
        latency = self.quorum.commit_latency
        recent = list(latency.recent_ms)
        yield gauge("kafka_server_raftmetrics_commit_latency_avg", "Mean milliseconds from "
                    "proposing to committing, recent commits",
                    sum(recent) / len(recent) if recent else 0.0)
        yield gauge("kafka_server_raftmetrics_commit_latency_max", "Longest milliseconds from "
                    "proposing to committing, recent commits", max(recent, default=0.0))


def _channel(counters: ChannelCounters) -> Iterator[Metric]:
    for name, doc, value in (
            ("request", "Requests sent to other controllers", counters.requests),
            ("response", "Responses received from other controllers", counters.responses),
            ("outgoing_byte", "Bytes sent to other controllers", counters.outgoing_bytes),
            ("incoming_byte", "Bytes received from other controllers",
             counters.incoming_bytes)):
        yield counter(f"kafka_server_raftchannelmetrics_{name}", doc, value)


def _cluster(image: MetadataImage) -> Iterator[Metric]:
    """kafka-exporter's cluster-wide series, from the active controller alone so that they
    appear once."""
    brokers = sorted(image.brokers.values(), key=lambda broker: broker.broker_id)
    yield gauge("kafka_brokers", "Registered brokers", len(brokers))
    yield gauge("kafka_broker_info", "1 per registered broker, labelled with its address",
                series=(({"id": str(broker.broker_id),
                          "address": ":".join(map(str, broker.endpoints[0][1:]))
                          if broker.endpoints else ""}, 1)
                        for broker in brokers))
    yield gauge("kafka_topic_partitions", "Partitions of the topic",
                series=(({"topic": name}, len(topic.partitions))
                        for name, topic in sorted(image.topics.items())))
