"""The transaction coordinator's APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
ListTransactions and DescribeTransactions (InitProducerId is in producer_ids.py,
FindCoordinator in groups.py).

Transaction version 1 only: EndTxn up to v4 (v5 is transaction version 2). AddPartitionsToTxn
v4 and v5 are the partition leaders' KIP-890 verification; see docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.coordinators.group.records import OFFSETS_TOPIC, partition_for
from moldau.broker.coordinators.transaction.records import TxnState
from moldau.broker.handlers.authz import (
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    allowed,
    allowed_names,
    cluster_allowed,
)
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.controller import INTERNAL_TOPICS
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

# The first version of each API that knows PRODUCER_FENCED (KIP-588); older ones are told
# INVALID_PRODUCER_EPOCH, which they take for the same fatal condition.
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}
STATES_BY_NAME = {state.display: state for state in TxnState}


def for_version(request: Request, error: ErrorCode) -> ErrorCode:
    header = request.header
    if error is ErrorCode.producer_fenced and \
            header.api_version < PRODUCER_FENCED_SINCE.get(header.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error


@api(24, "AddPartitionsToTxn", 0, 5)
async def handle_add_partitions_to_txn(broker: Broker, request: Request) -> Result:
    """Versions up to 3 come from producers (one transaction); 4 and later from partition
    leaders (KIP-890: a batch of transactions, each added or only verified), which need
    CLUSTER_ACTION."""
    body = request.body
    if request.header.api_version <= 3:
        wanted = {topic.name: set(topic.partitions) for topic in body.v3_and_below_topics}
        errors = await _add_or_verify(
            broker, request, body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, wanted,
            verify_only=False)
        return respond(request, {"results_by_topic_v3_and_below": _topic_results(errors)})
    if not cluster_allowed(broker, request, Operation.CLUSTER_ACTION):
        return respond(request, {"error_code": ErrorCode.cluster_authorization_failed,
                                 "results_by_transaction": []})
    results = []
    for txn in body.transactions:
        wanted = {topic.name: set(topic.partitions) for topic in txn.topics}
        errors = await _add_or_verify(broker, request, txn.transactional_id, txn.producer_id,
                                      txn.producer_epoch, wanted, verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": _topic_results(errors)})
    return respond(request, {"error_code": ErrorCode.none, "results_by_transaction": results})


async def _add_or_verify(broker: Broker, request: Request, transactional_id: str,
                         producer_id: int, epoch: int, wanted: dict[str, set[int]], *,
                         verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's answer per partition, as Kafka's KafkaApis gives it."""
    keys = [(name, index) for name, parts in wanted.items() for index in sorted(parts)]
    from_client = request.header.api_version <= 3
    if from_client and not allowed(broker, request, Operation.WRITE, TRANSACTIONAL_ID,
                                   transactional_id):
        return dict.fromkeys(keys, ErrorCode.transactional_id_authorization_failed)
    # Producers need WRITE on each topic and never add internal topics (Kafka refuses them
    # as unauthorized whatever the ACLs); brokers are trusted with any topic.
    writable = allowed_names(broker, request, Operation.WRITE, TOPIC,
                             (name for name in wanted if name not in INTERNAL_TOPICS)) \
        if from_client else set(wanted)
    refused = {key: ErrorCode.topic_authorization_failed if key[0] not in writable
               else ErrorCode.unknown_topic_or_partition for key in keys
               if key[0] not in writable or not broker.partition_exists(*key)}
    if refused:
        # As Kafka: nothing is added when any partition is refused or unknown.
        return {key: refused.get(key, ErrorCode.operation_not_attempted) for key in keys}
    if verify_only:
        return broker.transactions.verify_partitions(transactional_id, producer_id, epoch,
                                                     keys)
    error = for_version(request, await broker.transactions.add_partitions(
        transactional_id, producer_id, epoch, wanted))
    return dict.fromkeys(keys, error)


def _topic_results(errors: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, index), error in errors.items():
        topics.setdefault(name, []).append({"partition_index": index,
                                            "partition_error_code": error})
    return [{"name": name, "results_by_partition": partitions}
            for name, partitions in topics.items()]


@api(25, "AddOffsetsToTxn", 0, 3)
async def handle_add_offsets_to_txn(broker: Broker, request: Request) -> Result:
    """The group's `__consumer_offsets` partition joins the transaction, so that its
    markers reach the offsets TxnOffsetCommit writes there."""
    body = request.body
    if not allowed(broker, request, Operation.WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return respond(request, {"error_code": ErrorCode.transactional_id_authorization_failed})
    if not allowed(broker, request, Operation.READ, GROUP, body.group_id):
        return respond(request, {"error_code": ErrorCode.group_authorization_failed})
    try:
        await broker.offsets_topic.ensure_created()
    except KafkaError:
        return respond(request, {"error_code": ErrorCode.coordinator_not_available})
    partition = partition_for(body.group_id, broker.offsets_topic.partitions)
    error = await broker.transactions.add_partitions(
        body.transactional_id, body.producer_id, body.producer_epoch,
        {OFFSETS_TOPIC: {partition}})
    return respond(request, {"error_code": for_version(request, error)})


@api(26, "EndTxn", 0, 4)
async def handle_end_txn(broker: Broker, request: Request) -> Result:
    body = request.body
    if not allowed(broker, request, Operation.WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return respond(request, {"error_code": ErrorCode.transactional_id_authorization_failed})
    error = await broker.transactions.end_txn(body.transactional_id, body.producer_id,
                                              body.producer_epoch, body.committed)
    return respond(request, {"error_code": for_version(request, error)})


@api(66, "ListTransactions", 0, 1)
async def handle_list_transactions(broker: Broker, request: Request) -> Result:
    body = request.body
    unknown = [name for name in body.state_filters if name not in STATES_BY_NAME]
    states = {STATES_BY_NAME[name] for name in body.state_filters if name in STATES_BY_NAME}
    if unknown and not states:
        listed = []  # only states that do not exist were asked for
    else:
        listed = broker.transactions.list(
            states, set(body.producer_id_filters),
            body.duration_filter if request.header.api_version >= 1 else -1)
    # Only the transactional ids the client may describe.
    listed = [meta for meta in listed if allowed(
        broker, request, Operation.DESCRIBE, TRANSACTIONAL_ID, meta.transactional_id,
        log_denied=False)]
    return respond(request, {
        "error_code": broker.transactions.listing_error(), "unknown_state_filters": unknown,
        "transaction_states": [{"transactional_id": meta.transactional_id,
                                "producer_id": meta.producer_id,
                                "transaction_state": meta.state.display}
                               for meta in listed]})


@api(65, "DescribeTransactions", 0, 0)
async def handle_describe_transactions(broker: Broker, request: Request) -> Result:
    states: list[dict[str, Any]] = []
    for txn_id in request.body.transactional_ids:
        if not allowed(broker, request, Operation.DESCRIBE, TRANSACTIONAL_ID, txn_id):
            error, meta = ErrorCode.transactional_id_authorization_failed, None
        else:
            error, meta = broker.transactions.describe(txn_id)
        if meta is None:
            states.append({"error_code": error, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout": 0,
                           "transaction_start_time": -1, "producer_id": -1,
                           "producer_epoch": -1, "topics": []})
            continue
        states.append({"error_code": ErrorCode.none, "transactional_id": txn_id,
                       "transaction_state": meta.state.display,
                       "transaction_timeout": meta.timeout_ms,
                       "transaction_start_time": meta.start_ms,
                       "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                       "topics": [{"topic": topic, "partitions": sorted(parts)}
                                  for topic, parts in sorted(meta.partitions.items())
                                  # only the topics the client may describe
                                  if allowed(broker, request, Operation.DESCRIBE, TOPIC,
                                             topic)]})
    return respond(request, {"transaction_states": states})
