"""Produce-side validation of one partition's records, with Kafka's error codes.

`validate_records` applies, in Kafka's order, the checks a Kafka 4 broker makes between
receiving a Produce request and appending to the log:

1. Framing (ProduceRequest.validateRecords). The bytes must be whole v2 batches back to back:
   a batch shorter than its header, running past the end or with an impossible magic is
   CORRUPT_MESSAGE; magic 0/1 is INVALID_RECORD (Kafka 4 accepts only v2 from Produce v3+,
   and answers INVALID_RECORD, not UNSUPPORTED_FOR_MESSAGE_FORMAT); no batch at all, or more
   than one batch, is INVALID_RECORD (every Produce version Kafka 4 supports carries exactly
   one batch per partition, compressed or not, idempotent or not). zstd before Produce v7 and
   codec ids above 4 are UNSUPPORTED_COMPRESSION_TYPE. Kafka silently drops trailing bytes
   that do not form a whole batch; Moldau rejects them as CORRUPT_MESSAGE instead, since no
   correct client sends them.
2. Batch headers (UnifiedLog.analyzeAndValidateRecords): baseOffset must be 0
   (INVALID_RECORD), the batch must fit max.message.bytes (MESSAGE_TOO_LARGE), the CRC32C
   must match (CORRUPT_MESSAGE); the whole records section must fit the segment size, or
   `max_request_batch_bytes` when given (RECORD_LIST_TOO_LARGE).
3. Batch consistency (LogValidator.validateBatch), all INVALID_RECORD: lastOffsetDelta + 1
   must equal a positive recordCount; no control batches from clients; a producer id needs a
   base sequence.
4. Records (LogValidator.validateRecord), reported per record as RecordValidationError:
   a null key on a compacted topic is INVALID_RECORD; a CreateTime timestamp outside
   [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] is
   INVALID_TIMESTAMP, as is a batch the producer marked LogAppendTime (where Kafka rejects
   that). If any record has a timestamp error the whole answer is INVALID_TIMESTAMP.
   Malformed records (lengths that do not add up, a count that differs from the header) are
   INVALID_RECORD. So are offset deltas other than 0..n-1 in a walked batch: Kafka would
   rebuild such a batch, but Moldau stores batches unchanged, so it refuses them.

Record walks, cheapest first; none builds per-record Python objects.

- Uncompressed batch, no rule needing record fields (the default: not compacted and
  message.timestamp.before.max.ms unlimited): `count_records` reads only each record's length
  varint, in place. That proves the count and that the records tile the batch exactly; the
  CRC already vouches for the bytes. Offset deltas are not checked (Kafka's path for
  uncompressed batches ignores them too) and the header's max timestamp stands for the newest
  record for the message.timestamp.after.max.ms check; when it fails that check the records
  are decoded, to name the offending ones or to correct a wrong header.
- Compressed batch, compacted topic, or a finite before.max.ms: `scan_records` also reads
  each record's timestamp delta, offset delta and key length (about 3-4x the cost of the
  length walk). Compressed batches are decompressed for it, bounded by
  `max_decompressed_bytes`, and never recompressed: the producer's bytes are stored as they
  came.
- `deep=True` adds the value and header lengths, as Kafka's own record reader checks them
  (about twice the cost again).

In-place changes. Like Kafka's validator, this rewrites the header's max timestamp when the
batch must carry a different one: on a LogAppendTime topic every batch is stamped with
`now_ms` and the LogAppendTime flag; on a CreateTime topic a max timestamp that the record
walk shows to be wrong (or a producer-set LogAppendTime flag that was accepted) is
corrected. Either way the CRC is resealed. `buf` must then be writable (a bytearray).
Offsets are left to the log, which patches baseOffset (outside the CRC) when it appends.
"""

from __future__ import annotations

import struct

from moldau.config import LONG_MAX
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_PREFIX,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    compute_crc,
    parse_header,
)
from moldau.records.codec import (
    MIN_BATCH_LENGTH,
    RecordScan,
    count_records,
    decode_records,
    scan_records,
)
from moldau.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress

from .config import LogConfig

__all__ = ["DECOMPRESSION_RATIO_LIMIT", "RecordValidationError", "validate_records"]

# Default bound on a compressed batch's decompressed size, as a multiple of max.message.bytes
# (never below DEFAULT_MAX_DECOMPRESSED_BYTES): generous for real data, small enough that a
# decompression bomb cannot exhaust memory.
DECOMPRESSION_RATIO_LIMIT = 16

# The smallest message of any format (a v0 message), Kafka's first check on a batch length.
_MIN_ANY_FORMAT = 14
# Produce v7 introduced zstd.
_ZSTD_MIN_PRODUCE_VERSION = 7

_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")


class RecordValidationError(KafkaError):
    """Some records of a batch were refused; `record_errors` holds (record index, message).

    The Produce response (v8+) reports these in `record_errors` next to `error_message`.
    """

    def __init__(self, code: ErrorCode, message: str,
                 record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def validate_records(buf: bytearray, config: LogConfig, *, now_ms: int,
                     max_request_batch_bytes: int | None = None,
                     max_decompressed_bytes: int | None = None,
                     produce_version: int | None = None,
                     single_batch: bool = True,
                     deep: bool = False,
                     sequenced: bool = True) -> list[BatchHeader]:
    """Validate a Produce request's records for one partition; returns the batch headers.

    `max_request_batch_bytes` bounds the whole records section (default: the topic's
    segment.bytes, as Kafka does). `max_decompressed_bytes` bounds one compressed batch's
    decompressed size (default: 16 x max.message.bytes, at least 64 MiB). With
    `produce_version` given, zstd below Produce v7 is refused. `single_batch=False` lifts the
    one-batch rule for callers other than the Produce path. `deep` also checks that every
    record's value and headers add up to its length, as Kafka does (about twice the cost).
    `sequenced=False` accepts a producer id without a sequence: the group coordinator's
    transactional writes, which Kafka does not check for sequence either.

    Raises KafkaError (RecordValidationError for per-record refusals).
    """
    spans = _frame(buf, produce_version)
    if single_batch and len(spans) > 1:
        raise _invalid("Produce requests are only allowed to contain exactly one record batch "
                       f"per partition; got {len(spans)}")

    headers = [parse_header(buf, pos) for pos, _ in spans]
    for (pos, size), header in zip(spans, headers, strict=True):
        if header.base_offset != 0:
            raise _invalid("The baseOffset of a produced record batch must be 0, but it is "
                           f"{header.base_offset}")
        if size > config.max_message_bytes:
            raise KafkaError(ErrorCode.message_too_large,
                             f"The record batch is {size} bytes, more than the maximum of "
                             f"{config.max_message_bytes} (max.message.bytes)")
        if compute_crc(buf, pos, size) != header.crc:
            raise _corrupt(f"Record batch is corrupt (stored crc = {header.crc})")

    limit = config.segment_bytes if max_request_batch_bytes is None else max_request_batch_bytes
    if len(buf) > limit:
        raise KafkaError(ErrorCode.record_list_too_large,
                         f"The records of {len(buf)} bytes exceed the limit of {limit} bytes")

    cap = max_decompressed_bytes
    if cap is None:
        cap = max(DECOMPRESSION_RATIO_LIMIT * config.max_message_bytes,
                  DEFAULT_MAX_DECOMPRESSED_BYTES)

    result: list[BatchHeader] = []
    for (pos, size), header in zip(spans, headers, strict=True):
        _check_batch(header, sequenced)
        max_timestamp = _check_records(buf, pos, size, header, config, now_ms, cap, deep)
        result.append(_stamp(buf, pos, size, header, config, now_ms, max_timestamp))
    return result


def _frame(buf: bytearray, produce_version: int | None) -> list[tuple[int, int]]:
    """(position, size) of each batch, checking only what is needed to find them."""
    n = len(buf)
    if not n:
        raise _invalid("Produce requests must have at least one record batch per partition")
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < n:
        remaining = n - pos
        if remaining < LOG_OVERHEAD:
            raise _corrupt(f"{remaining} bytes at position {pos} do not form a record batch")
        (batch_length,) = _LENGTH.unpack_from(buf, pos + 8)
        # Kafka's first sanity check, valid for any format: the smallest legacy message.
        if batch_length < _MIN_ANY_FORMAT:
            raise _corrupt(f"Record batch at position {pos} has length {batch_length}, less "
                           f"than the minimum record overhead of {_MIN_ANY_FORMAT}")
        if remaining < MIN_PREFIX:
            raise _corrupt(f"{remaining} bytes at position {pos} do not form a record batch")
        magic = buf[pos + MAGIC_OFFSET]
        if magic > 2:  # also a negative int8
            raise _corrupt(f"Invalid magic {magic - 256 if magic > 127 else magic} in record "
                           f"batch at position {pos}")
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            raise _corrupt(f"Record batch at position {pos} declares {size} bytes but only "
                           f"{remaining} remain")
        if magic != 2:
            raise _invalid("Produce requests are only allowed to contain record batches with "
                           f"magic version 2, not {magic}")
        if batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(f"Record batch at position {pos} has length {batch_length}, less "
                           f"than the minimum of {MIN_BATCH_LENGTH}")
        codec = buf[pos + ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise KafkaError(ErrorCode.unsupported_compression_type,
                             f"Unknown compression type id: {codec}")
        if (codec == Compression.ZSTD and produce_version is not None
                and produce_version < _ZSTD_MIN_PRODUCE_VERSION):
            raise KafkaError(ErrorCode.unsupported_compression_type,
                             f"Produce requests with version {produce_version} are not "
                             "allowed to use zstd compression")
        spans.append((pos, size))
        pos += size
    return spans


def _check_batch(header: BatchHeader, sequenced: bool = True) -> None:
    count_from_offsets = header.last_offset_delta + 1
    if count_from_offsets <= 0:
        raise _invalid(f"Batch has an invalid offset range: last offset delta "
                       f"{header.last_offset_delta}")
    if header.record_count <= 0:
        raise _invalid(f"Invalid record count {header.record_count} for record batch")
    if count_from_offsets != header.record_count:
        raise _invalid(f"Inconsistent batch: offset range of {count_from_offsets} records but "
                       f"a count of {header.record_count}")
    if header.is_control:
        raise _invalid("Clients are not allowed to write control records")
    if sequenced and header.producer_id >= 0 and header.base_sequence < 0:
        raise _invalid(f"Invalid sequence number {header.base_sequence} in a batch with "
                       f"producer id {header.producer_id}")


def _check_records(buf: bytearray, pos: int, size: int, header: BatchHeader,
                   config: LogConfig, now_ms: int, cap: int, deep: bool) -> int:
    """Walk the batch's records and apply the per-record rules; returns the max timestamp."""
    codec = header.attributes & COMPRESSION_MASK
    # If the topic's compression.type names a codec other than the batch's, Kafka would
    # recompress the batch here. Moldau does not recompress (yet): the batch keeps the
    # producer's codec and is stored byte for byte as it came.
    start, end = pos + HEADER_SIZE, pos + size
    scan: RecordScan | None = None
    if codec:
        section = memoryview(buf)[start:end]
        try:
            data = decompress(codec, section, max_size=cap)
        finally:
            section.release()
        scan = scan_records(data, 0, len(data), header.record_count,
                            need_keys=config.compact, deep=deep)
    elif (deep or config.compact
          or config.message_timestamp_before_max_ms < LONG_MAX):
        # A rule needs per-record data (keys, the oldest timestamp): walk the fields in place.
        scan = scan_records(buf, start, end, header.record_count,
                            need_keys=config.compact, deep=deep)
    else:
        # Lengths only: proves the count and the record boundaries. Offset deltas stay
        # unchecked (as in Kafka, whose in-place path ignores them for uncompressed batches)
        # and the header's max timestamp stands for the records' newest one.
        count = count_records(buf, start, end)
        if count != header.record_count:
            raise _invalid(f"Batch declares {header.record_count} records but holds {count}")

    errors: dict[int, str] = {}
    timestamp_error = False
    if config.compact and scan is not None:
        for index in scan.keyless:
            errors[index] = "Compacted topic cannot accept a record without a key"

    base = header.base_timestamp
    lowest = now_ms - config.message_timestamp_before_max_ms
    highest = now_ms + config.message_timestamp_after_max_ms
    if header.log_append_time:
        # Every record of a LogAppendTime batch reads as the batch's max timestamp. Kafka only
        # lets such a batch through on a CreateTime topic, with that timestamp in range.
        ts = header.max_timestamp
        if config.log_append_time or ts == NO_TIMESTAMP:
            reason = "Producers must not set the timestamp type to LogAppendTime"
        elif not lowest <= ts <= highest:
            reason = _out_of_range(ts, lowest, highest)
        else:
            reason = ""
        if reason:
            for index in range(header.record_count):
                if index not in errors:
                    errors[index] = reason
                    timestamp_error = True
        max_timestamp = ts
    else:
        if scan is not None:
            oldest: int | None = base + scan.min_timestamp_delta
            max_timestamp = base + scan.max_timestamp_delta
        else:
            oldest, max_timestamp = None, header.max_timestamp
        if not config.log_append_time and (max_timestamp > highest
                                           or (oldest is not None and oldest < lowest)):
            # Rare path: decode to find which records are out of range, for the per-record
            # errors; this also gives the true max timestamp if the header's was wrong.
            max_timestamp = NO_TIMESTAMP
            records = decode_records(memoryview(buf)[pos:pos + size],
                                     max_decompressed_bytes=cap)
            for index, rec in enumerate(records):
                ts = base + rec.timestamp_delta
                max_timestamp = max(max_timestamp, ts)
                if (ts != NO_TIMESTAMP and not lowest <= ts <= highest
                        and index not in errors):
                    # A record's key error, found first, is the one Kafka reports for it.
                    errors[index] = _out_of_range(ts, lowest, highest)
                    timestamp_error = True

    if errors:
        record_errors = sorted(errors.items())
        if timestamp_error:
            raise RecordValidationError(
                ErrorCode.invalid_timestamp,
                "One or more records have been rejected due to invalid timestamp",
                record_errors)
        raise RecordValidationError(
            ErrorCode.invalid_record,
            f"{len(record_errors)} record(s) rejected; first: "
            f"{record_errors[0][0]}: {record_errors[0][1]}",
            record_errors)
    return max_timestamp


def _out_of_range(ts: int, lowest: int, highest: int) -> str:
    return f"Timestamp {ts} is out of range; it must be within [{lowest}, {highest}]"


def _stamp(buf: bytearray, pos: int, size: int, header: BatchHeader, config: LogConfig,
           now_ms: int, max_timestamp: int) -> BatchHeader:
    """Give the batch the timestamp type and max timestamp the topic wants, resealing the CRC."""
    if config.log_append_time:
        attributes = header.attributes | TIMESTAMP_TYPE_MASK
        max_timestamp = now_ms
    else:
        attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if attributes == header.attributes and max_timestamp == header.max_timestamp:
        return header
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _MAX_TS.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = compute_crc(buf, pos, size)
    _CRC.pack_into(buf, pos + CRC_OFFSET, crc)
    return header._replace(attributes=attributes, max_timestamp=max_timestamp, crc=crc)
