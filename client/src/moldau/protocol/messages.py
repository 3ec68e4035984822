"""Request/response headers and message bodies, decoded and encoded with kio's schemas.

kio's classes are generated from Kafka's own JSON message schemas; its reader is native.
Headers are parsed by hand because they are tiny and on every request's path.
"""

from __future__ import annotations

import io
import logging
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from moldau.protocol.bounds import check_array_lengths, read_uvarint
from moldau.protocol.build import null_field

log = logging.getLogger("moldau.protocol")

_HEADER_FIXED = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")


class MalformedRequest(ValueError):
    """The bytes of a request cannot be decoded; the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header occupies in the frame


@cache
def _schema(api_key: int, version: int, kind: EntityType) -> Any:
    module = load_payload_module(api_key, version, kind)
    suffix = "Request" if kind is EntityType.request else "Response"
    return next(value for name, value in vars(module).items()
                if name.endswith(suffix) and getattr(value, "__type__", None) is kind)


def request_class(api_key: int, version: int) -> Any:
    return _schema(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> Any:
    return _schema(api_key, version, EntityType.response)


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(request_class(api_key, version))


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def is_flexible_request(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


def _skip_tagged_fields(frame: bytes | memoryview, pos: int) -> int:
    try:
        count, pos = read_uvarint(frame, pos, max_shift=28)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos, max_shift=28)
            size, pos = read_uvarint(frame, pos, max_shift=28)
            pos += size
    except ValueError as exc:
        raise MalformedRequest(f"bad tagged fields in the header: {exc}") from None
    if pos > len(frame):
        raise MalformedRequest("tagged fields run past the end of the frame")
    return pos


def parse_header_prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: readable before knowing the API's versions."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is too short for a header")
    return _HEADER_FIXED.unpack_from(frame, 0)


def parse_header(frame: bytes | memoryview, flexible: bool) -> RequestHeader:
    """Request header v1 (classic) or v2 (flexible: adds tagged fields)."""
    api_key, api_version, correlation_id = parse_header_prefix(frame)
    pos = _HEADER_FIXED.size
    if pos + 2 > len(frame):
        raise MalformedRequest("frame ends inside the client id")
    (length,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    client_id = None
    if length >= 0:
        if pos + length > len(frame):
            raise MalformedRequest("client id runs past the end of the frame")
        client_id = bytes(frame[pos:pos + length]).decode("utf-8", "replace")
        pos += length
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Any:
    """Decode a request body with kio; any failure is a malformed request."""
    try:
        # Before kio reads: its reader reserves memory for an array's claimed length first.
        check_array_lengths(request_class(api_key, version), frame, offset)
    except ValueError as exc:
        raise MalformedRequest(f"cannot decode {api_key} v{version}: {exc}") from None
    try:
        body, size = _reader(api_key, version)(frame, offset)
    except Exception as exc:  # the native reader raises several types
        raise MalformedRequest(f"cannot decode {api_key} v{version}: {exc}") from None
    missing = null_field(body)
    if missing is not None:
        raise MalformedRequest(f"non-nullable field {missing} of api {api_key} v{version} "
                               "was serialized as null")
    if offset + size < len(frame):
        # Kafka's parser ignores bytes after the last field, and librdkafka relies on it
        # (its Metadata v12 request carries three extra bytes), so do the same.
        log.debug("%d bytes after api %d v%d ignored", len(frame) - offset - size, api_key,
                  version)
    return body


def encode_entity(entity: Any) -> bytes:
    """A message's bytes alone, without size or header (data schemas such as
    DefaultPrincipalData)."""
    buffer = io.BytesIO()
    _writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encode_response(correlation_id: int, body: Any, *, header_v0: bool = False) -> bytes:
    """Frame a response: size, header (v0, or v1 with tagged fields when flexible), body."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(_INT32.pack(correlation_id))
    if body.__flexible__ and not header_v0:
        buffer.write(b"\0")
    _writer(type(body))(buffer, body)
    data = buffer.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return buffer.getvalue()


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """Frame a request (used by tests and Moldau's own client)."""
    flexible = body.__flexible__
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(_HEADER_FIXED.pack(api_key, version, correlation_id))
    if client_id is None:
        buffer.write(b"\xff\xff")
    else:
        raw = client_id.encode()
        buffer.write(struct.pack(">h", len(raw)) + raw)
    if flexible:
        buffer.write(b"\0")
    _writer(type(body))(buffer, body)
    data = buffer.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return buffer.getvalue()
