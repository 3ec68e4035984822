"""The wire protocol over raw sockets: framing, headers, pipelining and bad input."""

from __future__ import annotations

import random
import socket
import time

import pytest

from e2e import wire
from e2e.support import unique
from e2e.wire import Conn, int16, int32

pytestmark = pytest.mark.timeout(120)

# APIs this broker step must advertise (Kafka 4.0 numbering).
REQUIRED_APIS = {
    wire.PRODUCE: "Produce", wire.FETCH: "Fetch", wire.LIST_OFFSETS: "ListOffsets",
    wire.METADATA: "Metadata", wire.API_VERSIONS: "ApiVersions",
    wire.CREATE_TOPICS: "CreateTopics", wire.DELETE_TOPICS: "DeleteTopics",
    wire.DELETE_RECORDS: "DeleteRecords", wire.INIT_PRODUCER_ID: "InitProducerId",
    wire.DESCRIBE_CONFIGS: "DescribeConfigs", wire.ALTER_CONFIGS: "AlterConfigs",
    wire.DESCRIBE_LOG_DIRS: "DescribeLogDirs", wire.CREATE_PARTITIONS: "CreatePartitions",
    wire.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    wire.DESCRIBE_CLUSTER: "DescribeCluster",
}


def api_versions_ok(bootstrap: str, correlation_id: int = 5) -> None:
    """A fresh connection still gets a correct ApiVersions answer."""
    with Conn(bootstrap) as conn:
        conn.send(wire.api_versions_request(0, correlation_id))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == correlation_id
        assert wire.parse_api_versions(reader, 0).error_code == wire.NONE


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version_has_v0_response_header(module_broker, version):
    with Conn(module_broker.bootstrap) as conn:
        conn.send(wire.api_versions_request(version, 1000 + version))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 1000 + version
        # Parsing consumes the body exactly: a tagged-field byte after the correlation id
        # (a v1 response header) would shift every field and fail here.
        response = wire.parse_api_versions(reader, version)
    assert response.error_code == wire.NONE
    assert response.throttle_time_ms == 0
    missing = {name for key, name in REQUIRED_APIS.items() if key not in response.versions}
    assert not missing, f"APIs not advertised: {sorted(missing)}"
    assert response.versions[wire.API_VERSIONS][0] == 0
    assert response.versions[wire.API_VERSIONS][1] >= 4
    for key, (low, high) in response.versions.items():
        assert 0 <= low <= high, f"api {key}: bad range {low}..{high}"


def test_api_versions_lists_agree_across_versions(module_broker):
    lists = []
    with Conn(module_broker.bootstrap) as conn:
        for version in range(5):
            conn.send(wire.api_versions_request(version, version))
            corr, reader = conn.recv_response(header_v1=False)
            assert corr == version
            lists.append(wire.parse_api_versions(reader, version).versions)
    assert all(found == lists[0] for found in lists)


def test_api_versions_unsupported_version_gets_v0_error_and_connection_stays(module_broker):
    body = wire.compact_string("e2e-wire") + wire.compact_string("1.0") + wire.TAGS
    with Conn(module_broker.bootstrap) as conn:
        conn.send(wire.request(wire.API_VERSIONS, 99, 4242, body, flexible=True))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 4242
        response = wire.parse_api_versions(reader, 0)  # KIP-511: always the v0 layout
        assert response.error_code == wire.UNSUPPORTED_VERSION
        low, high = response.versions[wire.API_VERSIONS]
        assert low == 0 and high >= 4
        # A client retries with a supported version on the same connection.
        conn.send(wire.api_versions_request(3, 4243))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 4243
        assert wire.parse_api_versions(reader, 3).error_code == wire.NONE


def test_pipelined_requests_answered_in_order(module_broker):
    versions = wire.fetch_api_versions(module_broker.bootstrap)
    wire.require_version(versions, wire.METADATA, 12)
    kinds = {}
    payload = b""
    for i in range(20):
        corr = 500 + i
        if i % 2:
            kinds[corr] = "metadata"
            payload += wire.metadata_request(corr, None)
        else:
            kinds[corr] = "api_versions"
            payload += wire.api_versions_request(3 if i % 4 else 0, corr)
    with Conn(module_broker.bootstrap) as conn:
        conn.send(payload)  # one write, twenty requests
        seen = []
        for i in range(20):
            expected = 500 + i
            corr, reader = conn.recv_response(header_v1=kinds[expected] == "metadata")
            seen.append(corr)
            assert corr == expected, f"response #{i} has correlation id {corr}, want {expected}"
            if kinds[corr] == "metadata":
                parsed = wire.parse_metadata_v12(reader)
                assert [b[0] for b in parsed.brokers], "metadata lists no broker"
            else:
                assert wire.parse_api_versions(reader, 3 if i % 4 else 0).error_code == 0
    assert seen == list(range(500, 520))


def test_unknown_api_key_closes_only_that_connection(module_broker):
    with Conn(module_broker.bootstrap) as bad, Conn(module_broker.bootstrap) as good:
        good.send(wire.api_versions_request(0, 1))
        assert good.recv_response(header_v1=False)[0] == 1
        bad.send(wire.request(9999, 0, 77, b"", flexible=False))
        assert bad.wait_closed(10), "connection with an unknown api key was not closed"
        good.send(wire.api_versions_request(3, 2))
        corr, reader = good.recv_response(header_v1=False)
        assert corr == 2
        assert wire.parse_api_versions(reader, 3).error_code == 0
    api_versions_ok(module_broker.bootstrap)


def test_unsupported_version_of_another_api_closes_connection(module_broker):
    """Only ApiVersions answers an unknown version (KIP-511); for other APIs Kafka closes."""
    with Conn(module_broker.bootstrap) as bad:
        bad.send(wire.request(wire.METADATA, 99, 78, wire.int32(-1), flexible=True))
        assert bad.wait_closed(10), "Metadata v99 did not close the connection"
    api_versions_ok(module_broker.bootstrap)


def test_frame_over_socket_request_max_bytes_closes_connection(broker_factory):
    broker = broker_factory({"socket.request.max.bytes": 1048576})
    with Conn(broker.bootstrap) as big, Conn(broker.bootstrap) as other:
        # Only the size and the start of the frame: the broker must refuse it from the size.
        big.send(int32(2 * 1024 * 1024) + int16(wire.API_VERSIONS) + int16(0) + int32(1)
                 + b"\x00" * 1024)
        assert big.wait_closed(10), "an oversized frame did not close the connection"
        other.send(wire.api_versions_request(0, 3))
        assert other.recv_response(header_v1=False)[0] == 3
    # A request just under the limit is still served.
    with Conn(broker.bootstrap) as conn:
        topic = unique("wire-big")
        wire.ensure_topic(conn, topic)
        batch = wire.record_batch([random.Random(3).randbytes(900_000)])
        result = wire.produce(conn, 9, topic, 0, batch)
        assert result.error_code == wire.NONE, result
        assert result.base_offset == 0
    api_versions_ok(broker.bootstrap)


GARBAGE = {
    "negative-size": int32(-5) + b"\x01\x02\x03",
    "unknown-negative-api-key": wire.frame(b"\xff\xfe" + bytes(range(30))),
    "header-cut-short": wire.frame(int16(wire.API_VERSIONS) + int16(0)),
    "client-id-overruns-frame": wire.frame(int16(wire.API_VERSIONS) + int16(0) + int32(1)
                                           + int16(500) + b"ab"),
    "empty-frame": int32(0),
    "random-bytes": random.Random(11).randbytes(64),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_closes_only_that_connection(module_broker, name):
    with Conn(module_broker.bootstrap) as bad, Conn(module_broker.bootstrap) as good:
        bad.send(GARBAGE[name])
        if name == "random-bytes":
            # The size read from random bytes may exceed what was sent: end the stream so the
            # broker sees a truncated frame at worst.
            bad.sock.shutdown(socket.SHUT_WR)
        assert bad.wait_closed(10), f"{name}: connection not closed"
        good.send(wire.api_versions_request(0, 8))
        assert good.recv_response(header_v1=False)[0] == 8
    api_versions_ok(module_broker.bootstrap)


def test_truncated_frame_then_eof_closes_connection(module_broker):
    with Conn(module_broker.bootstrap) as bad:
        full = wire.api_versions_request(3, 21)
        bad.send(full[: len(full) // 2])
        bad.sock.shutdown(socket.SHUT_WR)
        assert bad.wait_closed(10), "half a frame and EOF did not close the connection"
    api_versions_ok(module_broker.bootstrap)


def test_truncated_body_of_known_api_closes_connection(module_broker):
    """A complete frame whose Metadata body ends early: the broker cannot parse it."""
    full = wire.metadata_request(31, ["a-topic"])
    header_len = 4 + 2 + 2 + 4 + 2 + len(b"e2e-wire") + 1
    cut = wire.frame(full[4:header_len + 3])  # header plus three bytes of body
    with Conn(module_broker.bootstrap) as bad:
        bad.send(cut)
        assert bad.wait_closed(10), "an unparsable Metadata body did not close the connection"
    api_versions_ok(module_broker.bootstrap)


def test_trailing_bytes_after_a_request_body_are_ignored(module_broker):
    """Kafka parses the fields it knows and ignores the rest of the frame. librdkafka relies on
    it: its Metadata v9+ request for all topics carries three stray zero bytes."""
    full = wire.metadata_request(41, None)
    with Conn(module_broker.bootstrap) as conn:
        conn.send(wire.frame(full[4:] + b"\x01\x00\x00"))
        corr, reader = conn.recv_response(header_v1=True)
        assert corr == 41
        assert wire.parse_metadata_v12(reader).brokers
        conn.send(wire.frame(wire.api_versions_request(0, 42)[4:] + b"\x00\x00\x00\x00"))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 42
        assert wire.parse_api_versions(reader, 0).error_code == wire.NONE


def test_produce_acks0_has_no_response_and_connection_keeps_working(module_broker):
    versions = wire.fetch_api_versions(module_broker.bootstrap)
    for key, version in ((wire.PRODUCE, 9), (wire.FETCH, 11), (wire.LIST_OFFSETS, 6)):
        wire.require_version(versions, key, version)
    topic = unique("wire-acks0")
    value = b"fire and forget \x00\xff"
    with Conn(module_broker.bootstrap) as conn:
        wire.ensure_topic(conn, topic)
        batch = wire.record_batch([value], keys=[b"k0"])
        conn.send(wire.produce_request(61, topic, 0, batch, acks=0)
                  + wire.api_versions_request(0, 62))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 62, f"first response has correlation id {corr}; acks=0 must not answer"
        wire.parse_api_versions(reader, 0)
        with pytest.raises(TimeoutError):
            conn.recv_frame(timeout=0.5)
        # The record was written.
        deadline = time.monotonic() + 10
        while True:
            error, _, latest = wire.list_offset(conn, 63, topic, 0, wire.LATEST_TIMESTAMP)
            assert error == wire.NONE
            if latest == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert latest == 1
        error, high_watermark, data = wire.fetch(conn, 64, topic, 0, 0)
        assert error == wire.NONE and high_watermark == 1
        batches = wire.parse_batches(data)
        assert len(batches) == 1 and batches[0].crc_ok
        assert batches[0].records == [(0, b"k0", value)]


def test_produce_acks0_with_error_closes_connection(module_broker):
    """Kafka closes an acks=0 connection when the produce fails: it is the only signal."""
    with Conn(module_broker.bootstrap) as conn:
        batch = wire.record_batch([b"nowhere"])
        conn.send(wire.produce_request(71, unique("wire-missing"), 0, batch, acks=0))
        assert conn.wait_closed(10), "failed acks=0 produce did not close the connection"
    api_versions_ok(module_broker.bootstrap)


def test_produce_with_bad_crc_is_corrupt_message(module_broker):
    topic = unique("wire-crc")
    with Conn(module_broker.bootstrap) as conn:
        wire.ensure_topic(conn, topic)
        batch = bytearray(wire.record_batch([b"payload"]))
        batch[-1] ^= 0xFF  # flip a byte covered by the CRC
        result = wire.produce(conn, 81, topic, 0, bytes(batch))
        assert result.error_code == wire.CORRUPT_MESSAGE, result
        # The connection survives an error response and nothing was appended.
        error, _, latest = wire.list_offset(conn, 82, topic, 0, wire.LATEST_TIMESTAMP)
        assert (error, latest) == (wire.NONE, 0)
        good = wire.produce(conn, 83, topic, 0, wire.record_batch([b"ok"]))
        assert (good.error_code, good.base_offset) == (wire.NONE, 0)


def test_fetch_errors_for_bad_offsets_and_partitions(module_broker):
    topic = unique("wire-fetch-errors")
    with Conn(module_broker.bootstrap) as conn:
        wire.ensure_topic(conn, topic)
        assert wire.produce(conn, 91, topic, 0, wire.record_batch([b"a", b"b"])).error_code == 0
        error, high_watermark, data = wire.fetch(conn, 92, topic, 0, 50)
        assert (error, data) == (wire.OFFSET_OUT_OF_RANGE, b"")
        error, _, _ = wire.fetch(conn, 93, topic, 7, 0)
        assert error == wire.UNKNOWN_TOPIC_OR_PARTITION
        error, _, _ = wire.list_offset(conn, 94, topic, 7, wire.LATEST_TIMESTAMP)
        assert error == wire.UNKNOWN_TOPIC_OR_PARTITION
        result = wire.produce(conn, 95, topic, 7, wire.record_batch([b"c"]))
        assert result.error_code == wire.UNKNOWN_TOPIC_OR_PARTITION
        # Fetching at the high watermark is not an error: it is simply empty.
        error, high_watermark, data = wire.fetch(conn, 96, topic, 0, 2)
        assert (error, high_watermark, data) == (wire.NONE, 2, b"")


def test_fetch_v4_the_oldest_version_is_served(module_broker):
    """Fetch v4 (no leader epoch, no log start offset, no sessions) is the oldest version
    Kafka 4 serves; a request without the newer fields is answered, not an internal error."""
    topic = unique("wire-fetch-v4")
    with Conn(module_broker.bootstrap) as conn:
        wire.ensure_topic(conn, topic)
        assert wire.produce(conn, 111, topic, 0, wire.record_batch([b"a", b"b"])).error_code == 0
        part = wire.int32(0) + wire.int64(0) + wire.int32(1 << 20)
        body = (wire.int32(-1) + wire.int32(100) + wire.int32(1) + wire.int32(1 << 20)
                + wire.int8(0) + wire.array([wire.string(topic) + wire.array([part])]))
        conn.send(wire.request(wire.FETCH, 4, 112, body, flexible=False))
        corr, reader = conn.recv_response(header_v1=False)
        assert corr == 112
        reader.int32()  # throttle
        assert reader.array_len() == 1 and reader.string() == topic
        assert reader.array_len() == 1 and reader.int32() == 0
        error_code, high_watermark, last_stable = reader.int16(), reader.int64(), reader.int64()
        assert (error_code, high_watermark, last_stable) == (wire.NONE, 2, 2)
        assert reader.array_len() in (-1, 0)  # no aborted transactions
        batches = wire.parse_batches(reader.nullable_bytes() or b"")
        reader.done()
        assert [value for _, _, value in batches[0].records] == [b"a", b"b"]


def test_fetch_waits_for_data_up_to_max_wait(module_broker):
    """A fetch with nothing to return is held for max_wait_ms, and answered as soon as
    a record arrives, as Kafka's delayed fetch does."""
    topic = unique("wire-longpoll")
    with Conn(module_broker.bootstrap) as conn, Conn(module_broker.bootstrap) as producer:
        wire.ensure_topic(conn, topic)
        started = time.monotonic()
        conn.send(wire.fetch_request(101, topic, 0, 0, max_wait_ms=1500))
        corr, _ = conn.recv_response(header_v1=False, timeout=10)
        waited = time.monotonic() - started
        assert corr == 101
        assert waited >= 1.2, f"an empty fetch was answered after {waited:.2f} s, not held"

        started = time.monotonic()
        conn.send(wire.fetch_request(102, topic, 0, 0, max_wait_ms=5000))
        time.sleep(0.3)
        assert wire.produce(producer, 103, topic, 0, wire.record_batch([b"wake"])).error_code == 0
        corr, reader = conn.recv_response(header_v1=False, timeout=10)
        waited = time.monotonic() - started
        assert corr == 102
        assert waited < 3.0, f"the fetch was answered {waited:.2f} s after its start"
        assert b"wake" in reader.data
