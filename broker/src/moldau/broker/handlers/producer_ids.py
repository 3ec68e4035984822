"""InitProducerId for idempotent producers (transactional ids are refused until the
transaction coordinator exists: see transactions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.handlers.transactions import TRANSACTIONS_UNSUPPORTED, refuse_transactional_id
from moldau.broker.network.channel import Request
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(22, "InitProducerId", 0, 5)
async def handle_init_producer_id(broker: Broker, request: Request) -> Result:
    body = request.body
    if body.transactional_id is not None:
        refuse_transactional_id(request, "InitProducerId", body.transactional_id)
        return respond(request, {"error_code": TRANSACTIONS_UNSUPPORTED,
                                 "producer_id": -1, "producer_epoch": -1})
    # Without a transactional id, Kafka always hands out a fresh id at epoch 0.
    try:
        producer_id = await broker.producer_ids.next_id()
    except KafkaError as exc:
        # No block from the controller yet (say it is failing over): the client retries.
        return respond(request, {"error_code": exc.code, "producer_id": -1,
                                 "producer_epoch": -1})
    return respond(request, {"error_code": ErrorCode.none, "producer_id": producer_id,
                             "producer_epoch": 0})
