"""DescribeQuorum on the broker listener, as `kafka-metadata-quorum --bootstrap-server` uses
it: brokers forward it to the active controller (see Broker._dispatch), which answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.broker.handlers.authz import cluster_allowed, needs
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.broker.raft.wire import quorum_info_to_wire
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode
from moldau.protocol.messages import encode_response

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(55, "DescribeQuorum", 0, 2)
async def handle_describe_quorum(broker: Broker, request: Request) -> Result:
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        return respond(request, {"error_code": ErrorCode.cluster_authorization_failed,
                                 "error_message": needs(request, Operation.DESCRIBE),
                                 "topics": []})
    # Only the leader knows the replicas' positions; elsewhere this carries
    # NOT_LEADER_OR_FOLLOWER and the leader's id.
    body = quorum_info_to_wire(broker.quorum.describe(), request.header.api_version)
    return Response.of(encode_response(request.header.correlation_id, body))
