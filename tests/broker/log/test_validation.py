"""Produce-side validation: Kafka's error codes for every rule, on real clients' batches."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from moldau.broker.log.config import LogConfig
from moldau.broker.log.validation import RecordValidationError, validate_records
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    Compression,
    compute_crc,
    parse_header,
)
from moldau.records.codec import Record, build_batch, encode_records

NOW = 1_700_000_000_000
HOUR = 3_600_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]
NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
DEFAULT = LogConfig()
COMPACT = LogConfig(cleanup_policy=("compact",))
LOG_APPEND = LogConfig(message_timestamp_type="LogAppendTime")


def client_batch(n: int = 20, codec: int = 0, *, timestamps: list[int] | None = None,
                 keys: list[bytes | None] | None = None,
                 producer: tuple[int, int, int] = (-1, -1, -1)) -> bytearray:
    """A batch as kafka-python's producer builds it (compressible, so codecs really apply)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 30)
    for i in range(n):
        ts = timestamps[i] if timestamps else NOW + i
        key = keys[i] if keys else b"key-%d" % i
        builder.append(i, ts, key, b"value %d " % i + b"xyz" * 40, [("h", b"1")])
    data = bytearray(builder.build())
    assert parse_header(data).compression == codec
    return data


def reseal(data: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", data, pos + 8)[0] + 12
    struct.pack_into(">I", data, pos + 17, compute_crc(data, pos, size))
    return data


def set_field(data: bytearray, fmt: str, offset: int, value: int) -> bytearray:
    struct.pack_into(fmt, data, offset, value)
    return reseal(data)


def refused(buf: bytearray, config: LogConfig = DEFAULT, **kwargs: object) -> KafkaError:
    with pytest.raises(KafkaError) as err:
        validate_records(buf, config, now_ms=NOW, **kwargs)  # type: ignore[arg-type]
    return err.value


def with_section(section: bytes | bytearray, count: int, codec: int = 0) -> bytearray:
    """A batch around a hand-made records section (compressed with `codec`), resealed."""
    from moldau.records.compression import compress

    body = compress(codec, bytes(section))
    head = bytearray(build_batch([(b"k", b"v", None, NOW)]))[:HEADER_SIZE]
    data = head + body
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">h", data, 21, codec)
    struct.pack_into(">i", data, 23, count - 1)
    struct.pack_into(">i", data, 57, count)
    return reseal(data)


# --- accepted batches -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_client_batches_pass_unchanged(codec: int) -> None:
    buf = client_batch(50, codec)
    original = bytes(buf)
    headers = validate_records(buf, DEFAULT, now_ms=NOW)
    assert headers == [parse_header(original)]
    assert bytes(buf) == original  # stored exactly as produced, never recompressed


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_compacted_topic_with_keys(codec: int) -> None:
    assert validate_records(client_batch(10, codec), COMPACT, now_ms=NOW)[0].record_count == 10


def test_idempotent_batch() -> None:
    [h] = validate_records(client_batch(5, producer=(1000, 0, 42)), DEFAULT, now_ms=NOW)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (
        1000, 0, 42, 46)


def test_topic_codec_differing_from_batch_codec_keeps_the_producers() -> None:
    buf = client_batch(10, Compression.SNAPPY)
    original = bytes(buf)
    config = LogConfig(compression_type="zstd")
    assert validate_records(buf, config, now_ms=NOW)[0].compression == Compression.SNAPPY
    assert bytes(buf) == original


def test_several_batches_when_allowed() -> None:
    buf = client_batch(3) + client_batch(4, Compression.LZ4)
    headers = validate_records(buf, DEFAULT, now_ms=NOW, single_batch=False)
    assert [h.record_count for h in headers] == [3, 4]


# --- framing --------------------------------------------------------------------------------


def test_no_batch() -> None:
    assert refused(bytearray()).code == ErrorCode.invalid_record


def test_more_than_one_batch() -> None:
    assert refused(client_batch(3) + client_batch(3)).code == ErrorCode.invalid_record


@pytest.mark.parametrize("cut", [1, 30, 70])
def test_truncated_batch(cut: int) -> None:
    buf = client_batch(5)
    assert refused(buf[:-cut]).code == ErrorCode.corrupt_message


@pytest.mark.parametrize("extra", [1, 12, 20, 100])
def test_trailing_bytes(extra: int) -> None:
    buf = client_batch(5) + bytes(extra)
    assert refused(buf).code == ErrorCode.corrupt_message


def test_shorter_than_a_header() -> None:
    assert refused(client_batch(5)[:16]).code == ErrorCode.corrupt_message
    assert refused(client_batch(5)[:40]).code == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic(magic: int) -> None:
    buf = client_batch(2)
    buf[16] = magic
    # Kafka 4 refuses anything but v2 in Produce with INVALID_RECORD.
    assert refused(buf).code == ErrorCode.invalid_record


@pytest.mark.parametrize("magic", [3, 0x7F, 0xFF])
def test_impossible_magic(magic: int) -> None:
    buf = client_batch(2)
    buf[16] = magic
    assert refused(buf).code == ErrorCode.corrupt_message


@pytest.mark.parametrize("length", [-5, 0, 13, 48])
def test_batch_length_below_header(length: int) -> None:
    buf = client_batch(2)
    struct.pack_into(">i", buf, 8, length)
    assert refused(buf).code == ErrorCode.corrupt_message


def test_unknown_codec_id() -> None:
    buf = client_batch(2)
    assert refused(set_field(buf, ">h", 21, 5)).code == ErrorCode.unsupported_compression_type


def test_zstd_needs_produce_v7() -> None:
    buf = client_batch(5, Compression.ZSTD)
    err = refused(buf, produce_version=6)
    assert err.code == ErrorCode.unsupported_compression_type
    assert validate_records(buf, DEFAULT, now_ms=NOW, produce_version=7)


# --- batch header checks --------------------------------------------------------------------


def test_base_offset_must_be_zero() -> None:
    buf = client_batch(2)
    struct.pack_into(">q", buf, 0, 5)  # outside the CRC
    assert refused(buf).code == ErrorCode.invalid_record


def test_batch_larger_than_max_message_bytes() -> None:
    buf = client_batch(20)
    assert refused(buf, LogConfig(max_message_bytes=len(buf) - 1)).code == (
        ErrorCode.message_too_large)
    assert validate_records(buf, LogConfig(max_message_bytes=len(buf)), now_ms=NOW)


def test_records_larger_than_the_request_limit() -> None:
    buf = client_batch(20)
    err = refused(buf, max_request_batch_bytes=len(buf) - 1)
    assert err.code == ErrorCode.record_list_too_large
    # by default the limit is the segment size, as in Kafka
    err = refused(buf, LogConfig(segment_bytes=len(buf) - 1))
    assert err.code == ErrorCode.record_list_too_large


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_crc_mismatch(codec: int) -> None:
    buf = client_batch(5, codec)
    buf[-3] ^= 0x40
    assert refused(buf).code == ErrorCode.corrupt_message


def test_crc_field_damaged() -> None:
    buf = client_batch(5)
    buf[18] ^= 1
    assert refused(buf).code == ErrorCode.corrupt_message


@pytest.mark.parametrize(("last_delta", "count"), [(3, 5), (4, 4), (-1, 0), (-2, -1), (4, 0)])
def test_inconsistent_counts(last_delta: int, count: int) -> None:
    buf = client_batch(5)
    struct.pack_into(">i", buf, 23, last_delta)
    struct.pack_into(">i", buf, 57, count)
    assert refused(reseal(buf)).code == ErrorCode.invalid_record


def test_control_batch_from_a_client() -> None:
    buf = client_batch(1, producer=(5, 0, 0))
    assert refused(set_field(buf, ">h", 21, CONTROL_FLAG)).code == ErrorCode.invalid_record


def test_producer_id_without_sequence() -> None:
    buf = client_batch(2, producer=(5, 0, 0))
    assert refused(set_field(buf, ">i", 53, -1)).code == ErrorCode.invalid_record
    # The group coordinator's transactional offset commits carry no sequence.
    [h] = validate_records(buf, DEFAULT, now_ms=NOW, sequenced=False)
    assert (h.producer_id, h.base_sequence) == (5, -1)


# --- records inside the batch ---------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
@pytest.mark.parametrize("declared", [4, 6])
def test_record_count_differs_from_records(codec: int, declared: int) -> None:
    records = [Record(i, 0, b"k", b"v" * 50, []) for i in range(5)]
    buf = with_section(encode_records(records), declared, codec)
    assert refused(buf).code == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_record_lengths_that_do_not_tile_the_section(codec: int) -> None:
    section = encode_records([Record(i, 0, b"k", b"v" * 50, []) for i in range(3)])
    section += b"\x00\x00"  # junk after the last record
    assert refused(with_section(section, 3, codec)).code == ErrorCode.invalid_record
    short = encode_records([Record(i, 0, b"k", b"v" * 50, []) for i in range(3)])[:-1]
    assert refused(with_section(short, 3, codec)).code == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=NAMES.get)
def test_compressed_offset_deltas_must_run_from_zero(codec: int) -> None:
    records = [Record(i + 1, 0, b"k", b"v" * 50, []) for i in range(3)]
    assert refused(with_section(encode_records(records), 3, codec)).code == (
        ErrorCode.invalid_record)


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=NAMES.get)
def test_corrupt_compressed_data_with_a_valid_crc(codec: int) -> None:
    buf = client_batch(30, codec)
    middle = HEADER_SIZE + (len(buf) - HEADER_SIZE) // 2
    for i in range(middle, middle + 8):
        buf[i] ^= 0x5A
    del buf[-10:]
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    assert refused(reseal(buf)).code == ErrorCode.corrupt_message


def test_decompression_bomb() -> None:
    records = [(b"k", bytes(1 << 20), None, NOW) for _ in range(8)]
    buf = bytearray(build_batch(records, compression=Compression.ZSTD))
    assert len(buf) < 4096
    err = refused(buf, max_decompressed_bytes=1 << 20)
    assert err.code == ErrorCode.message_too_large
    assert validate_records(buf, DEFAULT, now_ms=NOW)  # within the default bound


def test_deep_mode_checks_record_bodies() -> None:
    section = bytearray(encode_records([Record(0, 0, b"k", b"value", [])]))
    section[6] = 2 * 4  # value length off by one; the record length still adds up
    buf = with_section(section, 1)
    assert validate_records(bytearray(buf), DEFAULT, now_ms=NOW)
    assert refused(buf, deep=True).code == ErrorCode.invalid_record


# --- compaction -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_compacted_topic_needs_keys(codec: int) -> None:
    buf = client_batch(5, codec, keys=[b"a", None, b"c", None, b""])
    with pytest.raises(RecordValidationError) as err:
        validate_records(buf, COMPACT, now_ms=NOW)
    assert err.value.code == ErrorCode.invalid_record
    assert [i for i, _ in err.value.record_errors] == [1, 3]  # an empty key is a key
    assert validate_records(client_batch(5, codec, keys=[b"a", None, b"c", None, b""]),
                            DEFAULT, now_ms=NOW)


# --- timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_timestamp_too_far_in_the_future(codec: int) -> None:
    stamps = [NOW, NOW + HOUR, NOW + HOUR + 1, NOW - 10 * 365 * 24 * HOUR]
    with pytest.raises(RecordValidationError) as err:
        validate_records(client_batch(4, codec, timestamps=stamps), DEFAULT, now_ms=NOW)
    assert err.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in err.value.record_errors] == [2]


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_timestamp_too_old(codec: int) -> None:
    config = LogConfig(message_timestamp_before_max_ms=HOUR)
    stamps = [NOW, NOW - HOUR, NOW - HOUR - 1, NOW - 5 * HOUR]
    with pytest.raises(RecordValidationError) as err:
        validate_records(client_batch(4, codec, timestamps=stamps), config, now_ms=NOW)
    assert err.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in err.value.record_errors] == [2, 3]


def test_no_timestamp_is_not_checked() -> None:
    config = LogConfig(message_timestamp_before_max_ms=HOUR)
    buf = client_batch(2, timestamps=[-1, -1])
    assert validate_records(buf, config, now_ms=NOW)


def test_timestamps_are_not_checked_on_log_append_time_topics() -> None:
    config = LogConfig(message_timestamp_type="LogAppendTime",
                       message_timestamp_before_max_ms=HOUR)
    buf = client_batch(2, timestamps=[NOW + 5 * HOUR, NOW - 5 * HOUR])
    assert validate_records(buf, config, now_ms=NOW)


def test_timestamp_error_wins_over_key_error_across_records() -> None:
    stamps = [NOW + 2 * HOUR, NOW + 2 * HOUR, NOW]
    buf = client_batch(3, timestamps=stamps, keys=[None, b"k", None])
    with pytest.raises(RecordValidationError) as err:
        validate_records(buf, COMPACT, now_ms=NOW)
    # Record 0 reports its key (checked first), record 1 its timestamp; any timestamp error
    # makes the whole answer INVALID_TIMESTAMP.
    assert err.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in err.value.record_errors] == [0, 1, 2]
    assert "key" in err.value.record_errors[0][1]
    assert "Timestamp" in err.value.record_errors[1][1]


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_log_append_time_topic_stamps_the_batch(codec: int) -> None:
    buf = client_batch(5, codec, timestamps=[NOW - 5 * HOUR] * 5)
    [h] = validate_records(buf, LOG_APPEND, now_ms=NOW)
    assert h.log_append_time and h.max_timestamp == NOW
    assert h == parse_header(buf)
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert [r.timestamp for r in batch] == [NOW] * 5  # what consumers will see


def test_producer_set_log_append_time_is_refused_on_log_append_time_topics() -> None:
    buf = client_batch(2)
    buf = set_field(buf, ">h", 21, TIMESTAMP_TYPE_MASK)
    with pytest.raises(RecordValidationError) as err:
        validate_records(buf, LOG_APPEND, now_ms=NOW)
    assert err.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in err.value.record_errors] == [0, 1]


def test_producer_set_log_append_time_on_create_time_topics() -> None:
    # Accepted when its (max) timestamp is in range, and turned back into CreateTime.
    buf = set_field(client_batch(2), ">h", 21, TIMESTAMP_TYPE_MASK)
    [h] = validate_records(buf, DEFAULT, now_ms=NOW)
    assert not h.log_append_time and h == parse_header(buf)
    assert h.crc == compute_crc(buf, 0, len(buf))
    # Refused when there is no timestamp to go by.
    buf = set_field(client_batch(2), ">h", 21, TIMESTAMP_TYPE_MASK)
    buf = set_field(buf, ">q", 35, -1)
    assert refused(buf).code == ErrorCode.invalid_timestamp


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4], ids=NAMES.get)
def test_wrong_max_timestamp_is_corrected(codec: int) -> None:
    buf = client_batch(4, codec, timestamps=[NOW, NOW + 30, NOW + 10, NOW + 20])
    buf = set_field(buf, ">q", 35, NOW + 5)
    # The records are walked when the batch is compressed or the topic needs keys.
    [h] = validate_records(buf, COMPACT, now_ms=NOW)
    assert h.max_timestamp == NOW + 30 == parse_header(buf).max_timestamp
    assert h.crc == compute_crc(buf, 0, len(buf))


def test_header_max_timestamp_in_the_future_is_checked_against_the_records() -> None:
    # The header claims a future timestamp but no record has one: accepted, header fixed.
    buf = set_field(client_batch(3), ">q", 35, NOW + 2 * HOUR)
    [h] = validate_records(buf, DEFAULT, now_ms=NOW)
    assert h.max_timestamp == NOW + 2


def test_record_validation_error_is_a_kafka_error() -> None:
    err = RecordValidationError(ErrorCode.invalid_record, "x", [(0, "y")])
    assert isinstance(err, KafkaError) and err.record_errors == [(0, "y")]
