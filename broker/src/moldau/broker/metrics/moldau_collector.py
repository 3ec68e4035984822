"""Moldau's own metrics (`moldau_*`): queues, event-loop lag, groups by state and start-up
times, for what Kafka's JMX names do not describe."""

from __future__ import annotations

import collections
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from moldau.broker.metrics.families import counter, gauge, summary

if TYPE_CHECKING:
    from moldau.broker.replication.manager import ReplicaManager
    from moldau.broker.server import Broker


class MoldauCollector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        yield gauge("moldau_request_queue_size", "Requests waiting for a request handler",
                    broker.channel.qsize())
        yield gauge("moldau_event_loop_lag_seconds", "How late the event loop ran its last "
                    "lag check timer", broker.loop_lag.lag_s)
        yield gauge("moldau_event_loop_lag_max_seconds", "Largest event loop lag seen",
                    broker.loop_lag.max_lag_s)
        if broker.log_recovery_s is not None:
            yield gauge("moldau_log_recovery_seconds", "Time taken to load and recover the "
                        "logs at start-up", broker.log_recovery_s)
        logs = getattr(broker, "logs", None)
        if logs is not None:
            yield from _log_dir_space(logs.log_dirs)
        replicas = getattr(broker, "replicas", None)
        if replicas is not None:
            yield gauge("moldau_io_pool_queue_size", "Disk tasks waiting for an I/O thread",
                        replicas.executor._work_queue.qsize())
            yield from _replication_throttle(replicas)
        groups = getattr(broker, "groups", None)
        if groups is not None:
            states = collections.Counter(g.state.value for g in groups.groups.values())
            yield gauge("moldau_group_coordinator_groups", "Groups this broker coordinates, "
                        "by state", series=(({"state": state}, count)
                                            for state, count in sorted(states.items())))
        latency = broker.quorum.commit_latency if hasattr(broker, "quorum") else None
        if latency is not None:
            # Prometheus' base unit is the second; Kafka's own names keep their ms.
            yield summary("moldau_raft_commit_latency_seconds", "Seconds from proposing "
                          "metadata records to their commit, on the leader",
                          [({}, latency.count, latency.total_ms / 1000, {})])


def _replication_throttle(replicas: ReplicaManager) -> Iterator[Metric]:
    """Bytes of throttled replicas (Kafka's LeaderReplication / FollowerReplication
    byte-rate): served to followers as leader, fetched as follower."""
    for side, quota in (("leader", replicas.leader_quota), ("follower", replicas.follower_quota)):
        yield counter(f"moldau_{side}_replication_throttled_bytes",
                      f"Bytes of throttled replicas replicated as {side}",
                      quota.throttled_bytes_total)
        yield gauge(f"moldau_{side}_replication_throttled_byte_rate",
                    f"Bytes per second of throttled replicas replicated as {side}, over the "
                    "replication quota windows", quota.observed_rate())


def _log_dir_space(log_dirs: list[str]) -> Iterator[Metric]:
    """Each log directory's file system size and free space, as DescribeLogDirs reports them
    (KIP-827's total_bytes and usable_bytes), so the disk alert needs no node_exporter and
    works wherever the broker runs."""
    usage = []
    for directory in log_dirs:
        try:
            usage.append(({"log_dir": directory}, shutil.disk_usage(directory)))
        except OSError:  # a directory removed under a running broker: nothing to report
            continue
    yield gauge("moldau_log_dir_total_bytes", "Size of the file system holding the log "
                "directory", series=((labels, u.total) for labels, u in usage))
    yield gauge("moldau_log_dir_usable_bytes", "Free space on the file system holding the "
                "log directory", series=((labels, u.free) for labels, u in usage))
