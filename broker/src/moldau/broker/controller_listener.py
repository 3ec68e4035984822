"""Who may do what on the controller listener.

Its connections are the other nodes' (Raft, registration, heartbeats, forwarded admin
requests) and those of tools pointed at it (`--bootstrap-controller`). A connection's principal
is its TLS client certificate's, mapped by the listener's `ssl.principal.mapping.rules`, else
User:ANONYMOUS. With an authorizer, Raft requests and the brokers' own requests need
CLUSTER_ACTION on the cluster and DescribeQuorum DESCRIBE, as on Kafka's controllers; admin
requests are served by the same handlers as on the other listeners, so they are authorized
for the connection's principal, or for the client a broker forwarded them for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.registry import APIS, Deferred, decode_frame, dispatch
from moldau.broker.network.channel import Request
from moldau.broker.raft.tcp_transport import Caller, Service
from moldau.broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from moldau.broker.security.principal import (
    ANONYMOUS,
    NoMatchingRule,
    PrincipalMapper,
    host_address,
)
from moldau.protocol.messages import RequestHeader

if TYPE_CHECKING:
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.controller")

CONTROLLER_PORT = "CONTROLLER"


class ControllerListener:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self._mapper = PrincipalMapper(
            config.listener_setting(config.controller_listener_name,
                                    "ssl.principal.mapping.rules"))

    def identify(self, writer: asyncio.StreamWriter) -> Caller | None:
        """The principal and address of a new connection; None refuses it."""
        peer = writer.get_extra_info("peername") or ("", 0)
        host = host_address(str(peer[0]))
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is None:
            return Caller(ANONYMOUS, host)
        try:
            return Caller(self._mapper.principal_of_certificate(ssl_object.getpeercert(True)),
                          host)
        except NoMatchingRule as exc:
            log.warning("Refusing a connection from /%s to the controller listener: %s", host,
                        exc)
            return None

    def _may(self, caller: Caller, operation: Operation) -> bool:
        return self.broker.authorizer.authorize(caller.principal, caller.host, operation,
                                                ResourceType.CLUSTER, CLUSTER_NAME)

    def cluster_action(self, caller: Caller) -> bool:
        return self._may(caller, Operation.CLUSTER_ACTION)

    def gate(self, caller: Caller, raft: bool) -> bool:
        """Raft requests need CLUSTER_ACTION, DescribeQuorum DESCRIBE."""
        return self._may(caller, Operation.CLUSTER_ACTION if raft else Operation.DESCRIBE)

    def api(self, api_key: int) -> Service | None:
        """An admin API served on this listener, for whoever the caller is."""
        entry = APIS.get(api_key)
        if entry is None:
            return None
        broker = self.broker

        async def serve(frame: bytes, caller: Caller) -> bytes:
            request = decode_frame(frame, ControllerPortConnection(caller),
                                   unsupported_version_response)
            assert isinstance(request, Request)
            result = await dispatch(broker, request)
            if isinstance(result, Deferred):
                result = await result.wait
            assert result is not None
            return b"".join(part for part in result.parts if isinstance(part, bytes))

        return entry.min_version, entry.max_version, serve


class ControllerPortConnection:
    """Where a request served on the controller listener came from, for handlers."""

    listener = CONTROLLER_PORT

    def __init__(self, caller: Caller) -> None:
        self.principal = caller.principal
        self.host = caller.host
        self.peer = f"{caller.host} (controller listener)"

    def new_request(self, header: RequestHeader, body: object) -> Request:
        return Request(header=header, body=body, connection=self,  # type: ignore[arg-type]
                       received_at=time.monotonic(),
                       response=asyncio.get_running_loop().create_future())
