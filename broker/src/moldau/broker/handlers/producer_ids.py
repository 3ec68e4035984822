"""InitProducerId: a fresh producer id for an idempotent producer, or, with a transactional
id, the transaction coordinator's producer id and epoch for it (which fences older
producers of the id)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.broker.handlers.authz import TOPIC, TRANSACTIONAL_ID, allowed, cluster_allowed
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.handlers.transactions import for_version
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import millis

if TYPE_CHECKING:
    from moldau.broker.server import Broker


def _refusal(broker: Broker, request: Request) -> ErrorCode | None:
    """A transactional producer needs WRITE on its transactional id; an idempotent one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka's KIP-679 rule)."""
    transactional_id = request.body.transactional_id
    if transactional_id is not None:
        if not allowed(broker, request, Operation.WRITE, TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        return None
    authorizer = broker.authorizer
    if cluster_allowed(broker, request, Operation.IDEMPOTENT_WRITE, log_denied=False) or \
            authorizer.authorize_by_type(request.principal, request.host, Operation.WRITE,
                                         TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


@api(22, "InitProducerId", 0, 5)
async def handle_init_producer_id(broker: Broker, request: Request) -> Result:
    body = request.body
    refusal = _refusal(broker, request)
    if refusal is not None:
        return respond(request, {"error_code": refusal, "producer_id": -1,
                                 "producer_epoch": -1})
    if body.transactional_id is not None:
        expected = None
        if request.header.api_version >= 3 and body.producer_id >= 0:
            expected = (body.producer_id, body.producer_epoch)  # KIP-360
        error, producer_id, epoch = await broker.transactions.init_producer_id(
            body.transactional_id, millis(body.transaction_timeout), expected)
        return respond(request, {"error_code": for_version(request, error),
                                 "producer_id": producer_id, "producer_epoch": epoch})
    # Without a transactional id, Kafka always hands out a fresh id at epoch 0.
    try:
        producer_id = await broker.producer_ids.next_id()
    except KafkaError as exc:
        # No block from the controller yet (say it is failing over): the client retries.
        return respond(request, {"error_code": exc.code, "producer_id": -1,
                                 "producer_epoch": -1})
    return respond(request, {"error_code": ErrorCode.none, "producer_id": producer_id,
                             "producer_epoch": 0})
