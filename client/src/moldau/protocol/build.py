"""Build kio message objects from plain, version-independent data.

Each API version is its own set of kio classes with its own fields. Handlers describe a
response once, as nested dicts and lists with plain ints (milliseconds, error codes); `build`
fits that to the exact class of the requested version: fields the version lacks are
dropped, fields it has that the data omits get their schema default or a zero value.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

_UTC = datetime.UTC
_ZERO_UUID = uuid.UUID(int=0)


class _Field(NamedTuple):
    name: str
    kafka_type: str | None
    nested: type | None
    sequence: bool
    optional: bool
    required: bool


def _nested_entity(hint: Any) -> tuple[type | None, bool, bool]:
    """(entity class, is a sequence, is optional) for a field's type hint."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    optional = type(None) in args
    if origin is tuple and args and dataclasses.is_dataclass(args[0]):
        return args[0], True, optional
    for arg in args:
        if typing.get_origin(arg) is tuple and typing.get_args(arg) and \
                dataclasses.is_dataclass(typing.get_args(arg)[0]):
            return typing.get_args(arg)[0], True, optional
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg, False, optional
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, False, optional
    return None, origin is tuple, optional


@cache
def _plan(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        nested, sequence, optional = _nested_entity(hints[field.name])
        required = (field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING)
        plan.append(_Field(field.name, field.metadata.get("kafka_type"), nested, sequence,
                           optional, required))
    return tuple(plan)


def field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in _plan(cls))


def _zero(field: _Field) -> Any:
    if field.sequence:
        return ()
    if field.optional:
        return None
    match field.kafka_type:
        case "error_code":
            return ErrorCode.none
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "string":
            return ""
        case "bool":
            return False
        case "uuid":
            return _ZERO_UUID
        case "bytes" | "records":
            return b""
    if field.nested is not None:
        return build(field.nested, {})
    return 0


def _convert(field: _Field, value: Any) -> Any:
    if value is None and not field.optional:
        # Nullable in newer versions only: older ones carry the empty value instead.
        return _zero(field)
    if field.nested is not None:
        if value is None:
            return None
        if field.sequence:
            return tuple(build(field.nested, item) for item in value)
        return build(field.nested, value)
    match field.kafka_type:
        case "error_code":
            return value if isinstance(value, ErrorCode) else ErrorCode(value)
        case "timedelta_i32" | "timedelta_i64":
            if isinstance(value, datetime.timedelta):  # already converted (a decoded body)
                return value
            return datetime.timedelta(milliseconds=value)
        case "datetime_i64":
            if isinstance(value, datetime.datetime):
                return value
            # -1 is "none": null where the field is nullable, else written as -1 itself.
            if value is None or (value < 0 and field.optional):
                return None
            return datetime.datetime.fromtimestamp(value / 1000, _UTC)
    if field.sequence and value is not None:
        return tuple(value)
    return value


def build(cls: type, data: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for field in _plan(cls):
        if field.name in data:
            kwargs[field.name] = _convert(field, data[field.name])
        elif field.required:
            kwargs[field.name] = _zero(field)
    return cls(**kwargs)


def null_field(entity: Any) -> str | None:
    """The path of a non-nullable field that holds None (Kafka's parser rejects those), else
    None. Walks nested entities; record bytes are leaves, so this stays cheap."""
    for field in _plan(type(entity)):
        value = getattr(entity, field.name)
        if value is None:
            if not field.optional:
                return field.name
            continue
        if field.nested is not None:
            for item in (value if field.sequence else (value,)):
                inner = null_field(item)
                if inner is not None:
                    return f"{field.name}.{inner}"
    return None


def millis(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)
