"""Target `batches`: one partition's records from a Produce request, validated as the
produce path validates them, then read back as a follower or consumer reads batches.

An input is one mode byte, then the records bytes (one or more v2 batches). The mode picks
the topic and the caller, so one corpus covers every branch of the validator:

    bit 0     cleanup.policy=compact (null keys refused)
    bit 1     message.timestamp.type=LogAppendTime
    bit 2     message.timestamp.before.max.ms of one hour (else unlimited)
    bit 3     deep validation (value and header lengths too)
    bits 4-5  Produce v12, v3 (no zstd), v7, or no Produce at all (the group coordinator's
              writes: several batches, no sequence needed)
    bit 6     reseal: the harness gives every whole batch its correct CRC first, so that
              mutations get past the CRC check into decompression and the records
    bit 7     the producer is known: its last batch ended just before this one's first
              sequence (else the partition has never seen it)

The clock is the batch's own base timestamp, so an input replays the same way on any day.

Contract, on the leader's side:
- `validate_records` raises nothing but KafkaError (answered with its Kafka error code);
- a batch it accepts still carries a valid CRC (it may restamp the header), and the
  producer-state check before the append raises nothing but KafkaError;
- after deep validation, every record of an accepted batch decodes, so no consumer is handed
  a batch it cannot read.
On the reading side, for the same bytes unvalidated: finding batches (`iter_batches`), reading
a transaction marker and decoding records raise nothing but KafkaError.
"""

from __future__ import annotations

import struct
import tempfile

from fuzz.targets import ContractViolation
from moldau.broker.log.config import LogConfig
from moldau.broker.log.producer_state import ProducerStateManager
from moldau.broker.log.validation import validate_records
from moldau.config import LONG_MAX
from moldau.errors import KafkaError
from moldau.records.batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
)
from moldau.records.codec import decode_records, iter_batches
from moldau.records.control import read_end_txn_marker

COMPACT, LOG_APPEND_TIME, BEFORE_MAX, DEEP = 0x01, 0x02, 0x04, 0x08
CALLER_SHIFT, CALLER_MASK = 4, 0x03
RESEAL = 0x40
KNOWN_PRODUCER = 0x80
PRODUCE_VERSIONS = (12, 3, 7, None)

_BASE_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_BASE_TIMESTAMP_OFFSET = 27
# A fixed clock for inputs too short to carry a timestamp: 2024-06-01T00:00:00Z.
_DEFAULT_NOW_MS = 1_717_200_000_000
_HOUR_MS = 3_600_000
# Small enough that inputs of a few KiB meet MESSAGE_TOO_LARGE too.
_MAX_MESSAGE_BYTES = 2048

# Producer state is only read from memory here; the directory is never written.
_STATE_DIR = tempfile.gettempdir()


def clock_for(buf: bytes | bytearray) -> int:
    """The broker's clock for an input: its first batch's base timestamp, when sane."""
    if len(buf) >= _BASE_TIMESTAMP_OFFSET + 8:
        (base,) = _BASE_TIMESTAMP.unpack_from(buf, _BASE_TIMESTAMP_OFFSET)
        if 0 <= base < 1 << 50:
            return base
    return _DEFAULT_NOW_MS


def topic_config(mode: int) -> LogConfig:
    return LogConfig(
        cleanup_policy=("compact",) if mode & COMPACT else ("delete",),
        message_timestamp_type="LogAppendTime" if mode & LOG_APPEND_TIME else "CreateTime",
        message_timestamp_before_max_ms=_HOUR_MS if mode & BEFORE_MAX else LONG_MAX,
        max_message_bytes=_MAX_MESSAGE_BYTES)


def reseal(buf: bytearray) -> None:
    """Give each whole batch in `buf` the CRC its bytes have (a producer's last step)."""
    pos = 0
    while pos + HEADER_SIZE <= len(buf):
        (batch_length,) = _LENGTH.unpack_from(buf, pos + 8)
        size = batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > len(buf):
            return
        _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
        pos += size


def validate_produced(buf: bytearray, config: LogConfig, *, now_ms: int,
                      produce_version: int | None, deep: bool = False,
                      known_producer: bool = False) -> list[BatchHeader]:
    """validate_records as a leader calls it, then the leader's checks on what it accepted;
    raises KafkaError for refused input, ContractViolation for a broken promise."""
    produce = produce_version is not None
    headers = validate_records(buf, config, now_ms=now_ms, produce_version=produce_version,
                               single_batch=produce, deep=deep, sequenced=produce)
    pos = 0
    for header in headers:
        if compute_crc(buf, pos, header.size) != header.crc:
            raise ContractViolation(f"accepted batch at {pos} has a stale CRC")
        pos += header.size
    if pos != len(buf):
        raise ContractViolation(f"accepted batches cover {pos} of {len(buf)} bytes")
    producers = ProducerStateManager(_STATE_DIR, expiration_ms=LONG_MAX)
    first = headers[0]
    if known_producer and first.producer_id >= 0 and first.base_sequence > 0:
        producers.record(first._replace(base_offset=0, last_offset_delta=0, record_count=1,
                                        base_sequence=first.base_sequence - 1))
    producers.check(headers)
    offset = 0
    for header in headers:
        producers.record(header._replace(base_offset=offset))
        offset = header._replace(base_offset=offset).next_offset
    return headers


def check(data: bytes) -> None:
    if not data:
        return
    mode, records = data[0], data[1:]
    config = topic_config(mode)
    deep = bool(mode & DEEP)
    buf = bytearray(records)
    if mode & RESEAL:
        reseal(buf)
        records = bytes(buf)
    try:
        headers = validate_produced(buf, config, now_ms=clock_for(buf), deep=deep,
                                    produce_version=PRODUCE_VERSIONS[
                                        (mode >> CALLER_SHIFT) & CALLER_MASK],
                                    known_producer=bool(mode & KNOWN_PRODUCER))
    except KafkaError:
        headers = []
    if deep:
        _decodes_for_consumers(bytes(buf), headers)
    _read_back(records)


def _decodes_for_consumers(buf: bytes, headers: list[BatchHeader]) -> None:
    pos = 0
    for header in headers:
        batch = buf[pos:pos + header.size]
        try:
            records = decode_records(batch, verify_crc=True)
        except KafkaError as exc:
            raise ContractViolation(f"an accepted batch does not decode: {exc!r}") from None
        if len(records) != header.record_count:
            raise ContractViolation(f"accepted batch declares {header.record_count} records, "
                                    f"decodes {len(records)}")
        pos += header.size


def _read_back(records: bytes) -> None:
    """What a follower and a consumer do with fetched bytes."""
    try:
        for pos, header in iter_batches(records):
            batch = memoryview(records)[pos:pos + header.size]
            if header.is_control:
                read_end_txn_marker(batch, header)
            else:
                decode_records(batch, verify_crc=True)
    except KafkaError:
        pass
