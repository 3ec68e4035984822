"""Wire encoding: headers, the version-fitting builder, and the hand-written Fetch response
checked against kio's decoder (generated from Kafka's schemas) for every version."""

import struct
import uuid

import pytest
from kio.serial import entity_reader

from moldau.broker.handlers.fetch_response import PartitionData, TopicData, encode_fetch_response
from moldau.broker.log.log import FileSlice
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import (
    MalformedRequest,
    decode_request,
    encode_request,
    encode_response,
    parse_header,
    request_class,
    response_class,
)


def flatten(response):
    out = bytearray()
    for part in response.parts:
        if isinstance(part, bytes):
            out += part
        else:
            part.file.seek(part.position)
            out += part.file.read(part.size)
    return bytes(out)


def decode_response(api_key, version, frame, flexible_header):
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    (correlation_id,) = struct.unpack_from(">i", frame, 4)
    offset = 8 + (1 if flexible_header else 0)
    body, used = entity_reader(response_class(api_key, version))(frame, offset)
    assert offset + used == len(frame)
    return correlation_id, body


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17])
def test_fetch_response_matches_kafka_schema(tmp_path, version):
    payload = b"A" * 100 + b"B" * 50
    path = tmp_path / "segment.log"
    path.write_bytes(b"junk" + payload + b"tail")
    topic_id = uuid.uuid4()
    with open(path, "rb") as segment:
        topics = [TopicData("orders", topic_id, [
            PartitionData(0, 0, 10, 10, 0, [FileSlice(segment, 4, 100),
                                            FileSlice(segment, 104, 50)]),
            PartitionData(1, ErrorCode.offset_out_of_range.value, 5, 5, 2, [], []),
        ])]
        frame = flatten(encode_fetch_response(version, 42, topics))
    correlation_id, body = decode_response(1, version, frame, version >= 12)
    assert correlation_id == 42
    [topic] = body.responses
    if version >= 13:
        assert topic.topic_id == topic_id
    else:
        assert topic.topic == "orders"
    first, second = topic.partitions
    assert first.records == payload
    assert first.high_watermark == 10
    if version >= 5:
        assert first.log_start_offset == 0
    assert first.aborted_transactions is None
    assert second.error_code is ErrorCode.offset_out_of_range
    assert second.aborted_transactions == ()
    assert second.records in (b"", None)


@pytest.mark.parametrize("version", [0, 1, 5, 9, 12])
def test_build_fits_each_version(version):
    data = {"brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "topic_id": uuid.uuid4(),
                        "partitions": [{"partition_index": 0, "leader_id": 1,
                                        "leader_epoch": 3, "replica_nodes": [1],
                                        "isr_nodes": [1]}]}]}
    body = build(response_class(3, version), data)
    frame = encode_response(7, body)
    _, decoded = decode_response(3, version, frame, version >= 9)
    assert decoded.brokers[0].host == "h"
    assert decoded.topics[0].partitions[0].partition_index == 0
    if version >= 7:
        assert decoded.topics[0].partitions[0].leader_epoch == 3


def test_api_versions_response_uses_header_v0_even_when_flexible():
    body = build(response_class(18, 3), {"error_code": 0, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 4}]})
    frame = encode_response(9, body, header_v0=True)
    _, decoded = decode_response(18, 3, frame, flexible_header=False)
    assert decoded.api_keys[0].max_version == 4


@pytest.mark.parametrize("version", [0, 3])
def test_request_round_trip_and_header(version):
    body = build(request_class(18, version), {"client_software_name": "moldau-test",
                                              "client_software_version": "1.0"})
    frame = encode_request(18, version, 5, "client-1", body)[4:]
    header = parse_header(frame, flexible=version >= 3)
    assert (header.api_key, header.api_version, header.correlation_id,
            header.client_id) == (18, version, 5, "client-1")
    decoded = decode_request(18, version, frame, header.size)
    if version >= 3:
        assert decoded.client_software_name == "moldau-test"


def test_truncated_is_malformed_but_trailing_bytes_are_ignored_as_kafka_does():
    body = build(request_class(3, 12), {"topics": None, "allow_auto_topic_creation": True})
    frame = encode_request(3, 12, 1, None, body)[4:]
    header = parse_header(frame, flexible=True)
    with pytest.raises(MalformedRequest):
        decode_request(3, 12, frame[:-1], header.size)
    assert decode_request(3, 12, frame + b"\1\0\0", header.size).topics is None
    with pytest.raises(MalformedRequest):
        parse_header(frame[:7], flexible=True)


def test_none_becomes_empty_where_a_version_cannot_carry_null():
    old = build(response_class(11, 5), {"error_code": 25, "protocol_name": None,
                                        "member_id": "", "leader": ""})
    new = build(response_class(11, 7), {"error_code": 25, "protocol_name": None,
                                        "member_id": "", "leader": ""})
    assert old.protocol_name == ""
    assert new.protocol_name is None
    encode_response(1, old)


def test_null_in_a_non_nullable_array_is_malformed():
    # Produce v9: transactional_id (null), acks, timeout, topic_data as a null compact array.
    body = b"\x00" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x00" + b"\x00"
    frame = b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff\x00" + body
    header = parse_header(frame, flexible=True)
    with pytest.raises(MalformedRequest, match="topic_data"):
        decode_request(0, 9, frame, header.size)
