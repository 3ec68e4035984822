"""DescribeProducers (KIP-664): the producers a partition's state holds, as
`kafka-transactions.sh describe-producers` shows them.

Any replica answers from its own log (the tool asks the leader unless given --broker-id);
a node with no replica answers NOT_LEADER_OR_FOLLOWER, an unknown partition
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import TOPIC, allowed_names
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(61, "DescribeProducers", 0, 0)
async def handle_describe_producers(broker: Broker, request: Request) -> Result:
    topics = request.body.topics
    readable = allowed_names(broker, request, Operation.READ, TOPIC,
                             (topic.name for topic in topics))
    return respond(request, {"topics": [
        {"name": topic.name,
         "partitions": [_partition(broker, topic.name, index) if topic.name in readable
                        else {"partition_index": index, "active_producers": [],
                              "error_code": ErrorCode.topic_authorization_failed}
                        for index in topic.partition_indexes]}
        for topic in topics]})


def _partition(broker: Broker, topic: str, index: int) -> dict[str, Any]:
    try:
        producers = broker.replicas.hosted(topic, index).log.active_producers()
    except KafkaError as exc:
        # Kafka sends the code alone: clients print the error's standard text.
        return {"partition_index": index, "error_code": exc.code, "active_producers": []}
    return {"partition_index": index, "error_code": ErrorCode.none, "active_producers": [
        {"producer_id": p.producer_id, "producer_epoch": p.epoch,
         "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
         "coordinator_epoch": p.coordinator_epoch,
         "current_txn_start_offset": p.txn_start_offset}
        for p in producers]}
