"""Target `frames`: one request frame (the bytes after its size prefix), decoded as a broker
connection decodes it, then, for Produce, its records put through the produce path's
validator.

Decoding is the broker's own `decode_frame` (handlers/registry.py) over the broker's API
table: the header, then the body with kio's reader for every API key and version the broker
advertises, or the hand-written reader of Produce v0-2.

Contract:
- `decode_frame` gives a request whose header repeats the frame's api key, version and
  correlation id, for an API and version the broker advertises (or Produce v0-2), or the
  ApiVersions fallback answer; anything else it must refuse with MalformedRequest, which
  closes the connection.
- A decoded Produce request's records, validated as the produce path validates them, raise
  nothing but KafkaError (answered to the client with its error code).
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import moldau.broker.handlers.apis  # noqa: F401  (every handler registers its API)
from fuzz.targets import ContractViolation
from fuzz.targets.batches import clock_for, validate_produced
from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.registry import API_VERSIONS_KEY, APIS, decode_frame
from moldau.broker.log.config import LogConfig
from moldau.broker.network.response import Response
from moldau.broker.security.principal import ANONYMOUS
from moldau.errors import KafkaError
from moldau.protocol.messages import MalformedRequest, RequestHeader, parse_header_prefix

PRODUCE_KEY = 0
LEGACY_PRODUCE_MAX_VERSION = 2
TOPIC_CONFIG = LogConfig()


class Decoded(NamedTuple):
    header: RequestHeader
    body: Any


class _Listener:
    """Where decode_frame hands a decoded request: the connection's part, without a socket."""

    listener = "PLAINTEXT"
    peer = "fuzz"
    principal = ANONYMOUS

    def new_request(self, header: RequestHeader, body: object) -> Decoded:
        return Decoded(header, body)


_CONNECTION = _Listener()


def check(data: bytes) -> None:
    try:
        decoded = decode_frame(data, _CONNECTION, unsupported_version_response)  # type: ignore[arg-type]
    except MalformedRequest:
        return
    api_key, version, correlation_id = parse_header_prefix(data)
    if isinstance(decoded, Response):
        if api_key != API_VERSIONS_KEY:
            raise ContractViolation(f"api {api_key} v{version} got an immediate response")
        return
    header = decoded.header
    if (header.api_key, header.api_version, header.correlation_id) != (
            api_key, version, correlation_id):
        raise ContractViolation(f"header {header} does not repeat the frame's prefix")
    entry = APIS[api_key]
    if not (entry.min_version <= version <= entry.max_version
            or 0 <= version <= entry.legacy_max_version):
        raise ContractViolation(f"{entry.name} v{version} decoded but is not advertised")
    if not header.size <= len(data):
        raise ContractViolation(f"header of {header.size} bytes in a {len(data)}-byte frame")
    if api_key == PRODUCE_KEY and version > LEGACY_PRODUCE_MAX_VERSION:
        _validate_produce(decoded.body, version)


def _validate_produce(body: Any, version: int) -> None:
    for topic in body.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if not records:
                continue  # the produce path answers CORRUPT_MESSAGE before validating
            buf = bytearray(records)
            with contextlib.suppress(KafkaError):
                validate_produced(buf, TOPIC_CONFIG, now_ms=clock_for(buf),
                                  produce_version=version)
