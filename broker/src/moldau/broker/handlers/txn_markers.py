"""WriteTxnMarkers: the transaction coordinator ends a transaction on each of its partitions.

Inter-broker (KIP-98): for every marker, the leader of each named partition appends a COMMIT
or ABORT control batch for the producer, and answers once the in-sync replicas have it, as an
acks=all produce. Errors are per partition, as Kafka reports them: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (older producer epoch),
TRANSACTION_COORDINATOR_FENCED (older coordinator epoch), REQUEST_TIMED_OUT. A marker in
`__consumer_offsets` also ends the transaction's pending offsets there (see markers.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.transaction.markers import Marker, append_markers
from moldau.broker.handlers.authz import cluster_allowed
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(27, "WriteTxnMarkers", 1, 2)
async def handle_write_txn_markers(broker: Broker, request: Request) -> Result:
    markers = request.body.markers
    # Only transaction coordinators send it: ALTER or CLUSTER_ACTION on the cluster.
    if not cluster_allowed(broker, request, Operation.ALTER, log_denied=False) and \
            not cluster_allowed(broker, request, Operation.CLUSTER_ACTION):
        denied = ErrorCode.cluster_authorization_failed
        return _respond(request, [[denied for topic in marker.topics
                                   for _ in topic.partition_indexes] for marker in markers])
    errors = await append_markers(broker.replicas, [
        Marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
               marker.transaction_result,
               tuple((topic.name, index) for topic in marker.topics
                     for index in topic.partition_indexes))
        for marker in markers], broker.groups.markers_written)
    return _respond(request, errors)


def _respond(request: Request, errors: Any) -> Result:
    markers = request.body.markers
    out: list[dict[str, Any]] = []
    for marker, marker_errors in zip(markers, errors, strict=True):
        answers = iter(marker_errors)
        topics = [{"name": topic.name,
                   "partitions": [{"partition_index": index, "error_code": next(answers)}
                                  for index in topic.partition_indexes]}
                  for topic in marker.topics]
        out.append({"producer_id": marker.producer_id, "topics": topics})
    return respond(request, {"markers": out})
