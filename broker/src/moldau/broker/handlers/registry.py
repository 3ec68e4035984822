"""The API table and dispatch: one handler per API key, as Kafka's KafkaApis has it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.protocol.build import build
from moldau.protocol.messages import (
    MalformedRequest,
    decode_request,
    encode_response,
    is_flexible_request,
    parse_header,
    parse_header_prefix,
    response_class,
)

if TYPE_CHECKING:
    from moldau.broker.network.connection import Connection
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.handlers")

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class Deferred:
    """A response that waits (e.g. a long-polling fetch) without holding a handler worker."""

    wait: Awaitable[Response | None]


Result = Response | Deferred | None
Handler = Callable[["Broker", Request], Awaitable[Result]]
# Decodes a version the schemas lack (Produce v0-2); None means "use kio".
LegacyDecoder = Callable[[int, bytes, int], Any]
# Checks a decoded body as Kafka checks it while parsing; a message closes the connection.
BodyCheck = Callable[[Any], str | None]


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    legacy_decoder: LegacyDecoder | None = None
    legacy_max_version: int = -1
    check: BodyCheck | None = None


APIS: dict[int, Api] = {}


def api(key: int, name: str, min_version: int, max_version: int, *,
        legacy_decoder: LegacyDecoder | None = None, legacy_max_version: int = -1,
        check: BodyCheck | None = None) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        APIS[key] = Api(key, name, min_version, max_version, handler, legacy_decoder,
                        legacy_max_version, check)
        return handler
    return register


def respond(request: Request, data: Mapping[str, Any]) -> Response:
    """Encode `data` as the response to `request`, in the request's version."""
    header = request.header
    body = build(response_class(header.api_key, header.api_version), data)
    return Response.of(encode_response(header.correlation_id, body,
                                       header_v0=header.api_key == API_VERSIONS_KEY))


def decode_frame(frame: bytes, connection: Connection,
                 unsupported_api_versions: Callable[[int, int], Response]) -> Request | Response:
    """Parse a frame into a Request. Unknown APIs and versions close the connection, except
    ApiVersions, which answers any version (KIP-511)."""
    api_key, version, correlation_id = parse_header_prefix(frame)
    entry = APIS.get(api_key)
    if entry is None:
        raise MalformedRequest(f"unknown API key {api_key}")
    if not entry.min_version <= version <= entry.max_version:
        if api_key == API_VERSIONS_KEY:
            return unsupported_api_versions(correlation_id, version)
        if not 0 <= version <= entry.legacy_max_version:
            raise MalformedRequest(f"unsupported version {version} of {entry.name}")
    if entry.legacy_decoder is not None and version <= entry.legacy_max_version:
        header = parse_header(frame, flexible=False)
        body = entry.legacy_decoder(version, frame, header.size)
    else:
        header = parse_header(frame, is_flexible_request(api_key, version))
        body = decode_request(api_key, version, frame, header.size)
    if entry.check is not None:
        problem = entry.check(body)
        if problem is not None:
            raise MalformedRequest(f"invalid {entry.name} request: {problem}")
    return connection.new_request(header, body)


async def dispatch(broker: Broker, request: Request) -> Result:
    return await APIS[request.header.api_key].handle(broker, request)
