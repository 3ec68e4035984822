"""The big-endian struct layout of coordinator records (Kafka's non-flexible schema
encoding: int16-length strings, int32-length bytes), shared by `__consumer_offsets` and
`__transaction_state`."""

from __future__ import annotations

import struct


class Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i8(self, value: int) -> Writer:
        self.out += struct.pack(">b", value)
        return self

    def i16(self, value: int) -> Writer:
        self.out += struct.pack(">h", value)
        return self

    def i32(self, value: int) -> Writer:
        self.out += struct.pack(">i", value)
        return self

    def i64(self, value: int) -> Writer:
        self.out += struct.pack(">q", value)
        return self

    def string(self, value: str | None) -> Writer:
        if value is None:
            return self.i16(-1)
        raw = value.encode()
        self.i16(len(raw))
        self.out += raw
        return self

    def bytes_(self, value: bytes) -> Writer:
        self.i32(len(value))
        self.out += value
        return self


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def i8(self) -> int:
        return self._take(">b")

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def i64(self) -> int:
        return self._take(">q")

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        value = self.data[self.pos:self.pos + length].decode()
        self.pos += length
        return value

    def bytes_(self) -> bytes:
        length = self.i32()
        value = self.data[self.pos:self.pos + max(length, 0)]
        self.pos += max(length, 0)
        return bytes(value)
