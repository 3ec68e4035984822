"""ApiVersions: the versions this broker implements, answered in any version (KIP-511)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from moldau.broker.handlers.registry import API_VERSIONS_KEY, APIS, Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.response import Response
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import encode_response, response_class

if TYPE_CHECKING:
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.handlers")

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def api_keys() -> list[dict[str, int]]:
    return [{"api_key": entry.key,
             "min_version": 0 if entry.legacy_max_version >= 0 else entry.min_version,
             "max_version": entry.max_version}
            for entry in sorted(APIS.values(), key=lambda entry: entry.key)]


def unsupported_version_response(correlation_id: int, version: int) -> Response:
    """A v0 response with UNSUPPORTED_VERSION and our versions, so the client can retry."""
    log.info("ApiVersions v%d is not supported; answering with v0", version)
    body = build(response_class(API_VERSIONS_KEY, 0),
                 {"error_code": ErrorCode.unsupported_version, "api_keys": api_keys()})
    return Response.of(encode_response(correlation_id, body, header_v0=True))


@api(API_VERSIONS_KEY, "ApiVersions", 0, 4)
async def handle_api_versions(broker: Broker, request: Request) -> Result:
    body = request.body
    if request.header.api_version >= 3:
        name, version = body.client_software_name, body.client_software_version
        if not (_SOFTWARE.match(name) and _SOFTWARE.match(version)):
            return respond(request, {"error_code": ErrorCode.invalid_request,
                                     "api_keys": api_keys()})
        request.connection.client_software = (name, version)
    return respond(request, {"error_code": ErrorCode.none, "api_keys": api_keys()})
