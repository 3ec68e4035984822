"""Fetch responses (v4-17) written by hand, so record bytes can stay in the segment files.

Every other response goes through kio; this one interleaves encoded fields with file regions
that are sent with sendfile, which a generic encoder cannot do.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from moldau.broker.network.response import Chunk, FileRegion, Response

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_FIXED = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")


@dataclass
class PartitionData:
    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Sequence[FileRegion] = ()
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    # v12+, to a follower whose last fetched epoch is not on this log: (epoch, end offset).
    diverging_epoch: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return sum(part.size for part in self.records)


@dataclass
class TopicData:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionData] = field(default_factory=list)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.parts: list[Chunk] = []
        self.buf = bytearray()

    def array_length(self, count: int) -> None:
        self.buf += _uvarint(count + 1) if self.flexible else _I32.pack(count)

    def string(self, text: str) -> None:
        raw = text.encode()
        self.buf += (_uvarint(len(raw) + 1) if self.flexible else _I16.pack(len(raw))) + raw

    def tags(self) -> None:
        if self.flexible:
            self.buf.append(0)

    def file(self, region: FileRegion) -> None:
        self.parts.append(bytes(self.buf))
        self.buf.clear()
        self.parts.append(region)

    def finish(self) -> Response:
        self.parts.append(bytes(self.buf))
        return Response.framed(self.parts)


def encode_fetch_response(version: int, correlation_id: int, topics: Sequence[TopicData], *,
                          error_code: int = 0, session_id: int = 0) -> Response:
    flexible = version >= 12
    out = _Writer(flexible)
    out.buf += _I32.pack(correlation_id)
    out.tags()  # response header v1
    out.buf += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        out.buf += _I16.pack(error_code) + _I32.pack(session_id)
    out.array_length(len(topics))
    for topic in topics:
        if version >= 13:
            out.buf += topic.topic_id.bytes
        else:
            out.string(topic.name)
        out.array_length(len(topic.partitions))
        for partition in topic.partitions:
            out.buf += _PARTITION_FIXED.pack(
                partition.index, partition.error_code, partition.high_watermark,
                partition.last_stable_offset)
            if version >= 5:
                out.buf += _I64.pack(partition.log_start_offset)
            if partition.aborted is None:
                out.buf += b"\0" if flexible else _I32.pack(-1)
            else:
                out.array_length(len(partition.aborted))
                for producer_id, first_offset in partition.aborted:
                    out.buf += struct.pack(">qq", producer_id, first_offset)
                    out.tags()
            if version >= 11:
                out.buf += _I32.pack(-1)  # preferred_read_replica
            size = partition.size
            out.buf += _uvarint(size + 1) if flexible else _I32.pack(size)
            for region in partition.records:
                out.file(region)
            if flexible and partition.diverging_epoch is not None:
                # One tagged field: tag 0, its size, then EpochEndOffset with no tags.
                epoch, end_offset = partition.diverging_epoch
                out.buf += b"\x01\x00\x0d" + _I32.pack(epoch) + _I64.pack(end_offset) + b"\0"
            else:
                out.tags()
        out.tags()
    out.tags()
    return out.finish()
