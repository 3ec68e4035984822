"""Array lengths checked against the bytes that remain, before kio reads a request.

kio's native reader reserves room for an array's claimed element count before it reads a
single element, and a failed reservation aborts the whole process: a 162-byte Fetch claiming
2**35 topics killed the broker (a fuzz finding). Kafka's generated parsers refuse an array
whose length exceeds the bytes remaining ("Tried to allocate a collection of size N, but
there are only M bytes remaining"); `check_array_lengths` applies that rule by walking the
request's wire layout, taken from the same kio classes, without building any objects.

Every element of every Kafka type takes at least one byte, so a claim within the remaining
bytes bounds the reservation by the frame's size, which socket.request.max.bytes bounds.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Wire sizes of the fixed-size kio field types.
_FIXED = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
          "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8,
          "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}

# A step reads one field at `pos` of `data` and returns the position after it.
Step = Callable[[bytes | memoryview, int], int]


class ArrayTooLong(ValueError):
    """An array claims more elements than there are bytes left to hold them."""


class Truncated(ValueError):
    """The request ends inside a field."""


def check_array_lengths(cls: type, data: bytes | memoryview, offset: int) -> None:
    """Walk the body of request class `cls` at `offset`; raise ArrayTooLong for an array
    longer than the bytes that remain, Truncated when a length runs past the end."""
    _entity_step(cls)(data, offset)


def read_uvarint(data: bytes | memoryview, pos: int, max_shift: int = 63) -> tuple[int, int]:
    """An unsigned varint at `pos` and the position after it (max_shift 28: 32 bits)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > max_shift:
            raise Truncated("bad unsigned varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _unpack(fmt: struct.Struct, data: bytes | memoryview, pos: int) -> int:
    if pos + fmt.size > len(data):
        raise Truncated("the request ends inside a length")
    return fmt.unpack_from(data, pos)[0]


def _sized(length: int, pos: int, data: bytes | memoryview) -> int:
    """Skip a string or bytes field of `length` bytes (negative: null)."""
    end = pos + max(length, 0)
    if end > len(data):
        raise Truncated(f"a field of {length} bytes runs past the end")
    return end


def _fixed(size: int) -> Step:
    def step(data: bytes | memoryview, pos: int) -> int:
        return _sized(size, pos, data)
    return step


def _compact_sized(data: bytes | memoryview, pos: int) -> int:
    n, pos = read_uvarint(data, pos)
    return _sized(n - 1, pos, data)


def _legacy_string(data: bytes | memoryview, pos: int) -> int:
    return _sized(_unpack(_INT16, data, pos), pos + 2, data)


def _legacy_bytes(data: bytes | memoryview, pos: int) -> int:
    return _sized(_unpack(_INT32, data, pos), pos + 4, data)


def _array(element: Step, flexible: bool, element_size: int | None) -> Step:
    def step(data: bytes | memoryview, pos: int) -> int:
        if flexible:
            n, pos = read_uvarint(data, pos)
            n -= 1  # 0 is null
        else:
            n = _unpack(_INT32, data, pos)
            pos += 4
        if n <= 0:
            return pos
        remaining = len(data) - pos
        if n > remaining:
            raise ArrayTooLong(f"an array of {n} elements, but only {remaining} bytes remain")
        if element_size is not None:
            return _sized(n * element_size, pos, data)
        for _ in range(n):
            pos = element(data, pos)
        return pos
    return step


def _nullable_entity(inner: Step) -> Step:
    def step(data: bytes | memoryview, pos: int) -> int:
        if pos >= len(data):
            raise Truncated("the request ends inside a struct")
        return pos + 1 if data[pos] == 0xFF else inner(data, pos + 1)
    return step


def _field_step(kafka_type: str | None, hint: Any, flexible: bool) -> tuple[Step, int | None]:
    """The step for one field and, when it has one, its fixed wire size."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    optional = type(None) in typing.get_args(hint)
    if typing.get_origin(hint) is tuple or (len(args) == 1
                                            and typing.get_origin(args[0]) is tuple):
        sequence = hint if typing.get_origin(hint) is tuple else args[0]
        item = typing.get_args(sequence)[0]
        element, size = _field_step(kafka_type, item, flexible)
        return _array(element, flexible, size), None
    entity = args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else hint
    if dataclasses.is_dataclass(entity):
        inner, size = _entity_layout(entity)
        return (_nullable_entity(inner), None) if optional else (inner, size)
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type]), _FIXED[kafka_type]
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return _compact_sized, None
        return (_legacy_string if kafka_type == "string" else _legacy_bytes), None
    raise TypeError(f"no wire layout for a {kafka_type} field")


@cache
def _entity_step(cls: type) -> Step:
    return _entity_layout(cls)[0]


@cache
def _entity_layout(cls: type) -> tuple[Step, int | None]:
    """The step for an entity and, when every field is fixed-size (and the version has no
    tagged fields), its wire size."""
    flexible = bool(cls.__flexible__)
    hints = typing.get_type_hints(cls)
    # Runs of fixed-size fields are summed into one skip: most elements are mostly numbers.
    steps: list[Step | int] = []
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        step, size = _field_step(field.metadata.get("kafka_type"), hints[field.name], flexible)
        if "tag" in field.metadata:
            tagged[field.metadata["tag"]] = step
        elif size is not None and steps and isinstance(steps[-1], int):
            steps[-1] += size
        else:
            steps.append(size if size is not None else step)
    if not flexible and all(isinstance(step, int) for step in steps):
        size = sum(steps)  # type: ignore[arg-type]
        return _fixed(size), size
    plan = tuple(steps)

    def walk(data: bytes | memoryview, pos: int) -> int:
        for step in plan:
            if step.__class__ is int:
                pos += step  # type: ignore[operator]
            else:
                pos = step(data, pos)  # type: ignore[operator]
        if pos > len(data):
            raise Truncated("the request ends inside a struct")
        if flexible:
            if pos < len(data) and data[pos] == 0:  # no tagged fields: the usual case
                return pos + 1
            count, pos = read_uvarint(data, pos)
            for _ in range(count):
                tag, pos = read_uvarint(data, pos)
                size, pos = read_uvarint(data, pos)
                end = _sized(size, pos, data)
                known = tagged.get(tag)
                if known is not None:
                    known(data, pos)
                pos = end
        return pos
    return walk, None
