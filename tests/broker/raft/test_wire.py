"""The quorum's messages through real Kafka bytes, in every supported version."""

import io
import random
import struct

import pytest
from harness import Cluster
from kio.serial import entity_reader, entity_writer

from moldau.broker.raft import wire
from moldau.broker.raft.log import LogEntry, OffsetAndEpoch
from moldau.broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    NOT_LEADER_OR_FOLLOWER,
    SNAPSHOT_NOT_FOUND,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from moldau.protocol.build import build
from moldau.protocol.messages import (
    decode_request,
    encode_request,
    encode_response,
    is_flexible_request,
    parse_header,
    request_class,
    response_class,
)
from moldau.records.batch import CONTROL_FLAG
from moldau.records.codec import decode_records, iter_batches

VOTE = VoteRequest(src=1, dst=2, candidate_epoch=5, candidate_id=1, last_offset_epoch=4,
                   last_offset=10)
BEGIN = BeginQuorumEpochRequest(src=1, dst=3, leader_id=1, leader_epoch=5)
END = EndQuorumEpochRequest(src=1, dst=2, leader_id=1, leader_epoch=5,
                            preferred_successors=(3, 2))
FETCH = FetchRequest(src=2, dst=1, replica_id=2, current_leader_epoch=5, fetch_offset=7,
                     last_fetched_epoch=4, max_wait_ms=500)
FETCH_SNAPSHOT = FetchSnapshotRequest(src=3, dst=1, replica_id=3, current_leader_epoch=5,
                                      snapshot_id=OffsetAndEpoch(10, 3), position=4,
                                      max_bytes=1 << 20)
REQUESTS = [VOTE, BEGIN, END, FETCH, FETCH_SNAPSHOT]

RECORDS = (LogEntry(7, 4, b"a"), LogEntry(8, 5, b"leader-change", True), LogEntry(9, 5, b"x"),
           LogEntry(10, 5, b""), LogEntry(11, 6, b"y" * 300))
RESPONSES = [
    (VOTE, VoteResponse(src=2, dst=1, leader_epoch=5, vote_granted=True)),
    (VOTE, VoteResponse(src=2, dst=1, error=FENCED_LEADER_EPOCH, leader_id=3, leader_epoch=6)),
    (BEGIN, BeginQuorumEpochResponse(src=3, dst=1, leader_id=1, leader_epoch=5)),
    (END, EndQuorumEpochResponse(src=2, dst=1, error=NOT_LEADER_OR_FOLLOWER, leader_epoch=5)),
    (FETCH, FetchResponse(src=1, dst=2, leader_id=1, leader_epoch=5, high_watermark=9,
                          records=RECORDS, fetch_offset=7, last_fetched_epoch=4)),
    (FETCH, FetchResponse(src=1, dst=2, leader_id=1, leader_epoch=5, high_watermark=3,
                          diverging_epoch=OffsetAndEpoch(0, 0), fetch_offset=7,
                          last_fetched_epoch=4)),
    (FETCH, FetchResponse(src=1, dst=2, leader_id=1, leader_epoch=5, high_watermark=30,
                          snapshot_id=OffsetAndEpoch(20, 3), fetch_offset=7,
                          last_fetched_epoch=4)),
    (FETCH, FetchResponse(src=1, dst=2, error=FENCED_LEADER_EPOCH, leader_id=-1,
                          leader_epoch=6, fetch_offset=7, last_fetched_epoch=4)),
    (FETCH_SNAPSHOT, FetchSnapshotResponse(src=1, dst=3, leader_id=1, leader_epoch=5,
                                           snapshot_id=OffsetAndEpoch(10, 3), size=100,
                                           position=4, data=bytes(range(96)))),
    (FETCH_SNAPSHOT, FetchSnapshotResponse(src=1, dst=3, error=SNAPSHOT_NOT_FOUND,
                                           leader_id=1, leader_epoch=5)),
]


def versions(api_key):
    low, high = wire.SUPPORTED_VERSIONS[api_key]
    return range(low, high + 1)


def request_cases():
    return [pytest.param(m, v, id=f"{type(m).__name__}-v{v}")
            for m in REQUESTS for v in versions(wire.api_key_of(m))]


def response_cases():
    return [pytest.param(req, resp, v, id=f"{type(resp).__name__}{i}-v{v}")
            for i, (req, resp) in enumerate(RESPONSES)
            for v in versions(wire.api_key_of(resp))]


def decode_frame(frame):
    """Decode a request frame as the broker's network layer does."""
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    body_frame = frame[4:]
    api_key, version = struct.unpack_from(">hh", body_frame)
    header = parse_header(body_frame, is_flexible_request(api_key, version))
    return header, decode_request(api_key, version, body_frame, header.size)


@pytest.mark.parametrize(("message", "version"), request_cases())
def test_request_round_trip(message, version):
    api_key = wire.api_key_of(message)
    body = wire.request_to_wire(message, version, cluster_id="cluster-1")
    assert type(body) is request_class(api_key, version)
    frame = encode_request(api_key, version, 42, wire.client_id_for(message.src), body)
    assert frame == wire.request_frame(message, version, 42, cluster_id="cluster-1")
    header, decoded = decode_frame(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 42)
    assert header.client_id == f"raft-{message.src}"
    assert wire.request_cluster_id(decoded) == "cluster-1"
    src = wire.node_id_from_client_id(header.client_id)
    assert wire.request_from_wire(api_key, decoded, dst=message.dst, src=src) == message
    # Without a client id the sender comes from the body.
    assert wire.request_from_wire(api_key, decoded, dst=message.dst) == message


@pytest.mark.parametrize(("request_message", "message", "version"), response_cases())
def test_response_round_trip(request_message, message, version):
    api_key = wire.api_key_of(message)
    body = wire.response_to_wire(message, version, timestamp_ms=1_700_000_000_000)
    cls = response_class(api_key, version)
    assert type(body) is cls
    out = io.BytesIO()
    entity_writer(cls)(out, body)
    raw = out.getvalue()
    decoded, size = entity_reader(cls)(raw, 0)
    assert size == len(raw)
    assert wire.response_from_wire(api_key, decoded, request_message) == message
    # And framed, with the response header of the version.
    correlation_id, framed = wire.parse_response_frame(
        api_key, version, wire.response_frame(message, version, 77)[4:])
    assert correlation_id == 77
    assert wire.response_from_wire(api_key, framed, request_message) == message


def test_fetch_response_copies_the_request_position():
    other = FetchRequest(src=2, dst=1, replica_id=2, current_leader_epoch=5, fetch_offset=12,
                         last_fetched_epoch=5)
    response = FetchResponse(src=1, dst=2, leader_id=1, leader_epoch=5, high_watermark=12)
    body = wire.response_to_wire(response, 17)
    decoded = wire.response_from_wire(wire.ApiKey.FETCH, body, other)
    assert (decoded.fetch_offset, decoded.last_fetched_epoch) == (12, 5)
    assert (decoded.src, decoded.dst) == (1, 2)


@pytest.mark.parametrize("version", versions(wire.ApiKey.FETCH))
def test_fetch_names_the_metadata_partition_like_kafka(version):
    body = wire.request_to_wire(FETCH, version)
    (topic,) = body.topics
    if version >= 13:
        assert topic.topic_id == wire.CLUSTER_METADATA_TOPIC_ID
        assert str(topic.topic_id) == "00000000-0000-0000-0000-000000000001"
    else:
        assert topic.topic == "__cluster_metadata"
    (partition,) = topic.partitions
    assert partition.partition == 0
    if version >= 15:
        assert body.replica_state.replica_id == 2
    else:
        assert body.replica_id == 2


def test_fetch_records_are_genuine_record_batches():
    data = wire.encode_entries(RECORDS, timestamp_ms=1234)
    batches = list(iter_batches(data))
    # One batch per epoch run; the control entry gets a control batch of its own.
    assert [(h.base_offset, h.partition_leader_epoch, h.record_count,
             bool(h.attributes & CONTROL_FLAG)) for _, h in batches] == [
        (7, 4, 1, False), (8, 5, 1, True), (9, 5, 2, False), (11, 6, 1, False)]
    _pos, control_header = batches[1]
    (control,) = decode_records(data[_pos:_pos + control_header.size], verify_crc=True)
    assert struct.unpack(">hh", control.key) == (0, wire.LEADER_CHANGE_CONTROL_TYPE)
    assert control.value == b"leader-change"
    assert wire.decode_entries(data) == RECORDS


def test_leader_change_entries_are_kafka_control_records():
    # What a leader writes at the start of its epoch, as a Kafka reader of the metadata log
    # sees it: a control batch whose record key is (version 0, type 2) and whose value is a
    # LeaderChangeMessage.
    from kio.schema.leader_change_message.v0 import LeaderChangeMessage

    cluster = Cluster(3)
    cluster.elect(2, 0)
    (entry,) = cluster[2].log.read(0, 1)
    data = wire.encode_entries([entry], timestamp_ms=5)
    ((pos, header),) = list(iter_batches(data))
    assert header.attributes & CONTROL_FLAG and header.partition_leader_epoch == entry.epoch
    (record,) = decode_records(data[pos:pos + header.size], verify_crc=True)
    assert struct.unpack(">hh", record.key) == (0, wire.LEADER_CHANGE_CONTROL_TYPE)
    message, size = entity_reader(LeaderChangeMessage)(bytes(record.value), 0)
    assert size == len(record.value)
    assert (message.version, message.leader_id) == (0, 2)
    assert [v.voter_id for v in message.voters] == [1, 2, 3]
    granting = [v.voter_id for v in message.granting_voters]
    assert 2 in granting and len(granting) >= 2
    assert wire.decode_entries(data) == (entry,)


def test_corrupt_records_are_rejected():
    data = bytearray(wire.encode_entries(RECORDS[:2], timestamp_ms=1))
    data[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        wire.decode_entries(bytes(data))
    # A batch cut short at the end (a byte limit) is left for the next fetch.
    whole = wire.encode_entries(RECORDS[:2], timestamp_ms=1)
    assert wire.decode_entries(whole[:-3]) == RECORDS[:1]
    gap = wire.encode_entries(RECORDS[:1], timestamp_ms=1) + \
        wire.encode_entries(RECORDS[2:3], timestamp_ms=1)
    with pytest.raises(wire.WireError, match="jump"):
        wire.decode_entries(gap)


def test_random_entries_round_trip():
    rng = random.Random(3)
    for _ in range(50):
        offset, epoch, batch = rng.randint(0, 10_000), rng.randint(0, 5), []
        for i in range(rng.randint(1, 30)):
            epoch += rng.random() < 0.2
            batch.append(LogEntry(offset + i, epoch, rng.randbytes(rng.randint(0, 50)),
                                  control=rng.random() < 0.1))
        assert wire.decode_entries(wire.encode_entries(batch)) == tuple(batch)


def test_pre_vote_is_not_mistaken_for_a_vote():
    body = build(request_class(wire.ApiKey.VOTE, 2), {"topics": [{
        "topic_name": wire.CLUSTER_METADATA_TOPIC, "partitions": [{
            "partition_index": 0, "replica_epoch": 5, "replica_id": 1, "last_offset_epoch": 4,
            "last_offset": 10, "pre_vote": True}]}]})
    with pytest.raises(wire.UnsupportedRequest):
        wire.request_from_wire(wire.ApiKey.VOTE, body, dst=2)


def test_other_partitions_are_rejected():
    body = build(request_class(wire.ApiKey.BEGIN_QUORUM_EPOCH, 1), {"topics": [{
        "topic_name": "orders", "partitions": [{"partition_index": 0, "leader_id": 1,
                                                "leader_epoch": 2}]}]})
    with pytest.raises(wire.WireError):
        wire.request_from_wire(wire.ApiKey.BEGIN_QUORUM_EPOCH, body, dst=2)


@pytest.mark.parametrize(("request_message", "version"), [
    (m, v) for m in REQUESTS for v in versions(wire.api_key_of(m))])
def test_top_level_errors_become_stale_responses(request_message, version):
    api_key = wire.api_key_of(request_message)
    body = wire.error_response(api_key, version, ErrorCode.inconsistent_cluster_id)
    _cid, decoded = wire.parse_response_frame(api_key, version, encode_response(1, body)[4:])
    message = wire.response_from_wire(api_key, decoded, request_message)
    assert message.error == ErrorCode.inconsistent_cluster_id
    assert message.epoch == -1  # older than any epoch: a node ignores it


# -- DescribeQuorum -------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(wire.ApiKey.DESCRIBE_QUORUM))
def test_describe_quorum_round_trip(version):
    request = wire.describe_quorum_request(version)
    frame = encode_request(wire.ApiKey.DESCRIBE_QUORUM, version, 5, "admin", request)
    _header, decoded = decode_frame(frame)
    assert decoded.topics[0].topic_name == "__cluster_metadata"
    info = wire.QuorumInfo(leader_id=1, leader_epoch=3, high_watermark=10, voters=(
        wire.ReplicaInfo(1, 10, 1000, 1000), wire.ReplicaInfo(2, 9, 990, 980),
        wire.ReplicaInfo(3)), observers=(wire.ReplicaInfo(7, 8, 995, 970),))
    frame = encode_response(1, wire.quorum_info_to_wire(info, version))
    _cid, body = wire.parse_response_frame(wire.ApiKey.DESCRIBE_QUORUM, version, frame[4:])
    back = wire.quorum_info_from_wire(body)
    if version == 0:  # v0 has no timestamps
        info = wire.QuorumInfo(
            leader_id=1, leader_epoch=3, high_watermark=10,
            voters=tuple(wire.ReplicaInfo(r.replica_id, r.log_end_offset) for r in info.voters),
            observers=(wire.ReplicaInfo(7, 8),))
    assert back == info


def test_quorum_info_from_a_leader_and_a_follower():
    cluster = Cluster(3)
    now = cluster.elect(1, 0)
    now = cluster.run(now, now + 50)
    leader = cluster[1].node
    info = wire.quorum_info(leader, now_ms=now, wall_offset_ms=1_000_000,
                            caught_up_ms={2: now - 5})
    assert (info.error, info.leader_id, info.leader_epoch) == (ErrorCode.none, 1, leader.epoch)
    assert info.high_watermark == leader.high_watermark == 1
    assert [v.replica_id for v in info.voters] == [1, 2, 3]
    assert all(v.log_end_offset == 1 for v in info.voters)
    assert info.voters[0].last_fetch_timestamp == now + 1_000_000
    assert info.voters[1].last_caught_up_timestamp == now - 5 + 1_000_000
    assert info.voters[2].last_caught_up_timestamp == -1
    assert info.voters[2].last_fetch_timestamp > 1_000_000
    follower = wire.quorum_info(cluster[2].node, now_ms=now, wall_offset_ms=0)
    assert (follower.error, follower.leader_id) == (NOT_LEADER_OR_FOLLOWER, 1)
