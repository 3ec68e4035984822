"""Serializers (producer) and deserializers (consumer) for keys and values.

Given by name ("bytes", "str", "json") or as any callable taking the value. `None` always
stays `None` (a null key, or a tombstone value).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from moldau.client.errors import SerializationError

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]


def serialize_bytes(value: Any) -> bytes | None:
    """bytes pass through; bytearray/memoryview are copied; str is UTF-8 encoded."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise SerializationError(f"Cannot serialize a {type(value).__name__} as bytes; pass "
                             f"bytes or str, or configure a serializer")


def serialize_str(value: Any) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SerializationError(f"The str serializer needs a str, got "
                                 f"{type(value).__name__}")
    return value.encode()


def serialize_json(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"Cannot serialize as JSON: {exc}") from None


def deserialize_bytes(data: bytes | None) -> bytes | None:
    return data


def deserialize_str(data: bytes | None) -> str | None:
    try:
        return None if data is None else data.decode()
    except UnicodeDecodeError as exc:
        raise SerializationError(f"Cannot deserialize as UTF-8: {exc}") from None


def deserialize_json(data: bytes | None) -> Any:
    try:
        return None if data is None else json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise SerializationError(f"Cannot deserialize as JSON: {exc}") from None


SERIALIZERS: dict[str, Serializer] = {
    "bytes": serialize_bytes, "str": serialize_str, "string": serialize_str,
    "json": serialize_json,
}
DESERIALIZERS: dict[str, Deserializer] = {
    "bytes": deserialize_bytes, "str": deserialize_str, "string": deserialize_str,
    "json": deserialize_json,
}


def _guarded(function: Callable[[Any], Any], what: str) -> Callable[[Any], Any]:
    def call(value: Any) -> Any:
        if value is None:
            return None
        try:
            return function(value)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"{what} failed: {exc}") from exc
    return call


def resolve_serializer(spec: str | Serializer | None, what: str = "serializer") -> Serializer:
    if spec is None:
        return serialize_bytes
    if isinstance(spec, str):
        try:
            return SERIALIZERS[spec.lower()]
        except KeyError:
            raise ValueError(f"Unknown {what} {spec!r}; use one of "
                             f"{', '.join(SERIALIZERS)} or a callable") from None
    if not callable(spec):
        raise TypeError(f"{what} must be a name or a callable")

    inner = _guarded(spec, what)

    def serialize(value: Any) -> bytes | None:
        data = inner(value)
        if data is None or type(data) is bytes:
            return data
        if isinstance(data, bytearray | memoryview):
            return bytes(data)
        raise SerializationError(f"{what} returned {type(data).__name__}, not bytes")
    return serialize


def resolve_deserializer(spec: str | Deserializer | None,
                         what: str = "deserializer") -> Deserializer:
    if spec is None:
        return deserialize_bytes
    if isinstance(spec, str):
        try:
            return DESERIALIZERS[spec.lower()]
        except KeyError:
            raise ValueError(f"Unknown {what} {spec!r}; use one of "
                             f"{', '.join(DESERIALIZERS)} or a callable") from None
    if not callable(spec):
        raise TypeError(f"{what} must be a name or a callable")
    return _guarded(spec, what)
