"""The consumer group protocol's embedded payloads (subscription and assignment), which the
broker treats as opaque bytes in JoinGroup, SyncGroup and DescribeGroups.

    Subscription: version int16 | topics [string] | user_data bytes
                  (v1+: owned_partitions [topic string, partitions [int32]])
                  (v2+: generation_id int32) (v3+: rack_id nullable string)
    Assignment:   version int16 | partitions [topic string, partitions [int32]]
                  | user_data bytes
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from moldau.client.types import TopicPartition

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def i16(self) -> int:
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return value

    def i32(self) -> int:
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        raw = self.data[self.pos:self.pos + length]
        self.pos += length
        return raw.decode()

    def bytes_(self) -> bytes | None:
        length = self.i32()
        if length < 0:
            return None
        raw = self.data[self.pos:self.pos + length]
        self.pos += length
        return bytes(raw)

    def more(self) -> bool:
        return self.pos < len(self.data)


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    return _I32.pack(len(value)) + value


def _partitions(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_I32.pack(len(by_topic))]
    for topic, indexes in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(indexes)))
        out.extend(_I32.pack(index) for index in indexes)
    return b"".join(out)


def _read_partitions(reader: _Reader) -> list[TopicPartition]:
    out = []
    for _ in range(reader.i32()):
        topic = reader.string() or ""
        for _ in range(reader.i32()):
            out.append(TopicPartition(topic, reader.i32()))
    return out


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3

    def encode(self) -> bytes:
        out = [_I16.pack(self.version), _I32.pack(len(self.topics))]
        out.extend(_string(topic) for topic in self.topics)
        out.append(_bytes(self.user_data))
        if self.version >= 1:
            out.append(_partitions(self.owned_partitions))
        if self.version >= 2:
            out.append(_I32.pack(self.generation_id))
        if self.version >= 3:
            out.append(_string(self.rack_id))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        reader = _Reader(data)
        version = reader.i16()
        topics = [reader.string() or "" for _ in range(reader.i32())]
        user_data = reader.bytes_()
        sub = cls(topics, user_data, version=version)
        if version >= 1 and reader.more():
            sub.owned_partitions = _read_partitions(reader)
        if version >= 2 and reader.more():
            sub.generation_id = reader.i32()
        if version >= 3 and reader.more():
            sub.rack_id = reader.string()
        return sub


@dataclass
class Assignment:
    partitions: list[TopicPartition]
    user_data: bytes | None = None
    version: int = 3

    def encode(self) -> bytes:
        return b"".join((_I16.pack(self.version), _partitions(self.partitions),
                         _bytes(self.user_data)))

    @classmethod
    def decode(cls, data: bytes | None) -> Assignment:
        if not data:
            return cls([])
        reader = _Reader(data)
        version = reader.i16()
        partitions = _read_partitions(reader)
        user_data = reader.bytes_() if reader.more() else None
        return cls(partitions, user_data, version)
