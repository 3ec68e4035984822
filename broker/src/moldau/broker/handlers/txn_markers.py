"""WriteTxnMarkers: the transaction coordinator ends a transaction on each of its partitions.

Inter-broker (KIP-98): for every marker, the leader of each named partition appends a COMMIT
or ABORT control batch for the producer, and answers once the in-sync replicas have it, as an
acks=all produce. Errors are per partition, as Kafka reports them: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (older producer epoch),
TRANSACTION_COORDINATOR_FENCED (older coordinator epoch), REQUEST_TIMED_OUT.

A marker written into a `__consumer_offsets` partition also ends the transaction's pending
offsets there (TxnOffsetCommit): once it is replicated, the group coordinator is told.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.group.records import OFFSETS_TOPIC
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.replication.appends import ProduceResult
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker

# Kafka waits request.timeout.ms (its default) for the markers to be replicated.
MARKER_REPLICATION_TIMEOUT_MS = 30000


@api(27, "WriteTxnMarkers", 1, 2)
async def handle_write_txn_markers(broker: Broker, request: Request) -> Result:
    replicas = broker.replicas
    entries: list[tuple[str, int, None]] = []
    results: list[ProduceResult] = []
    for marker in request.body.markers:
        for topic in marker.topics:
            for index in topic.partition_indexes:
                entries.append((topic.name, index, None))
                results.append(replicas.append_txn_marker(
                    topic.name, index, marker.producer_id, marker.producer_epoch,
                    marker.coordinator_epoch, marker.transaction_result))
    await replicas.wait_for_replication(entries, results, MARKER_REPLICATION_TIMEOUT_MS)
    answers = iter(results)
    out: list[dict[str, Any]] = []
    for marker in request.body.markers:
        topics = [{"name": topic.name,
                   "partitions": [{"partition_index": index, "error_code": next(answers).error}
                                  for index in topic.partition_indexes]}
                  for topic in marker.topics]
        out.append({"producer_id": marker.producer_id, "topics": topics})
        end_pending_offsets(broker, marker.producer_id, marker.transaction_result, [
            (topic["name"], partition["partition_index"]) for topic in topics
            for partition in topic["partitions"] if partition["error_code"] is ErrorCode.none])
    return respond(request, {"markers": out})


def end_pending_offsets(broker: Broker, producer_id: int, commit: bool,
                        written: list[tuple[str, int]]) -> None:
    """Markers of the producer's transaction are written (and replicated) into `written`:
    those in `__consumer_offsets` commit or drop the offsets it holds there pending."""
    partitions = [index for topic, index in written if topic == OFFSETS_TOPIC]
    if partitions:
        broker.groups.complete_transaction(producer_id, partitions, commit)
