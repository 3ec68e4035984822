"""Transaction markers: the second phase of a transaction, on each of its partitions.

Once PrepareCommit or PrepareAbort is written, the coordinator has the leader of every
partition in the transaction append a COMMIT or ABORT control batch (WriteTxnMarkers). A
partition this node leads gets it through the same append as the inter-broker request;
the others get one request per leader. Partitions that fail are retried, with their leader
looked up again each round, until every marker is written, the partition is gone, or this
node stops coordinating the transaction.

Both ways in end in append_markers(), which tells the group coordinator of the markers it
wrote: a marker in `__consumer_offsets` commits or drops the transaction's pending offsets
there (TxnOffsetCommit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moldau.broker.replication.appends import ProduceResult
from moldau.broker.replication.peer_connections import PeerConnections
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

if TYPE_CHECKING:
    from moldau.broker.replication.manager import ReplicaManager

log = logging.getLogger("moldau.broker.transactions")

WRITE_TXN_MARKERS_KEY = 27
WRITE_TXN_MARKERS_VERSION = 1
# Kafka waits request.timeout.ms (its default) for the markers to be replicated.
MARKER_REPLICATION_TIMEOUT_MS = 30000
RETRY_BACKOFF_S = 0.1
MAX_RETRY_BACKOFF_S = 1.0
MAX_IN_FLIGHT = 20  # marker requests in flight to one broker
TopicPartition = tuple[str, int]
# Told, once a marker is replicated, which partitions have it: (producer id, commit, them).
MarkersWritten = Callable[[int, bool, list[TopicPartition]], None]


@dataclass(frozen=True)
class Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


async def append_markers(replicas: ReplicaManager, markers: Sequence[Marker],
                         written: MarkersWritten) -> list[list[ErrorCode]]:
    """Append each marker on the partitions this node leads and wait until the in-sync
    replicas have them, as an acks=all produce; `written` hears of those that have it. The
    error per marker and partition."""
    entries: list[tuple[str, int, None]] = []
    results: list[ProduceResult] = []
    for marker in markers:
        for topic, index in marker.partitions:
            entries.append((topic, index, None))
            results.append(replicas.append_txn_marker(
                topic, index, marker.producer_id, marker.producer_epoch,
                marker.coordinator_epoch, marker.commit))
    await replicas.wait_for_replication(entries, results, MARKER_REPLICATION_TIMEOUT_MS)
    answers = iter(results)
    errors = [[ErrorCode(next(answers).error) for _ in marker.partitions]
              for marker in markers]
    for marker, marker_errors in zip(markers, errors, strict=True):
        done = [key for key, error in zip(marker.partitions, marker_errors, strict=True)
                if error is ErrorCode.none]
        if done:
            written(marker.producer_id, marker.commit, done)
    return errors


class CoordinatorFenced(Exception):
    """A partition knows a newer coordinator epoch: another node coordinates this id now."""


class MarkerChannel:
    """Sends markers to partition leaders until written (Kafka's
    TransactionMarkerChannelManager), one connection per broker."""

    def __init__(self, node_id: int, replicas: ReplicaManager, written: MarkersWritten, *,
                 request_timeout_ms: int = MARKER_REPLICATION_TIMEOUT_MS + 5000,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.written = written  # hears of the markers appended here (see append_markers)
        self.peers = PeerConnections(node_id, replicas, purpose="txn-markers",
                                     request_timeout_ms=request_timeout_ms,
                                     max_in_flight=MAX_IN_FLIGHT, security=security)

    async def write(self, marker: Marker, wanted: Callable[[], bool]) -> bool:
        """Until every partition of `marker` has it: True when done, False when `wanted()`
        turned false first. Raises CoordinatorFenced."""
        remaining = set(marker.partitions)
        backoff = RETRY_BACKOFF_S
        while remaining and wanted():
            by_leader = self._leaders(remaining, marker)
            rounds = [self._send(leader, marker, sorted(parts))
                      for leader, parts in by_leader.items()]
            for errors in await asyncio.gather(*rounds):
                for key, error in errors.items():
                    if error in (ErrorCode.none, ErrorCode.invalid_producer_epoch):
                        # INVALID_PRODUCER_EPOCH: the partition has seen a newer epoch of
                        # this producer, so nothing of this one is open there.
                        remaining.discard(key)
                    elif error is ErrorCode.transaction_coordinator_fenced:
                        raise CoordinatorFenced(f"{key[0]}-{key[1]} knows a newer "
                                                "coordinator epoch")
                    else:
                        log.debug("Marker for producer %d on %s-%d not written: %s; retrying",
                                  marker.producer_id, *key, error.name)
            if remaining and wanted():
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)
        return not remaining

    def _leaders(self, remaining: set[TopicPartition], marker: Marker
                 ) -> dict[int, set[TopicPartition]]:
        """The partitions grouped by their current leader (-1: none now). A partition whose
        topic was deleted is dropped: there is nothing left to end."""
        by_leader: dict[int, set[TopicPartition]] = {}
        for key in list(remaining):
            topic = self.replicas.image.topics.get(key[0])
            record = None if topic is None else topic.partitions.get(key[1])
            if record is None:
                log.info("Dropped the marker for producer %d on %s-%d: the partition no "
                         "longer exists", marker.producer_id, *key)
                remaining.discard(key)
                continue
            by_leader.setdefault(record.leader, set()).add(key)
        return by_leader

    async def _send(self, leader: int, marker: Marker, parts: list[TopicPartition]
                    ) -> dict[TopicPartition, ErrorCode]:
        one = Marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                     marker.commit, tuple(parts))
        if leader < 0:
            return dict.fromkeys(parts, ErrorCode.leader_not_available)
        if leader == self.node_id:
            [errors] = await append_markers(self.replicas, [one], self.written)
            return dict(zip(parts, errors, strict=True))
        try:
            return await self._send_remote(leader, one)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.info("Cannot send markers to broker %d: %s", leader, exc)
            return dict.fromkeys(parts, ErrorCode.network_exception)

    async def _send_remote(self, leader: int, marker: Marker
                           ) -> dict[TopicPartition, ErrorCode]:
        topics: dict[str, list[int]] = {}
        for topic, index in marker.partitions:
            topics.setdefault(topic, []).append(index)
        body = build(request_class(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION), {
            "markers": [{"producer_id": marker.producer_id,
                         "producer_epoch": marker.producer_epoch,
                         "transaction_result": marker.commit,
                         "coordinator_epoch": marker.coordinator_epoch,
                         "topics": [{"name": name, "partition_indexes": indexes}
                                    for name, indexes in topics.items()]}]})
        response = await self.peers.send(leader, WRITE_TXN_MARKERS_KEY,
                                         WRITE_TXN_MARKERS_VERSION, body)
        errors = {(topic.name, partition.partition_index): ErrorCode(partition.error_code)
                  for answer in response.markers for topic in answer.topics
                  for partition in topic.partitions}
        return {key: errors.get(key, ErrorCode.unknown_server_error)
                for key in marker.partitions}

    def close(self) -> None:
        self.peers.close()
