"""Record batch v2 header layout, parsing and in-place patching.

A batch on the wire and on disk is:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

`batchLength` counts the bytes after itself. The CRC32C covers attributes to the end, so the
broker may rewrite baseOffset and partitionLeaderEpoch without touching the CRC.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what precedes batchLength's span
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
# Bytes from baseOffset to magic inclusive: enough to learn a batch's span and version.
MIN_PREFIX = 17

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40


class Compression:
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    NAMES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, including baseOffset and batchLength."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the 61-byte header at `pos`. The caller checks that enough bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C of the batch at `pos` spanning `size` bytes (attributes to the end)."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size]
    return crc32c.crc32c(view)


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    struct.pack_into(">q", buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    struct.pack_into(">i", buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, size: int,
                        timestamp: int) -> None:
    """Mark the batch LogAppendTime with `timestamp` as its max timestamp; re-seals the CRC."""
    (attributes,) = struct.unpack_from(">h", buf, pos + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
