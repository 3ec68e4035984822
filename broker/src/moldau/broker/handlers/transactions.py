"""Transactional producers, until the transaction coordinator exists.

A client that sets `transactional.id` starts with FindCoordinator (key type TRANSACTION) and
then InitProducerId with its transactional id. Both are refused at once with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: it is the one code that the Java producer and
librdkafka both treat as fatal on both requests, so `initTransactions()` /
`init_transactions()` fails straight away instead of retrying until its timeout. The other
transactional APIs (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) are not
advertised in ApiVersions, so no client gets as far as sending them.
"""

from __future__ import annotations

import logging

from moldau.broker.network.channel import Request
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.broker.transactions")

TRANSACTIONS_UNSUPPORTED = ErrorCode.transactional_id_authorization_failed


def refuse_transactional_id(request: Request, api_name: str, transactional_id: str) -> str:
    """Log why the request is refused, in one line, and return the message for the client."""
    message = (f"Transactions are not supported by this broker yet (transactional.id "
               f"'{transactional_id}')")
    log.warning("Refused %s from client %r at %s: %s", api_name, request.header.client_id,
                request.client_address, message)
    return message
