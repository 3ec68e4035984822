"""Kafka wire protocol by hand: framing, primitive types, a few requests and their responses.

Nothing here comes from a Kafka client library: every request is built with `struct`, every
response is parsed field by field, and a parser that does not consume a response body exactly
raises, so a misplaced byte (say, a tagged-field byte in a v0 response header) is caught.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import struct
import time
from dataclasses import dataclass, field

# API keys used by the tests.
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
WRITE_TXN_MARKERS = 27
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60

# Error codes.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
NOT_ENOUGH_REPLICAS = 19
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_TRANSACTION_TIMEOUT = 50
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


# --------------------------------------------------------------------------- encoding


def int8(v: int) -> bytes:
    return struct.pack(">b", v)


def int16(v: int) -> bytes:
    return struct.pack(">h", v)


def int32(v: int) -> bytes:
    return struct.pack(">i", v)


def int64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(v: int) -> bytes:
    """Zig-zag signed varint (record fields)."""
    return uvarint((v << 1) ^ (v >> 63))


def string(s: str | None) -> bytes:
    if s is None:
        return int16(-1)
    raw = s.encode()
    return int16(len(raw)) + raw


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def nullable_bytes(b: bytes | None) -> bytes:
    if b is None:
        return int32(-1)
    return int32(len(b)) + b


def compact_bytes(b: bytes | None) -> bytes:
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def array(items: list[bytes]) -> bytes:
    return int32(len(items)) + b"".join(items)


def compact_array(items: list[bytes] | None) -> bytes:
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


TAGS = b"\x00"  # an empty tagged-field section


def frame(payload: bytes) -> bytes:
    return int32(len(payload)) + payload


def request(api_key: int, version: int, correlation_id: int, body: bytes, *,
            flexible: bool, client_id: str | None = "e2e-wire") -> bytes:
    """A whole frame: size, request header v1 (or v2 when flexible), body."""
    header = int16(api_key) + int16(version) + int32(correlation_id) + string(client_id)
    if flexible:
        header += TAGS
    return frame(header + body)


# --------------------------------------------------------------------------- decoding


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"read of {n} bytes at {self.pos} overruns {len(self.data)} bytes")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def boolean(self) -> bool:
        return self.take(1) != b"\x00"

    def uuid(self) -> bytes:
        return self.take(16)

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1)

    def array_len(self) -> int:
        return self.int32()

    def compact_array_len(self) -> int:
        return self.uvarint() - 1

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def done(self) -> None:
        if self.remaining():
            raise ValueError(f"{self.remaining()} unparsed trailing bytes: "
                             f"{self.data[self.pos:self.pos + 32].hex()}")


# --------------------------------------------------------------------------- connection


class Closed(Exception):
    """The broker closed the connection."""


class Conn:
    """A blocking loopback connection that sends frames and reads whole response frames."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int, deadline: float) -> None:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete frame within {self.timeout} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError as exc:
                raise Closed("connection reset") from exc
            except TimeoutError as exc:
                raise TimeoutError(f"no complete frame within {self.timeout} s") from exc
            if not chunk:
                raise Closed("connection closed by the broker")
            self.buf += chunk

    def recv_frame(self, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._fill(4, deadline)
        size = struct.unpack(">i", self.buf[:4])[0]
        self._fill(4 + size, deadline)
        payload = self.buf[4:4 + size]
        self.buf = self.buf[4 + size:]
        return payload

    def recv_response(self, *, header_v1: bool, timeout: float | None = None
                      ) -> tuple[int, Reader]:
        """(correlation id, reader over the body). header_v1: the header has tagged fields."""
        reader = Reader(self.recv_frame(timeout))
        correlation_id = reader.int32()
        if header_v1:
            reader.tags()
        return correlation_id, reader

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True if the broker closes the connection within `timeout` (any data is discarded)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
            if not chunk:
                return True


# --------------------------------------------------------------------------- ApiVersions


def api_versions_request(version: int, correlation_id: int) -> bytes:
    if version >= 3:
        body = compact_string("e2e-wire") + compact_string("1.0") + TAGS
        return request(API_VERSIONS, version, correlation_id, body, flexible=True)
    return request(API_VERSIONS, version, correlation_id, b"", flexible=False)


@dataclass
class ApiVersionsResponse:
    error_code: int
    versions: dict[int, tuple[int, int]]
    throttle_time_ms: int = 0
    tags: dict[int, bytes] = field(default_factory=dict)


def parse_api_versions(reader: Reader, version: int) -> ApiVersionsResponse:
    """Parse an ApiVersions body of `version` exactly (the header is always v0)."""
    error_code = reader.int16()
    versions = {}
    if version >= 3:
        for _ in range(reader.compact_array_len()):
            key, low, high = reader.int16(), reader.int16(), reader.int16()
            reader.tags()
            versions[key] = (low, high)
    else:
        for _ in range(reader.array_len()):
            key, low, high = reader.int16(), reader.int16(), reader.int16()
            versions[key] = (low, high)
    throttle = reader.int32() if version >= 1 else 0
    tags = reader.tags() if version >= 3 else {}
    reader.done()
    return ApiVersionsResponse(error_code, versions, throttle, tags)


def fetch_api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    with Conn(bootstrap) as conn:
        conn.send(api_versions_request(0, 1))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 1
        response = parse_api_versions(reader, 0)
        assert response.error_code == NONE
        return response.versions


def require_version(versions: dict[int, tuple[int, int]], api_key: int, version: int) -> None:
    """Fail (not skip) if the broker does not support `version` of `api_key`, as Kafka 4.0 does."""
    assert api_key in versions, f"api key {api_key} not advertised: {sorted(versions)}"
    low, high = versions[api_key]
    assert low <= version <= high, (
        f"api key {api_key} v{version} not in the advertised range {low}..{high}")


# --------------------------------------------------------------------------- Metadata v12


def metadata_request(correlation_id: int, topics: list[str] | None,
                     allow_auto_create: bool = False) -> bytes:
    """Metadata v12 (flexible). topics=None asks for all topics."""
    entries = None
    if topics is not None:
        entries = [b"\x00" * 16 + compact_string(name) + TAGS for name in topics]
    body = compact_array(entries) + int8(int(allow_auto_create)) + int8(0) + TAGS
    return request(METADATA, 12, correlation_id, body, flexible=True)


@dataclass
class PartitionMeta:
    error_code: int
    index: int
    leader: int


@dataclass
class TopicMeta:
    error_code: int
    name: str | None
    partitions: list[PartitionMeta]


@dataclass
class MetadataResponse:
    brokers: list[tuple[int, str, int]]
    cluster_id: str | None
    controller_id: int
    topics: dict[str | None, TopicMeta]


def parse_metadata_v12(reader: Reader) -> MetadataResponse:
    reader.int32()  # throttle
    brokers = []
    for _ in range(reader.compact_array_len()):
        node_id, host, port = reader.int32(), reader.compact_string(), reader.int32()
        reader.compact_string()  # rack
        reader.tags()
        brokers.append((node_id, host, port))
    cluster_id = reader.compact_string()
    controller_id = reader.int32()
    topics = {}
    for _ in range(reader.compact_array_len()):
        error_code = reader.int16()
        name = reader.compact_string()
        reader.uuid()
        reader.boolean()
        partitions = []
        for _ in range(reader.compact_array_len()):
            p_error, index, leader = reader.int16(), reader.int32(), reader.int32()
            reader.int32()  # leader epoch
            for _ in range(3):  # replicas, isr, offline replicas
                for _ in range(reader.compact_array_len()):
                    reader.int32()
            reader.tags()
            partitions.append(PartitionMeta(p_error, index, leader))
        reader.int32()  # authorized operations
        reader.tags()
        topics[name] = TopicMeta(error_code, name, partitions)
    reader.tags()
    reader.done()
    return MetadataResponse(brokers, cluster_id, controller_id, topics)


def metadata(conn: Conn, correlation_id: int, topics: list[str] | None,
             allow_auto_create: bool = False) -> MetadataResponse:
    conn.send(metadata_request(correlation_id, topics, allow_auto_create))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    return parse_metadata_v12(reader)


def ensure_topic(conn: Conn, topic: str, timeout: float = 15.0) -> TopicMeta:
    """Auto-create `topic` through Metadata and wait until every partition has a leader."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = metadata(conn, 7, [topic], allow_auto_create=True).topics.get(topic)
        if (last is not None and last.error_code == NONE and last.partitions
                and all(p.error_code == NONE and p.leader >= 0 for p in last.partitions)):
            return last
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready: {last}")


# --------------------------------------------------------------------------- record batches

_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: list[tuple[str, bytes | None]] = ()) -> bytes:
    body = int8(0) + varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for name, hvalue in headers:
        raw = name.encode()
        body += varint(len(raw)) + raw
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body)) + body


def record_batch(values: list[bytes], *, base_timestamp: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 keys: list[bytes | None] | None = None, gzip_records: bool = False,
                 transactional: bool = False) -> bytes:
    """A magic-2 batch with base offset 0, as a producer sends it (uncompressed or gzip)."""
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    keys = keys or [None] * len(values)
    records = b"".join(encode_record(i, i, keys[i], v) for i, v in enumerate(values))
    if gzip_records:
        records = gzip.compress(records, mtime=0)
    attributes = (1 if gzip_records else 0) | (0x10 if transactional else 0)
    after_crc = (int16(attributes) + int32(len(values) - 1) + int64(base_timestamp)
                 + int64(base_timestamp + len(values) - 1) + int64(producer_id)
                 + int16(producer_epoch) + int32(base_sequence) + int32(len(values)) + records)
    crc = struct.pack(">I", crc32c(after_crc))
    after_length = int32(-1) + int8(2) + crc + after_crc
    return int64(0) + int32(len(after_length)) + after_length


@dataclass
class Batch:
    base_offset: int
    last_offset_delta: int
    attributes: int
    base_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    crc_ok: bool
    records: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value), uncompressed only


def parse_batches(data: bytes) -> list[Batch]:
    """Parse magic-2 batches (records decoded only when uncompressed)."""
    out = []
    reader = Reader(data)
    while reader.remaining() >= 12:
        base_offset = reader.int64()
        length = reader.int32()
        if reader.remaining() < length:
            break  # a partial batch at the end of a fetch response is allowed
        body = Reader(reader.take(length))
        body.int32()  # partition leader epoch
        magic = body.int8()
        assert magic == 2, f"magic {magic}"
        crc = body.uint32()
        rest = body.data[body.pos:]
        attributes = body.int16()
        last_offset_delta = body.int32()
        base_timestamp = body.int64()
        body.int64()
        producer_id = body.int64()
        producer_epoch = body.int16()
        base_sequence = body.int32()
        count = body.int32()
        records = []
        if attributes & 0x7 == 0:
            for _ in range(count):
                size = body.varint()
                record = Reader(body.take(size))
                record.int8()
                record.varint()
                offset_delta = record.varint()
                klen = record.varint()
                key = None if klen < 0 else record.take(klen)
                vlen = record.varint()
                value = None if vlen < 0 else record.take(vlen)
                records.append((base_offset + offset_delta, key, value))
        out.append(Batch(base_offset, last_offset_delta, attributes, base_timestamp, producer_id,
                         producer_epoch, base_sequence, count, crc32c(rest) == crc, records))
    return out


# --------------------------------------------------------------------------- Produce v9


def produce_request(correlation_id: int, topic: str, partition: int, batch: bytes, *,
                    acks: int = 1, timeout_ms: int = 10000,
                    transactional_id: str | None = None) -> bytes:
    partition_data = int32(partition) + compact_bytes(batch) + TAGS
    topic_data = compact_string(topic) + compact_array([partition_data]) + TAGS
    body = (compact_string(transactional_id) + int16(acks) + int32(timeout_ms)
            + compact_array([topic_data]) + TAGS)
    return request(PRODUCE, 9, correlation_id, body, flexible=True)


@dataclass
class ProducePartition:
    index: int
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None


def parse_produce_v9(reader: Reader) -> dict[tuple[str, int], ProducePartition]:
    out = {}
    for _ in range(reader.compact_array_len()):
        name = reader.compact_string()
        for _ in range(reader.compact_array_len()):
            index, error_code = reader.int32(), reader.int16()
            base_offset, append_time, start = reader.int64(), reader.int64(), reader.int64()
            for _ in range(reader.compact_array_len()):
                reader.int32()
                reader.compact_string()
                reader.tags()
            message = reader.compact_string()
            reader.tags()
            out[(name, index)] = ProducePartition(index, error_code, base_offset, append_time,
                                                  start, message)
        reader.tags()
    reader.int32()  # throttle
    reader.tags()
    reader.done()
    return out


def produce(conn: Conn, correlation_id: int, topic: str, partition: int, batch: bytes,
            acks: int = 1, transactional_id: str | None = None) -> ProducePartition:
    conn.send(produce_request(correlation_id, topic, partition, batch, acks=acks,
                              transactional_id=transactional_id))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id, (corr, correlation_id)
    return parse_produce_v9(reader)[(topic, partition)]


# --------------------------------------------------------------------------- ListOffsets v6


def list_offsets_request(correlation_id: int, topic: str, partition: int, timestamp: int,
                         isolation_level: int = READ_UNCOMMITTED) -> bytes:
    part = int32(partition) + int32(-1) + int64(timestamp) + TAGS
    topics = compact_array([compact_string(topic) + compact_array([part]) + TAGS])
    body = int32(-1) + int8(isolation_level) + topics + TAGS
    return request(LIST_OFFSETS, 6, correlation_id, body, flexible=True)


def list_offset(conn: Conn, correlation_id: int, topic: str, partition: int,
                timestamp: int, isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int, int]:
    """(error code, timestamp, offset) for one partition."""
    conn.send(list_offsets_request(correlation_id, topic, partition, timestamp,
                                   isolation_level))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    reader.int32()
    result = None
    for _ in range(reader.compact_array_len()):
        reader.compact_string()
        for _ in range(reader.compact_array_len()):
            reader.int32()
            error_code, ts, offset = reader.int16(), reader.int64(), reader.int64()
            reader.int32()
            reader.tags()
            result = (error_code, ts, offset)
        reader.tags()
    reader.tags()
    reader.done()
    assert result is not None
    return result


# --------------------------------------------------------------------------- Fetch v11


def fetch_request(correlation_id: int, topic: str, partition: int, offset: int,
                  max_bytes: int = 4 * 1024 * 1024, max_wait_ms: int = 100,
                  isolation_level: int = READ_UNCOMMITTED) -> bytes:
    """Fetch v11 (the newest non-flexible version) without a fetch session."""
    part = int32(partition) + int32(-1) + int64(offset) + int64(-1) + int32(max_bytes)
    body = (int32(-1) + int32(max_wait_ms) + int32(1) + int32(max_bytes) + int8(isolation_level)
            + int32(0) + int32(-1)  # session id 0, epoch -1: a sessionless full fetch
            + array([string(topic) + array([part])]) + array([]) + string(""))
    return request(FETCH, 11, correlation_id, body, flexible=False)


@dataclass
class FetchPartition:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None  # (producer id, first offset); None when null
    records: bytes


def fetch(conn: Conn, correlation_id: int, topic: str, partition: int, offset: int
          ) -> tuple[int, int, bytes]:
    """(error code, high watermark, record bytes) for one partition, Fetch v11."""
    got = fetch_partition(conn, correlation_id, topic, partition, offset)
    return got.error_code, got.high_watermark, got.records


def fetch_partition(conn: Conn, correlation_id: int, topic: str, partition: int, offset: int,
                    isolation_level: int = READ_UNCOMMITTED) -> FetchPartition:
    """One partition's whole answer to a Fetch v11."""
    conn.send(fetch_request(correlation_id, topic, partition, offset,
                            isolation_level=isolation_level))
    corr, reader = conn.recv_response(header_v1=False)
    assert corr == correlation_id
    reader.int32()  # throttle
    top_error, session_id = reader.int16(), reader.int32()
    assert top_error == NONE, f"fetch error {top_error}"
    assert session_id == 0, f"fetch session {session_id} created for a sessionless fetch"
    result = None
    for _ in range(reader.array_len()):
        reader.string()
        for _ in range(reader.array_len()):
            reader.int32()
            error_code, high_watermark = reader.int16(), reader.int64()
            last_stable_offset = reader.int64()
            reader.int64()  # log start offset
            count = reader.array_len()
            aborted = None if count < 0 else [(reader.int64(), reader.int64())
                                              for _ in range(count)]
            reader.int32()  # preferred read replica
            records = reader.nullable_bytes() or b""
            result = FetchPartition(error_code, high_watermark, last_stable_offset, aborted,
                                    records)
    reader.done()
    assert result is not None
    return result


def fetch_all_batches(bootstrap: str, topic: str, partition: int = 0) -> list[Batch]:
    """Every batch of a partition from its log start to its high watermark."""
    batches: list[Batch] = []
    with Conn(bootstrap) as conn:
        error, _, start = list_offset(conn, 1, topic, partition, EARLIEST_TIMESTAMP)
        assert error == NONE
        offset = start
        for corr in range(2, 10000):
            error, high_watermark, data = fetch(conn, corr, topic, partition, offset)
            assert error == NONE, f"fetch error {error}"
            if offset >= high_watermark:
                return batches
            got = [b for b in parse_batches(data) if b.base_offset + b.last_offset_delta >= offset]
            assert got, f"fetch at {offset} below high watermark {high_watermark} returned nothing"
            batches.extend(got)
            offset = got[-1].base_offset + got[-1].last_offset_delta + 1
    raise AssertionError("too many fetches")


# --------------------------------------------------------------------------- InitProducerId v4


def init_producer_id(conn: Conn, correlation_id: int, transactional_id: str | None = None,
                     *, timeout_ms: int = 60000) -> tuple[int, int, int]:
    """(error code, producer id, epoch) for an idempotent producer, or a transactional one
    when `transactional_id` is given."""
    conn.send(init_producer_id_request(correlation_id, transactional_id, timeout_ms))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    reader.int32()
    error_code, producer_id, epoch = reader.int16(), reader.int64(), reader.int16()
    reader.tags()
    reader.done()
    return error_code, producer_id, epoch


# --------------------------------------------------------------------------- WriteTxnMarkers v1


@dataclass
class TxnMarker:
    producer_id: int
    producer_epoch: int
    commit: bool
    topics: dict[str, list[int]]
    coordinator_epoch: int = 0


def write_txn_markers(conn: Conn, correlation_id: int, markers: list[TxnMarker]
                      ) -> dict[tuple[int, str, int], int]:
    """Error code per (producer id, topic, partition), as the coordinator sends markers."""
    encoded = []
    for m in markers:
        topics = [compact_string(name) + compact_array([int32(p) for p in parts]) + TAGS
                  for name, parts in m.topics.items()]
        encoded.append(int64(m.producer_id) + int16(m.producer_epoch) + int8(int(m.commit))
                       + compact_array(topics) + int32(m.coordinator_epoch) + TAGS)
    conn.send(request(WRITE_TXN_MARKERS, 1, correlation_id, compact_array(encoded) + TAGS,
                      flexible=True))
    corr, reader = conn.recv_response(header_v1=True, timeout=60)
    assert corr == correlation_id
    out = {}
    for _ in range(reader.compact_array_len()):
        producer_id = reader.int64()
        for _ in range(reader.compact_array_len()):
            name = reader.compact_string()
            for _ in range(reader.compact_array_len()):
                index, error_code = reader.int32(), reader.int16()
                reader.tags()
                out[(producer_id, name, index)] = error_code
            reader.tags()
        reader.tags()
    reader.tags()
    reader.done()
    return out


# --------------------------------------------------------------------------- other seeds


def describe_configs_request(correlation_id: int, topic: str) -> bytes:
    """DescribeConfigs v4 (flexible) for one topic, all keys."""
    resource = int8(2) + compact_string(topic) + compact_array(None) + TAGS
    body = compact_array([resource]) + int8(0) + int8(0) + TAGS
    return request(DESCRIBE_CONFIGS, 4, correlation_id, body, flexible=True)


def describe_cluster_request(correlation_id: int) -> bytes:
    """DescribeCluster v0 (flexible)."""
    return request(DESCRIBE_CLUSTER, 0, correlation_id, int8(0) + TAGS, flexible=True)


def init_producer_id_request(correlation_id: int, transactional_id: str | None = None,
                             timeout_ms: int = 60000) -> bytes:
    body = compact_string(transactional_id) + int32(timeout_ms) + int64(-1) + int16(-1) + TAGS
    return request(INIT_PRODUCER_ID, 4, correlation_id, body, flexible=True)


# --------------------------------------------------------------------------- EndTxn v1 / v3

END_TXN = 26
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90


def end_txn(conn: Conn, correlation_id: int, version: int, transactional_id: str,
            producer_id: int, producer_epoch: int, commit: bool) -> int:
    """EndTxn v1 (classic encoding) or v3 (flexible); the error code."""
    flexible = version >= 3
    body = ((compact_string(transactional_id) if flexible else string(transactional_id))
            + int64(producer_id) + int16(producer_epoch) + int8(int(commit))
            + (TAGS if flexible else b""))
    conn.send(request(END_TXN, version, correlation_id, body, flexible=flexible))
    corr, reader = conn.recv_response(header_v1=flexible)
    assert corr == correlation_id
    reader.int32()
    return reader.int16()


# --------------------------------------------------------------------------- FindCoordinator v1

FIND_COORDINATOR = 10
TRANSACTION_KEY = 1


def find_coordinator(conn: Conn, correlation_id: int, key: str, key_type: int
                     ) -> tuple[int, int, int]:
    """(error code, node id, port) of the coordinator of a group (0) or transactional id (1)."""
    conn.send(request(FIND_COORDINATOR, 1, correlation_id, string(key) + int8(key_type),
                      flexible=False))
    corr, reader = conn.recv_response(header_v1=False)
    assert corr == correlation_id
    reader.int32()
    error = reader.int16()
    reader.string()  # error message
    node_id = reader.int32()
    reader.string()  # host
    return error, node_id, reader.int32()
