"""Record batch v2 encoding and decoding: varints, records, whole batches.

A record inside a batch is:

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint |
    headerValue)*

Every varint is zigzag-encoded (protobuf style) and a length of -1 means null. `length`
counts the bytes after itself. In a compressed batch the records section (everything after
the 61-byte header) is compressed as a whole.

The hot loops below inline the one- and two-byte varint cases, which cover nearly every
field in practice, and fall back to the general readers for the rest.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_PREFIX,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    compute_crc,
    parse_header,
)
from moldau.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, compress, decompress

__all__ = [
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "Record",
    "RecordScan",
    "build_batch",
    "count_records",
    "decode_records",
    "encode_record",
    "encode_records",
    "encode_varint",
    "iter_batches",
    "read_uvarint",
    "read_varint",
    "records_section",
    "scan_records",
    "size_of_varint",
    "unzigzag",
    "write_uvarint",
    "write_varint",
    "zigzag",
]

Buffer = bytes | bytearray | memoryview
RecordHeader = tuple[str, bytes | None]
# What build_batch takes per record: (key, value, headers, timestamp_ms); a None timestamp
# means "now", as producers do.
RecordInput = tuple[bytes | None, bytes | None, Sequence[RecordHeader] | None, int | None]

MAGIC = 2
# batchLength of a batch with no records: the header minus baseOffset and batchLength.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
# attributes + timestampDelta + offsetDelta + keyLength + valueLength + headerCount, one byte each
MIN_RECORD_BODY = 6

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class Record(NamedTuple):
    """One record of a batch, with offset and timestamp relative to the batch header."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class RecordScan(NamedTuple):
    """What scan_records learns from a records section without building records."""

    count: int
    min_timestamp_delta: int
    max_timestamp_delta: int
    # Indices of records with a null key; only collected when asked for.
    keyless: list[int]


# --- varints --------------------------------------------------------------------------------


def zigzag(n: int) -> int:
    """Map a signed 64-bit value onto an unsigned one, small magnitudes to small values."""
    return (n << 1) ^ (n >> 63)


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def _uvarint_bytes(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Encodings of the zigzag values below 2**14 (signed -8192..8191), i.e. every one- and two-byte
# varint: offset deltas below 8192, the usual timestamp deltas and the lengths of records up to
# 8 KiB come straight from this table.
_UVARINT = [bytes((z,)) for z in range(0x80)] + [
    bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(0x80, 1 << 14)]
_UVARINT_LIMIT = len(_UVARINT)


def encode_varint(n: int) -> bytes:
    """The zigzag varint encoding of a signed value."""
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < _UVARINT_LIMIT:
        return _UVARINT[z]
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit in a varlong")
    return _uvarint_bytes(z)


def write_varint(out: bytearray, n: int) -> None:
    out += encode_varint(n)


def write_uvarint(out: bytearray, z: int) -> None:
    if z < 0:
        raise ValueError("unsigned varint cannot be negative")
    out += _UVARINT[z] if z < _UVARINT_LIMIT else _uvarint_bytes(z)


def size_of_varint(n: int) -> int:
    z = zigzag(n)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def read_uvarint(buf: Buffer, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Read an unsigned varint at `pos`; returns (value, position after it).

    Raises ValueError if it runs longer than `max_bytes` (5 for an int32 field, 10 for an
    int64 one) and IndexError if the buffer ends first.
    """
    result = 0
    shift = 0
    limit = pos + max_bytes
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        if pos >= limit:
            raise ValueError("varint is too long")
        shift += 7


def read_varint(buf: Buffer, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Read a zigzag varint at `pos`; returns (value, position after it)."""
    z, pos = read_uvarint(buf, pos, max_bytes)
    return (z >> 1) ^ -(z & 1), pos


# --- records --------------------------------------------------------------------------------


def _append_bytes(body: bytearray, data: Buffer | None) -> None:
    if data is None:
        body.append(1)  # zigzag(-1)
    else:
        n = len(data)
        body += _UVARINT[n << 1] if n < 8192 else _uvarint_bytes(n << 1)
        body += data


def _append_headers(body: bytearray, headers: Sequence[RecordHeader]) -> None:
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        raw = hkey.encode() if isinstance(hkey, str) else hkey
        if raw is None:
            raise ValueError("record header keys cannot be null")
        _append_bytes(body, raw)
        _append_bytes(body, hvalue)


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: Buffer | None,
                  value: Buffer | None, headers: Sequence[RecordHeader] | None = None) -> None:
    """Append one record, length prefix included, to `out`."""
    body = bytearray(b"\x00")  # attributes: unused in v2, always 0
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    _append_bytes(body, key)
    _append_bytes(body, value)
    if headers:
        _append_headers(body, headers)
    else:
        body.append(0)
    n = len(body)
    out += _UVARINT[n << 1] if n < 8192 else _uvarint_bytes(n << 1)
    out += body


def encode_records(records: Iterable[Record], out: bytearray | None = None) -> bytearray:
    """The uncompressed records section for `records` (appended to `out` when given)."""
    if out is None:
        out = bytearray()
    for rec in records:
        encode_record(out, rec.offset_delta, rec.timestamp_delta, rec.key, rec.value,
                      rec.headers)
    return out


def build_batch(records: Iterable[RecordInput], *, base_offset: int = 0, compression: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                is_transactional: bool = False, timestamp_type_log_append: bool = False,
                base_timestamp: int | None = None, partition_leader_epoch: int = -1,
                is_control: bool = False, compression_level: int | None = None) -> bytes:
    """Build one complete v2 batch from (key, value, headers, timestamp_ms) tuples.

    Offset deltas run 0..n-1. The base timestamp is the first record's unless given, the max
    timestamp is the largest record timestamp. A None timestamp means the current time.
    The records section is compressed with the codec id `compression` when non-zero.
    """
    items = records if isinstance(records, Sequence) else list(records)
    if not items:
        raise ValueError("a record batch needs at least one record")
    now: int | None = None
    first_ts = items[0][3]
    if first_ts is None:
        now = first_ts = int(time.time() * 1000)
    base_ts = first_ts if base_timestamp is None else base_timestamp
    max_ts = first_ts

    out = bytearray(HEADER_SIZE)
    uv = _UVARINT
    limit = _UVARINT_LIMIT
    for i, (key, value, headers, ts) in enumerate(items):
        if ts is None:
            if now is None:
                now = int(time.time() * 1000)
            ts = now
        if ts > max_ts:
            max_ts = ts
        delta = ts - base_ts
        z = (delta << 1) ^ (delta >> 63)
        body = bytearray(b"\x00")
        body += uv[z] if 0 <= z < limit else encode_varint(delta)
        body += uv[i << 1] if i < 8192 else _uvarint_bytes(i << 1)
        if key is None:
            body.append(1)
        else:
            n = len(key)
            body += uv[n << 1] if n < 8192 else _uvarint_bytes(n << 1)
            body += key
        if value is None:
            body.append(1)
        else:
            n = len(value)
            body += uv[n << 1] if n < 8192 else _uvarint_bytes(n << 1)
            body += value
        if headers:
            _append_headers(body, headers)
        else:
            body.append(0)
        n = len(body)
        out += uv[n << 1] if n < 8192 else _uvarint_bytes(n << 1)
        out += body

    if compression:
        compressed = compress(compression, memoryview(out)[HEADER_SIZE:],
                              level=compression_level)
        del out[HEADER_SIZE:]
        out += compressed

    attributes = compression & COMPRESSION_MASK
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch,
                     MAGIC, 0, attributes, len(items) - 1, base_ts, max_ts, producer_id,
                     producer_epoch, base_sequence, len(items))
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


# --- decoding -------------------------------------------------------------------------------


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def iter_batches(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in concatenated batches.

    Stops quietly at a trailing partial batch, as a fetch response or an unflushed log tail
    may end with one. Raises KafkaError for a batch that cannot be a v2 batch:
    UNSUPPORTED_FOR_MESSAGE_FORMAT for magic 0/1, CORRUPT_MESSAGE otherwise.
    """
    n = len(buf)
    pos = 0
    unpack_length = struct.Struct(">i").unpack_from
    while n - pos >= LOG_OVERHEAD:
        (batch_length,) = unpack_length(buf, pos + 8)
        if n - pos < MIN_PREFIX:
            return
        magic = buf[pos + MAGIC_OFFSET]
        if magic != MAGIC:
            if magic in (0, 1):
                raise KafkaError(ErrorCode.unsupported_for_message_format,
                                 f"Record batch at {pos} has magic {magic}; only v2 is read")
            raise _corrupt(f"Invalid magic {magic} in record batch at {pos}")
        if batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(f"Record batch at {pos} has length {batch_length}, below the "
                           f"minimum of {MIN_BATCH_LENGTH}")
        size = batch_length + LOG_OVERHEAD
        if pos + size > n:
            return
        yield pos, parse_header(buf, pos)
        pos += size


def records_section(batch: Buffer, header: BatchHeader, pos: int = 0, *,
                    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """A copy of the batch's records section at `pos`, decompressed if need be.

    With scan_records(section, 0, len(section), header.record_count) this walks a stored
    batch's records without building them.
    """
    start = pos + HEADER_SIZE
    end = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        return decompress(codec, memoryview(batch)[start:end], max_size=max_decompressed_bytes)
    return bytes(memoryview(batch)[start:end])


def decode_records(batch: Buffer, *, verify_crc: bool = False,
                   max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
                   ) -> list[Record]:
    """Decode every record of one whole batch (bytes past the batch's end are ignored).

    Offsets and timestamps stay relative to the header; in a LogAppendTime batch every
    record's timestamp is the header's max timestamp, whatever its delta says.

    Raises KafkaError: CORRUPT_MESSAGE for a malformed batch (or a bad CRC when
    `verify_crc`), INVALID_RECORD for malformed records, the codec errors of `decompress`.
    """
    n = len(batch)
    if n < HEADER_SIZE:
        raise _corrupt(f"Record batch of {n} bytes is shorter than its header")
    header = parse_header(batch)
    if header.magic != MAGIC:
        raise _corrupt(f"Record batch has magic {header.magic}; only v2 is supported")
    size = header.batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE or size > n:
        raise _corrupt(f"Record batch length {header.batch_length} does not fit the "
                       f"{n} bytes given")
    if verify_crc and compute_crc(batch, 0, size) != header.crc:
        raise _corrupt("Record batch CRC does not match its contents")
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        data = decompress(codec, memoryview(batch)[HEADER_SIZE:size],
                          max_size=max_decompressed_bytes)
        pos, end = 0, len(data)
    elif isinstance(batch, bytes):
        data, pos, end = batch, HEADER_SIZE, size
    else:
        # One copy of the section so that keys and values slice out as bytes.
        data = bytes(memoryview(batch)[HEADER_SIZE:size])
        pos, end = 0, len(data)
    try:
        return _decode(data, pos, end, header.record_count)
    except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise _invalid(f"Found invalid record structure: {exc}") from None


def _decode(data: bytes, pos: int, end: int, count: int) -> list[Record]:
    out: list[Record] = []
    append = out.append
    new = tuple.__new__  # skips the NamedTuple's Python-level __new__
    for _ in range(count):
        if pos >= end:
            raise _invalid(f"Batch declares {count} records but holds {len(out)}")
        b = data[pos]
        if b < 0x80:
            z = b
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            z, pos = read_uvarint(data, pos, 5)
        length = (z >> 1) ^ -(z & 1)
        rec_end = pos + length
        if length < MIN_RECORD_BODY or rec_end > end:
            raise _invalid(f"Invalid record size {length}")
        b = data[pos + 1]  # after the attributes byte
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            p = pos + 2
        else:
            ts_delta, p = read_varint(data, pos + 1, 10)
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            z, p = read_uvarint(data, p, 5)
        offset_delta = (z >> 1) ^ -(z & 1)
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            z, p = read_uvarint(data, p, 5)
        if not z & 1:
            n = z >> 1
            key: bytes | None = data[p:p + n]
            p += n
        elif z == 1:
            key = None
        else:
            raise _invalid(f"Invalid key length {(z >> 1) ^ -1}")
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            z, p = read_uvarint(data, p, 5)
        if not z & 1:
            n = z >> 1
            value: bytes | None = data[p:p + n]
            p += n
        elif z == 1:
            value = None
        else:
            raise _invalid(f"Invalid value length {(z >> 1) ^ -1}")
        headers: list[tuple[str, bytes | None]] = []
        if data[p] == 0:
            p += 1
        else:
            p = decode_headers(data, p, rec_end, headers)
        if p != rec_end:
            raise _invalid(f"Invalid record size: expected {length} bytes, read {p - pos}")
        append(new(Record, (offset_delta, ts_delta, key, value, headers)))
        pos = rec_end
    if pos != end:
        raise _invalid(f"{end - pos} bytes remain after the batch's {count} records")
    return out


def decode_headers(data: bytes, p: int, rec_end: int,
                   headers: list[tuple[str, bytes | None]]) -> int:
    """Append the headers of the record ending at `rec_end`, read from `p`, to `headers`;
    returns the position after them. Shared by the record decoders' hot loops."""
    header_count, p = read_varint(data, p, 5)
    # Each header takes at least two bytes, which bounds the loop by the record's size.
    if header_count < 0 or header_count > rec_end - p:
        raise _invalid(f"Invalid number of record headers {header_count}")
    for _ in range(header_count):
        n, p = read_varint(data, p, 5)
        if n < 0:
            raise _invalid(f"Invalid header key length {n}")
        # Bytes that are not UTF-8 become U+FFFD, as Java's String decoding makes them: Kafka
        # (and so Moldau) stores header keys unchecked, and its consumers read them this way.
        hkey = data[p:p + n].decode("utf-8", "replace")
        p += n
        n, p = read_varint(data, p, 5)
        if n >= 0:
            headers.append((hkey, data[p:p + n]))
            p += n
        elif n == -1:
            headers.append((hkey, None))
        else:
            raise _invalid(f"Invalid header value length {n}")
    return p


def count_records(data: Buffer, pos: int, end: int) -> int:
    """How many length-prefixed records exactly fill data[pos:end], reading only lengths.

    The cheapest walk: it proves the record boundaries tile the section and yields the count.
    Raises KafkaError(INVALID_RECORD) if they do not tile it.
    """
    try:
        return _count(data, pos, end)
    except (IndexError, ValueError) as exc:
        raise _invalid(f"Found invalid record structure: {exc}") from None


def scan_records(data: Buffer, pos: int, end: int, count: int, *, need_keys: bool = False,
                 check_offsets: bool = True, deep: bool = False) -> RecordScan:
    """Walk the records in data[pos:end] without building them.

    Checks that exactly `count` records fill the section, that every record's length covers
    its fixed fields and key, and with `check_offsets` that offset deltas run 0..count-1.
    With `deep`, also that each record's value and headers add up to its length exactly (what
    a consumer's parser will need); this roughly doubles the cost. Returns the timestamp delta
    range and, with `need_keys`, the indices of null-key records.
    Raises KafkaError(INVALID_RECORD) on any inconsistency.
    """
    try:
        if deep:
            return _scan_deep(data, pos, end, count, need_keys, check_offsets)
        return _scan(data, pos, end, count, need_keys, check_offsets)
    except (IndexError, ValueError) as exc:
        raise _invalid(f"Found invalid record structure: {exc}") from None


def _count(data: Buffer, pos: int, end: int) -> int:
    i = 0
    while pos < end:
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos, 5)
        if length < MIN_RECORD_BODY:
            raise _invalid(f"Invalid record size {length} for record {i}")
        pos += length
        i += 1
    if pos != end:
        raise _invalid(f"Record {i - 1} runs {pos - end} bytes past the end of the batch")
    return i


def _scan(data: Buffer, pos: int, end: int, count: int, need_keys: bool,
          check_offsets: bool) -> RecordScan:
    keyless: list[int] = []
    min_ts = _INT64_MAX
    max_ts = _INT64_MIN
    i = 0
    while pos < end:
        # length: records up to 8 KiB take one or two bytes
        b = data[pos]
        if b < 0x80:
            z = b
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 5)
        length = (z >> 1) ^ -(z & 1)
        rec_end = pos + length
        if length < MIN_RECORD_BODY or rec_end > end:
            raise _invalid(f"Invalid record size {length} for record {i}")
        # timestamp delta, after the attributes byte
        b = data[pos + 1]
        if b < 0x80:
            ts = (b >> 1) ^ -(b & 1)
            p = pos + 2
        else:
            b2 = data[pos + 2]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                ts = (z >> 1) ^ -(z & 1)
                p = pos + 3
            else:
                ts, p = read_varint(data, pos + 1, 10)
        if ts < min_ts:
            min_ts = ts
        if ts > max_ts:
            max_ts = ts
        # offset delta, compared in its zigzag form (2 * i) to save the decode
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                p += 2
            else:
                z, p = read_uvarint(data, p, 5)
        if z != i << 1 and check_offsets:
            raise _invalid(f"Record {i} has offset delta {(z >> 1) ^ -(z & 1)}")
        # key length: zigzag 1 is -1 (null)
        b = data[p]
        if b == 1:
            if need_keys:
                keyless.append(i)
            p += 1
        else:
            if b < 0x80:
                z = b
                p += 1
            else:
                b2 = data[p + 1]
                if b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    p += 2
                else:
                    z, p = read_uvarint(data, p, 5)
            if z & 1:
                raise _invalid(f"Invalid key length {(z >> 1) ^ -1} in record {i}")
            p += z >> 1
        # the value length and header count need at least two more bytes
        if p + 2 > rec_end:
            raise _invalid(f"Record {i} is too short for its key")
        pos = rec_end
        i += 1
        if i > count:
            raise _invalid(f"Batch declares {count} records but holds more")
    if i != count:
        raise _invalid(f"Batch declares {count} records but holds {i}")
    if not i:
        min_ts = max_ts = 0
    return RecordScan(i, min_ts, max_ts, keyless)


def _scan_deep(data: Buffer, pos: int, end: int, count: int, need_keys: bool,
               check_offsets: bool) -> RecordScan:
    keyless: list[int] = []
    min_ts = _INT64_MAX
    max_ts = _INT64_MIN
    i = 0
    while pos < end:
        # length: records up to 8 KiB take one or two bytes
        b = data[pos]
        if b < 0x80:
            z = b
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 5)
        length = (z >> 1) ^ -(z & 1)
        rec_end = pos + length
        if length < MIN_RECORD_BODY or rec_end > end:
            raise _invalid(f"Invalid record size {length} for record {i}")
        p = pos + 1  # attributes
        b = data[p]
        if b < 0x80:
            ts = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            ts, p = read_varint(data, p, 10)
        if ts < min_ts:
            min_ts = ts
        if ts > max_ts:
            max_ts = ts
        b = data[p]
        if b < 0x80:
            od = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            od, p = read_varint(data, p, 5)
        if od != i and check_offsets:
            raise _invalid(f"Record {i} has offset delta {od}")
        # key length, then skip the key
        b = data[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                n = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                n, p = read_varint(data, p, 5)
        if n > 0:
            p += n
        elif n < 0:
            if n != -1:
                raise _invalid(f"Invalid key length {n} in record {i}")
            if need_keys:
                keyless.append(i)
        # value length, then skip the value
        b = data[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                z = (b & 0x7F) | (b2 << 7)
                n = (z >> 1) ^ -(z & 1)
                p += 2
            else:
                n, p = read_varint(data, p, 5)
        if n > 0:
            p += n
        elif n < -1:
            raise _invalid(f"Invalid value length {n} in record {i}")
        b = data[p]
        if b == 0:
            p += 1
        else:
            p = _skip_headers(data, p, rec_end, i)
        if p != rec_end:
            raise _invalid(f"Invalid record size: record {i} declares {length} bytes but its "
                           f"fields take {p - pos}")
        pos = rec_end
        i += 1
        if i > count:
            raise _invalid(f"Batch declares {count} records but holds more")
    if i != count:
        raise _invalid(f"Batch declares {count} records but holds {i}")
    if not i:
        min_ts = max_ts = 0
    return RecordScan(i, min_ts, max_ts, keyless)


def _skip_headers(data: Buffer, p: int, rec_end: int, index: int) -> int:
    header_count, p = read_varint(data, p, 5)
    # Each header takes at least two bytes, which bounds the loop by the record's size.
    if header_count < 0 or header_count > rec_end - p:
        raise _invalid(f"Invalid number of headers {header_count} in record {index}")
    for _ in range(header_count):
        n, p = read_varint(data, p, 5)
        if n < 0:
            raise _invalid(f"Invalid header key length {n} in record {index}")
        p += n
        n, p = read_varint(data, p, 5)
        if n > 0:
            p += n
        elif n < -1:
            raise _invalid(f"Invalid header value length {n} in record {index}")
        if p > rec_end:
            break
    return p

