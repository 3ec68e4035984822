"""DescribeClientQuotas: Moldau has no client quotas, so every query matches none. Kafka's
kafka-configs asks for them when it describes users, next to their SCRAM credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.broker.handlers.authz import MESSAGES, cluster_allowed
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(48, "DescribeClientQuotas", 0, 1)
async def handle_describe_client_quotas(broker: Broker, request: Request) -> Result:
    if not cluster_allowed(broker, request, Operation.DESCRIBE_CONFIGS):
        denied = ErrorCode.cluster_authorization_failed
        return respond(request, {"error_code": denied, "error_message": MESSAGES[denied],
                                 "entries": None})
    return respond(request, {"error_code": ErrorCode.none, "error_message": None,
                             "entries": []})
