"""SaslHandshake and SaslAuthenticate (KIP-43, KIP-152): the connection's SASL session
does the work; a refused client gets Kafka's error and the connection closes after it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.sasl import AuthenticationFailed
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker


def _last(request: Request, data: dict[str, object]) -> Result:
    """A refusal: the response is written, then the connection is closed."""
    request.connection.close_after_response = True
    return respond(request, data)


@api(17, "SaslHandshake", 0, 1)
async def handle_sasl_handshake(broker: Broker, request: Request) -> Result:
    connection = request.connection
    session = getattr(connection, "sasl", None)
    if session is None:
        return _last(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})
    mechanism = request.body.mechanism
    if not session.handshake(mechanism, request.header.api_version):
        connection.auth_log.failure(connection.listener, connection.peer,
                                    f"Unsupported SASL mechanism {mechanism}")
        return _last(request, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                               "mechanisms": session.mechanisms})
    return respond(request, {"error_code": ErrorCode.none, "mechanisms": session.mechanisms})


@api(36, "SaslAuthenticate", 0, 2)
async def handle_sasl_authenticate(broker: Broker, request: Request) -> Result:
    connection = request.connection
    session = getattr(connection, "sasl", None)
    if session is None:
        return _last(request, {"error_code": ErrorCode.illegal_sasl_state,
                               "error_message": "SASL is not enabled on this listener",
                               "auth_bytes": b"", "session_lifetime": 0})
    try:
        reply = connection.authenticate(request.body.auth_bytes)
    except AuthenticationFailed as exc:
        return respond(request, {"error_code": ErrorCode.sasl_authentication_failed,
                                 "error_message": str(exc), "auth_bytes": b"",
                                 "session_lifetime": 0})
    lifetime = session.reauth_ms if session.authenticated else 0
    return respond(request, {"error_code": ErrorCode.none, "error_message": None,
                             "auth_bytes": reply, "session_lifetime": lifetime})
