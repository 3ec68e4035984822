"""Record batch codec: varints, byte compatibility with kafka-python's builder and reader."""

from __future__ import annotations

import struct
import time

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    Compression,
    compute_crc,
    parse_header,
)
from moldau.records.codec import (
    Record,
    build_batch,
    count_records,
    decode_records,
    encode_record,
    encode_records,
    encode_varint,
    iter_batches,
    read_uvarint,
    read_varint,
    records_section,
    scan_records,
    size_of_varint,
    unzigzag,
    write_uvarint,
    write_varint,
    zigzag,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]
NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
T0 = 1_700_000_000_000

# A mix of what records carry: null and empty keys and values, headers with null values,
# non-ASCII header keys, out-of-order timestamps, values long enough for 3-byte varints.
SAMPLE: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (b"key-0", b"value-0" * 20, [], T0),
    (None, b"no key", [("trace", b"abc"), ("empty", b""), ("null", None)], T0 + 5),
    (b"", None, [], T0 - 3),
    (b"k" * 300, b"v" * 20_000, [("h\u00e9", b"\x00\xff")], T0 + 70_000),
    (b"last", b"", [], T0 + 1),
]


def kp_build(records: list[tuple[bytes | None, bytes | None, list, int]], codec: int = 0, *,
             producer: tuple[int, int, int] = (-1, -1, -1),
             transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                        is_transactional=transactional,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 30)
    for offset, (key, value, headers, ts) in enumerate(records):
        assert builder.append(offset, ts, key, value, headers) is not None
    return bytes(builder.build())


def compressible(n: int = 200) -> list[tuple[bytes | None, bytes | None, list, int]]:
    return [(b"key-%d" % (i % 7), b"payload %d " % i + b"abc" * 50, [("i", b"%d" % i)], T0 + i)
            for i in range(n)]


# --- varints --------------------------------------------------------------------------------

EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -2**31, 2**63 - 1, -2**63]


@pytest.mark.parametrize("n", EDGES)
def test_varint_matches_kafka_python(n: int) -> None:
    expected = bytearray()
    kp_encode_varint(n, expected.append)
    assert encode_varint(n) == bytes(expected)
    assert size_of_varint(n) == len(expected)
    assert read_varint(expected, 0) == (n, len(expected))
    assert kp_decode_varint(bytearray(encode_varint(n)), 0) == (n, len(expected))
    out = bytearray(b"\xaa")
    write_varint(out, n)
    assert out[1:] == expected


def test_zigzag() -> None:
    assert [zigzag(n) for n in (0, -1, 1, -2, 2)] == [0, 1, 2, 3, 4]
    assert all(unzigzag(zigzag(n)) == n for n in EDGES)


def test_uvarint() -> None:
    out = bytearray()
    write_uvarint(out, 300)
    assert out == b"\xac\x02"
    assert read_uvarint(out, 0) == (300, 2)
    with pytest.raises(ValueError):
        write_uvarint(out, -1)


def test_varint_limits() -> None:
    with pytest.raises(ValueError):
        read_varint(b"\xff\xff\xff\xff\xff\x01", 0, 5)  # int32 fields take at most 5 bytes
    with pytest.raises(IndexError):
        read_varint(b"\xff\xff", 0)
    with pytest.raises(ValueError):
        encode_varint(2**63)


# --- byte compatibility with kafka-python ---------------------------------------------------


def test_uncompressed_batch_is_byte_identical_to_kafka_python() -> None:
    ours = build_batch(SAMPLE, partition_leader_epoch=0)
    assert ours == kp_build(SAMPLE)


def test_idempotent_transactional_batch_is_byte_identical() -> None:
    ours = build_batch(SAMPLE, partition_leader_epoch=0, producer_id=4242, producer_epoch=7,
                       base_sequence=100, is_transactional=True)
    assert ours == kp_build(SAMPLE, producer=(4242, 7, 100), transactional=True)


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_kafka_python_reads_ours(codec: int) -> None:
    records = SAMPLE + compressible()
    data = build_batch(records, compression=codec, base_offset=1000, producer_id=9,
                       producer_epoch=1, base_sequence=5)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset_delta) == (1000, len(records) - 1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 5)
    assert batch.first_timestamp == T0
    assert batch.max_timestamp == T0 + 70_000
    decoded = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in batch]
    assert decoded == [(1000 + i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_we_read_kafka_python(codec: int) -> None:
    records = SAMPLE + compressible()
    data = kp_build(records, codec)
    header = parse_header(data)
    assert header.compression == codec  # the builder really compressed it
    assert header.crc == compute_crc(data, 0, len(data))
    decoded = decode_records(data, verify_crc=True)
    assert decoded == [Record(i, ts - T0, k, v, h) for i, (k, v, h, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_round_trip_from_bytearray_and_memoryview(codec: int) -> None:
    data = build_batch(compressible(50), compression=codec)
    expected = decode_records(data)
    assert decode_records(bytearray(data)) == expected
    assert decode_records(memoryview(data)) == expected
    # Bytes past the batch's end (the next batch, say) are not part of it.
    assert decode_records(data + b"\x00" * 30) == expected


def test_aiokafka_reads_ours_and_we_read_aiokafka() -> None:
    from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

    records = compressible(100)
    for codec in CODECS:
        batch = AioBatch(bytearray(build_batch(records, compression=codec)))
        assert batch.validate_crc()
        assert [(r.key, r.value, r.timestamp) for r in batch] == [
            (k, v, ts) for k, v, _, ts in records]
        builder = AioBuilder(2, codec, False, -1, -1, -1, 1 << 30)
        for i, (k, v, h, ts) in enumerate(records):
            builder.append(i, ts, k, v, h)
        assert decode_records(bytes(builder.build()), verify_crc=True) == [
            Record(i, ts - T0, k, v, h) for i, (k, v, h, ts) in enumerate(records)]


# --- build_batch options --------------------------------------------------------------------


def test_header_fields_and_flags() -> None:
    data = build_batch([(b"k", b"v", None, T0), (b"k", b"v", None, T0 + 9)],
                       base_offset=77, partition_leader_epoch=3, is_transactional=True,
                       timestamp_type_log_append=True, producer_id=1, producer_epoch=2,
                       base_sequence=3)
    h = parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (77, 3, 2)
    assert h.attributes == TRANSACTIONAL_FLAG | TIMESTAMP_TYPE_MASK
    assert (h.last_offset_delta, h.record_count) == (1, 2)
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 9)
    assert h.size == len(data)
    assert h.crc == compute_crc(data, 0, len(data))
    control = parse_header(build_batch([(b"\x00\x00\x00\x01", b"", None, T0)],
                                       is_control=True))
    assert control.is_control and control.attributes & CONTROL_FLAG


def test_explicit_base_timestamp() -> None:
    data = build_batch([(None, b"a", None, T0 + 10), (None, b"b", None, T0 + 5)],
                       base_timestamp=T0)
    h = parse_header(data)
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 10)
    assert [r.timestamp_delta for r in decode_records(data)] == [10, 5]


def test_missing_timestamps_mean_now() -> None:
    before = int(time.time() * 1000)
    data = build_batch([(None, b"a", None, None), (None, b"b", None, None)])
    after = int(time.time() * 1000)
    h = parse_header(data)
    assert before <= h.base_timestamp <= h.max_timestamp <= after


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_accepts_any_iterable_and_bytes_like_values() -> None:
    gen = ((b"k", bytearray(b"v%d" % i), None, T0) for i in range(3))
    records = decode_records(build_batch(gen))
    assert [r.value for r in records] == [b"v0", b"v1", b"v2"]
    assert all(type(r.value) is bytes for r in records)


def test_encode_records_matches_build_batch() -> None:
    data = build_batch(SAMPLE)
    records = decode_records(data)
    assert bytes(encode_records(records)) == data[HEADER_SIZE:]
    out = bytearray()
    encode_record(out, 0, 0, b"k", None, [("a", None)])
    assert count_records(out, 0, len(out)) == 1


# --- iteration and decoding errors ----------------------------------------------------------


def test_iter_batches() -> None:
    a = build_batch(compressible(3))
    b = build_batch(compressible(5), compression=Compression.LZ4, base_offset=3)
    buf = a + b
    assert [(pos, h.record_count) for pos, h in iter_batches(buf)] == [(0, 3), (len(a), 5)]
    # A trailing partial batch (as at the end of a fetch response) ends the iteration.
    assert [pos for pos, _ in iter_batches(buf + b[:40])] == [0, len(a)]
    assert [pos for pos, _ in iter_batches(buf[:-1])] == [0]
    assert list(iter_batches(b"")) == []


def test_iter_batches_refuses_other_formats() -> None:
    data = bytearray(build_batch(compressible(2)))
    data[16] = 1
    with pytest.raises(KafkaError) as err:
        list(iter_batches(data))
    assert err.value.code == ErrorCode.unsupported_for_message_format
    data[16] = 7
    with pytest.raises(KafkaError) as err:
        list(iter_batches(data))
    assert err.value.code == ErrorCode.corrupt_message
    data[16] = 2
    struct.pack_into(">i", data, 8, 20)
    with pytest.raises(KafkaError) as err:
        list(iter_batches(data))
    assert err.value.code == ErrorCode.corrupt_message


def reseal(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return data


def test_decode_errors() -> None:
    good = build_batch(compressible(3))
    with pytest.raises(KafkaError) as err:
        decode_records(good[:50])
    assert err.value.code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as err:
        decode_records(good[:-1])
    assert err.value.code == ErrorCode.corrupt_message
    flipped = bytearray(good)
    flipped[-1] ^= 1
    decode_records(flipped)  # no CRC check unless asked
    with pytest.raises(KafkaError) as err:
        decode_records(flipped, verify_crc=True)
    assert err.value.code == ErrorCode.corrupt_message
    more = bytearray(good)
    struct.pack_into(">i", more, 57, 4)  # declares a fourth record
    with pytest.raises(KafkaError) as err:
        decode_records(reseal(more))
    assert err.value.code == ErrorCode.invalid_record
    fewer = bytearray(good)
    struct.pack_into(">i", fewer, 57, 2)  # leaves a record unread
    with pytest.raises(KafkaError) as err:
        decode_records(reseal(fewer))
    assert err.value.code == ErrorCode.invalid_record


def test_decode_rejects_inconsistent_record_lengths() -> None:
    data = bytearray(build_batch([(b"key", b"value", None, T0)]))
    # Record layout: length, attributes, ts delta, offset delta, key length, key, ...
    data[HEADER_SIZE + 4] = 2 * 4  # key length 4 instead of 3
    with pytest.raises(KafkaError) as err:
        decode_records(data)
    assert err.value.code == ErrorCode.invalid_record


# --- scanning -------------------------------------------------------------------------------


def test_header_keys_that_are_not_utf8_decode_as_java_does() -> None:
    """Kafka stores header keys unchecked and Java's consumer reads malformed UTF-8 as
    U+FFFD; a batch the broker accepted must read here too (a fuzz finding)."""
    data = build_batch([(b"k", b"v", [("h\u00e9", b"x")], T0)])
    at = data.index("h\u00e9".encode())
    broken = bytearray(data)
    broken[at + 1] = 0xF5  # never valid in UTF-8
    struct.pack_into(">I", broken, 17, compute_crc(broken, 0, len(broken)))
    (record,) = decode_records(bytes(broken), verify_crc=True)
    assert record.headers == [("h\ufffd\ufffd", b"x")]
    assert scan_records(bytes(broken), HEADER_SIZE, len(broken), 1, deep=True).count == 1


def test_scan_matches_decode() -> None:
    data = build_batch(SAMPLE)
    scan = scan_records(data, HEADER_SIZE, len(data), len(SAMPLE), need_keys=True)
    deltas = [ts - T0 for *_, ts in SAMPLE]
    assert scan.count == len(SAMPLE)
    assert (scan.min_timestamp_delta, scan.max_timestamp_delta) == (min(deltas), max(deltas))
    assert scan.keyless == [1]
    assert scan_records(data, HEADER_SIZE, len(data), len(SAMPLE), deep=True) == scan._replace(
        keyless=[])
    assert count_records(data, HEADER_SIZE, len(data)) == len(SAMPLE)


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_records_section_for_stored_batches(codec: int) -> None:
    data = build_batch(SAMPLE, compression=codec)
    log = build_batch(compressible(2)) + data
    pos, header = list(iter_batches(log))[1]
    section = records_section(log, header, pos)
    assert section == build_batch(SAMPLE)[HEADER_SIZE:]
    assert scan_records(section, 0, len(section), header.record_count).count == len(SAMPLE)


def test_scan_checks() -> None:
    data = build_batch(compressible(3))
    with pytest.raises(KafkaError) as err:
        scan_records(data, HEADER_SIZE, len(data), 4)
    assert err.value.code == ErrorCode.invalid_record
    with pytest.raises(KafkaError):
        scan_records(data, HEADER_SIZE, len(data), 2)
    with pytest.raises(KafkaError):
        count_records(data, HEADER_SIZE, len(data) - 1)
    # Offset deltas must run 0..n-1.
    skewed = encode_records([Record(1, 0, b"a", b"b", []), Record(2, 0, b"a", b"b", [])])
    with pytest.raises(KafkaError) as err:
        scan_records(skewed, 0, len(skewed), 2)
    assert err.value.code == ErrorCode.invalid_record
    assert scan_records(skewed, 0, len(skewed), 2, check_offsets=False).count == 2


def test_deep_scan_checks_value_and_header_lengths() -> None:
    section = bytearray(encode_records([Record(0, 0, b"k", b"value", [])]))
    # value length 4 instead of 5: the record's own length still tiles the section
    section[6] = 2 * 4
    assert scan_records(section, 0, len(section), 1).count == 1
    with pytest.raises(KafkaError) as err:
        scan_records(section, 0, len(section), 1, deep=True)
    assert err.value.code == ErrorCode.invalid_record


# --- librdkafka as a reader -----------------------------------------------------------------


class _FetchOnlyBroker:
    """Just enough of a broker for a librdkafka consumer to fetch given batches.

    Answers ApiVersions (v3 layout), Metadata v1 and Fetch v4, hand-encoded, on a thread.
    """

    def __init__(self, topic: str, records: bytes, end_offset: int) -> None:
        import socket
        import threading

        self.topic, self.records, self.end = topic, records, end_offset
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    def _serve(self, conn: object) -> None:
        import socket

        assert isinstance(conn, socket.socket)
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                frame = conn.recv(size, socket.MSG_WAITALL)
                api_key, _version, corr = struct.unpack_from(">hhi", frame)
                (client_len,) = struct.unpack_from(">h", frame, 8)
                body_at = 10 + max(client_len, 0)
                if api_key == 18:
                    # v3 layout: error, compact array of (key, min, max, tags), throttle, tags
                    apis = [(18, 0, 3), (3, 1, 1), (1, 4, 4), (0, 3, 3)]
                    body = struct.pack(">hB", 0, len(apis) + 1)
                    body += b"".join(struct.pack(">hhhB", *a, 0) for a in apis)
                    body += struct.pack(">iB", 0, 0)
                elif api_key == 3:
                    body = struct.pack(">i", 1) + struct.pack(">i", 0)
                    body += self._string("127.0.0.1") + struct.pack(">ih", self.port, -1)
                    body += struct.pack(">ii", 0, 1) + struct.pack(">h", 0)
                    body += self._string(self.topic) + struct.pack(">?i", False, 1)
                    body += struct.pack(">hiii", 0, 0, 0, 1) + struct.pack(">ii", 0, 1)
                    body += struct.pack(">i", 0)
                elif api_key == 1:
                    pos = body_at + 17 + 4
                    (name_len,) = struct.unpack_from(">h", frame, pos)
                    (fetch_offset,) = struct.unpack_from(">q", frame, pos + 2 + name_len + 8)
                    data = self.records if fetch_offset < self.end else b""
                    body = struct.pack(">ii", 0, 1) + self._string(self.topic)
                    body += struct.pack(">iihqqi", 1, 0, 0, self.end, self.end, -1)
                    body += struct.pack(">i", len(data)) + data
                else:
                    return
                conn.sendall(struct.pack(">ii", len(body) + 4, corr) + body)

    def close(self) -> None:
        self.sock.close()


def test_librdkafka_consumes_our_batches_for_every_codec() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")

    records: list[tuple[int, tuple[bytes, bytes, list[tuple[str, bytes]], int]]] = []
    log = bytearray()
    for codec in CODECS:
        batch = [(b"k%d-%d" % (codec, i), b"codec %d record %d " % (codec, i) * 20
                  + bytes(range(256)) * (i % 200), [("c", b"%d" % codec)], T0 + i)
                 for i in range(150)]
        log += build_batch(batch, compression=codec, base_offset=len(records),
                           partition_leader_epoch=0)
        records += list(enumerate(batch, start=len(records)))
    broker = _FetchOnlyBroker("t", bytes(log), len(records))
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "g",
        "enable.auto.commit": False, "check.crcs": True, "log_level": 0})
    try:
        consumer.assign([confluent_kafka.TopicPartition("t", 0, 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < len(records) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), (msg.key(), msg.value(), msg.headers(),
                                       msg.timestamp()[1])))
    finally:
        consumer.close()
        broker.close()
    assert got == [(o, (k, v, h, ts)) for o, (k, v, h, ts) in records]
