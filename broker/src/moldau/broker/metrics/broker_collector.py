"""Kafka's broker-side JMX metrics under the names Strimzi's JMX exporter rules give them
(lower-cased `kafka_<domain>_<type>_<name>`, `_total` for meters), computed when scraped."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from moldau.broker.handlers.registry import APIS
from moldau.broker.metrics.families import counter, gauge, summary
from moldau.broker.metrics.stats import quantile

if TYPE_CHECKING:
    from moldau.broker.server import Broker

# Strimzi turns Kafka's NthPercentile attributes into quantile="0.N".
PERCENTILES = {"0.50": 0.50, "0.75": 0.75, "0.95": 0.95, "0.98": 0.98, "0.99": 0.99,
               "0.999": 0.999}

_TOPIC_METERS = (
    ("messagesin", "messages_in", "Records appended by produce requests"),
    ("bytesin", "bytes_in", "Bytes of record batches appended by produce requests"),
    ("bytesout", "bytes_out", "Bytes of records sent to consumers (not followers)"),
    ("totalproducerequests", "produce_requests", "Produce requests, per partition"),
    ("failedproducerequests", "failed_produce_requests", "Produce requests that failed, "
     "per partition"),
    ("totalfetchrequests", "fetch_requests", "Fetch requests, per partition"),
    ("failedfetchrequests", "failed_fetch_requests", "Fetch requests that failed, per "
     "partition"),
)


class BrokerCollector:
    """BrokerTopicMetrics, RequestMetrics, ReplicaManager, Partition, Log and SocketServer."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_meters()
        yield from self._requests()
        yield self._connections()
        yield from _disk_io()
        # Start-up fills the partition table in a thread: read it only once started.
        if self.broker.started and self.broker.config.is_broker:
            yield gauge("kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
                        "Share of the request handlers' time spent idle since start (0 to 1)",
                        self.broker.handlers.idle_fraction())
            yield from self._replicas()
            yield from self._logs()

    def _topic_meters(self) -> Iterator[Metric]:
        topics = dict(self.broker.topic_stats.topics)
        for suffix, attribute, doc in _TOPIC_METERS:
            values = [(name, getattr(counters, attribute)) for name, counters in topics.items()]
            yield counter(f"kafka_server_brokertopicmetrics_{suffix}", doc,
                          sum(value for _, value in values),
                          series=(({"topic": name}, value) for name, value in values))

    def _requests(self) -> Iterator[Metric]:
        requests = self.broker.channel.stats
        named = [(APIS[key].name if key in APIS else str(key), stats)
                 for key, stats in sorted(requests.apis.items())]
        named += [(name, requests.named[name]) for name in sorted(requests.named)]
        by_version = []
        times = []
        for name, stats in named:
            by_version += [({"request": name, "version": str(version)}, count)
                           for version, count in sorted(stats.by_version.items())]
            latency = stats.latency
            recent = sorted(latency.recent_ms)
            times.append(({"request": name}, latency.count, latency.total_ms,
                          {label: quantile(recent, q) for label, q in PERCENTILES.items()}))
        yield counter("kafka_network_requestmetrics_requests",
                      "Requests answered, by API and version", series=by_version)
        yield summary("kafka_network_requestmetrics_totaltimems",
                      "Milliseconds from a request's arrival to its response written, by API",
                      times)

    def _connections(self) -> Metric:
        per_listener = collections.Counter(self.broker.network.listener_of_connections())
        for endpoint in self.broker.network.bound:
            per_listener.setdefault(endpoint.listener, 0)
        # One event loop serves every connection: a single network processor, "0".
        return gauge("kafka_server_socket_server_metrics_connection_count",
                     "Open client connections per listener",
                     series=(({"listener": listener, "networkProcessor": "0"}, count)
                             for listener, count in sorted(per_listener.items())))

    def _replicas(self) -> Iterator[Metric]:
        partitions = list(self.broker.replicas.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        under_replicated, under_min, at_min = set(), set(), set()
        for p in leaders:
            isr, min_isr = len(p.isr), p.log.config.min_insync_replicas
            if isr < len(p.record.replicas):
                under_replicated.add(p.key)
            if isr < min_isr:
                under_min.add(p.key)
            elif isr == min_isr:
                at_min.add(p.key)
        yield gauge("kafka_server_replicamanager_partitioncount",
                    "Partitions with a replica on this broker", len(partitions))
        yield gauge("kafka_server_replicamanager_leadercount",
                    "Partitions this broker leads", len(leaders))
        yield gauge("kafka_server_replicamanager_underreplicatedpartitions",
                    "Led partitions whose ISR is smaller than their replica set",
                    len(under_replicated))
        yield gauge("kafka_server_replicamanager_underminisrpartitioncount",
                    "Led partitions whose ISR is below min.insync.replicas", len(under_min))
        yield gauge("kafka_server_replicamanager_atminisrpartitioncount",
                    "Led partitions whose ISR is exactly min.insync.replicas", len(at_min))
        # Kafka's per-partition gauges: non-zero on the leader only.
        labelled = [({"topic": p.topic, "partition": str(p.index)}, p) for p in partitions]
        for name, doc, value in (
                ("underreplicated", "1 if this leader's ISR is smaller than the replica set",
                 lambda p: p.key in under_replicated),
                ("underminisr", "1 if this leader's ISR is below min.insync.replicas",
                 lambda p: p.key in under_min),
                ("atminisr", "1 if this leader's ISR is exactly min.insync.replicas",
                 lambda p: p.key in at_min),
                ("insyncreplicascount", "Size of the ISR (on the leader)",
                 lambda p: len(p.isr) if p.is_leader else 0),
                ("replicascount", "Size of the replica set (on the leader)",
                 lambda p: len(p.record.replicas) if p.is_leader else 0)):
            yield gauge(f"kafka_cluster_partition_{name}", doc,
                        series=((labels, float(value(p))) for labels, p in labelled))

    def _logs(self) -> Iterator[Metric]:
        logs = [(p.topic, str(p.index), p.log) for p in self.broker.replicas.partitions.values()]
        for name, doc, value in (
                ("size", "Bytes of the partition's segment files", lambda log: log.size_in_bytes),
                ("numlogsegments", "Segments of the partition", lambda log: log.num_segments),
                ("logstartoffset", "First offset of the partition",
                 lambda log: log.log_start_offset),
                ("logendoffset", "Offset after the last record", lambda log: log.log_end_offset)):
            yield gauge(f"kafka_log_log_{name}", doc,
                        series=(({"topic": topic, "partition": index}, value(log))
                                for topic, index, log in logs))
        # Moldau has no offline log directories: a failing directory stops the broker.
        yield gauge("kafka_log_logmanager_offlinelogdirectorycount",
                    "Log directories that failed and went offline", 0)


def _disk_io() -> Iterator[Metric]:
    """Kafka's KafkaServer linux-disk-read/write-bytes: this process's block I/O (Linux)."""
    try:
        with open("/proc/self/io") as io:
            fields = dict(line.split(": ") for line in io.read().splitlines())
    except OSError:
        return
    yield gauge("kafka_server_kafkaserver_linux_disk_read_bytes",
                "Bytes this process read from storage", float(fields["read_bytes"]))
    yield gauge("kafka_server_kafkaserver_linux_disk_write_bytes",
                "Bytes this process wrote to storage", float(fields["write_bytes"]))
