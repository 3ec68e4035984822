"""The controller quorum's messages on the wire: Kafka's KRaft request and response schemas.

Each dataclass message of messages.py maps to one request or response of Kafka's Vote (52),
BeginQuorumEpoch (53), EndQuorumEpoch (54), Fetch (1) and FetchSnapshot (59) APIs, for the
single partition 0 of the `__cluster_metadata` topic; DescribeQuorum (55) reports the leader's
view of the voters and of the observers that fetch from it. Bodies are kio entities built for
one exact API version.

Things the wire carries that the dataclasses do not (and the reverse):

- `src` and `dst` are not in the bodies. A request's sender comes from the connection (the
  client id `raft-<node id>`, else the id the body names); a response's sender and receiver
  are those of the request it answers, and `response_from_wire` takes that request.
- A FetchResponse's fetch_offset and last_fetched_epoch are copied from the request, as
  messages.py asks.
- Fetch records are genuine v2 record batches: a run of entries with one epoch is one batch
  whose partitionLeaderEpoch is that epoch; a control entry is a control batch of one record
  whose key is Kafka's control record key (version 0, type 2: LeaderChange). The record value
  is the entry's payload as the Raft node wrote it: Kafka's LeaderChangeMessage (node.py's
  `LeaderChange`).
- Snapshot chunks travel as FetchSnapshot's unaligned records, i.e. as raw bytes.

The metadata topic's id is Kafka's fixed `Uuid.METADATA_TOPIC_ID`, Uuid(0, 1), i.e.
00000000-0000-0000-0000-000000000001: Fetch v13+ names topics by id only.
"""

from __future__ import annotations

import enum
import functools
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.serial import entity_reader

from moldau.broker.raft.log import LogEntry, OffsetAndEpoch
from moldau.broker.raft.messages import (
    NO_LEADER,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from moldau.broker.raft.node import RaftNode
from moldau.broker.raft.state import LeaderState
from moldau.protocol.build import build, millis
from moldau.protocol.messages import (
    encode_request,
    encode_response,
    read_uvarint,
    request_class,
    response_class,
)
from moldau.records.batch import CONTROL_FLAG
from moldau.records.codec import build_batch, decode_records, iter_batches

__all__ = [
    "CLUSTER_METADATA_PARTITION", "CLUSTER_METADATA_TOPIC", "CLUSTER_METADATA_TOPIC_ID",
    "LEADER_CHANGE_CONTROL_TYPE", "REQUEST_TYPES", "RESPONSE_TYPES", "SUPPORTED_VERSIONS",
    "ApiKey", "QuorumInfo", "ReplicaInfo",
    "UnsupportedRequest", "WireError", "api_key_of", "client_id_for", "decode_entries",
    "describe_quorum_request", "encode_entries", "error_response", "highest_version",
    "node_id_from_client_id", "parse_response_frame", "quorum_info", "quorum_info_from_wire",
    "quorum_info_to_wire", "request_cluster_id", "request_frame", "request_from_wire",
    "request_to_wire", "response_frame", "response_from_wire", "response_to_wire",
]

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_TOPIC_ID = uuid.UUID(int=1)
CLUSTER_METADATA_PARTITION = 0

# Kafka's ControlRecordType for a new leader's LeaderChange record.
LEADER_CHANGE_CONTROL_TYPE = 2
_CONTROL_KEY = struct.Struct(">hh")  # version, type

_INT32_MAX = (1 << 31) - 1
FETCH_PARTITION_MAX_BYTES = 8 << 20
_CLIENT_ID_PREFIX = "raft-"


class ApiKey(enum.IntEnum):
    FETCH = 1
    API_VERSIONS = 18
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    FETCH_SNAPSHOT = 59


# (min, max) version this module maps, for both requests and responses. Fetch starts at v12,
# the first version with lastFetchedEpoch, divergingEpoch and snapshotId; v12 names the topic,
# later ones use its id; v15 moves replicaId into ReplicaState. Vote v2 adds PreVote (KIP-996),
# which the Raft node does not implement: a v2 request is only accepted with preVote false.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.VOTE: (0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.FETCH: (12, 18),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
}


class WireError(ValueError):
    """A body that does not carry a controller quorum message this module understands."""


class UnsupportedRequest(WireError):
    """A well-formed request the Raft node cannot act on (e.g. a PreVote)."""


def highest_version(api_key: int) -> int:
    return SUPPORTED_VERSIONS[api_key][1]


def _check_version(api_key: int, version: int) -> None:
    low, high = SUPPORTED_VERSIONS[api_key]
    if not low <= version <= high:
        raise WireError(f"api {api_key} v{version} is outside the supported {low}..{high}")


def client_id_for(node_id: int) -> str:
    return f"{_CLIENT_ID_PREFIX}{node_id}"


def node_id_from_client_id(client_id: str | None) -> int | None:
    if client_id is None or not client_id.startswith(_CLIENT_ID_PREFIX):
        return None
    try:
        return int(client_id[len(_CLIENT_ID_PREFIX):])
    except ValueError:
        return None


_API_KEYS: dict[type, int] = {
    VoteRequest: ApiKey.VOTE, VoteResponse: ApiKey.VOTE,
    BeginQuorumEpochRequest: ApiKey.BEGIN_QUORUM_EPOCH,
    BeginQuorumEpochResponse: ApiKey.BEGIN_QUORUM_EPOCH,
    EndQuorumEpochRequest: ApiKey.END_QUORUM_EPOCH,
    EndQuorumEpochResponse: ApiKey.END_QUORUM_EPOCH,
    FetchRequest: ApiKey.FETCH, FetchResponse: ApiKey.FETCH,
    FetchSnapshotRequest: ApiKey.FETCH_SNAPSHOT, FetchSnapshotResponse: ApiKey.FETCH_SNAPSHOT,
}
REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
                 FetchSnapshotRequest)
RESPONSE_TYPES = (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse,
                  FetchResponse, FetchSnapshotResponse)


def api_key_of(message: Message) -> int:
    try:
        return _API_KEYS[type(message)]
    except KeyError:
        raise WireError(f"{type(message).__name__} has no wire form") from None


# -- records ----------------------------------------------------------------------------------


def encode_entries(entries: Sequence[LogEntry], *, timestamp_ms: int | None = None) -> bytes:
    """Log entries as concatenated v2 record batches (one per run of equal epochs)."""
    if not entries:
        return b""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    control_key = _CONTROL_KEY.pack(0, LEADER_CHANGE_CONTROL_TYPE)
    out: list[bytes] = []
    run: list[LogEntry] = []

    def close_run() -> None:
        if run:
            out.append(build_batch([(None, e.payload, None, ts) for e in run],
                                   base_offset=run[0].offset,
                                   partition_leader_epoch=run[0].epoch))
            run.clear()

    for entry in entries:
        if run and (entry.epoch != run[0].epoch or entry.offset != run[-1].offset + 1):
            close_run()
        if entry.control:
            close_run()
            out.append(build_batch([(control_key, entry.payload, None, ts)],
                                   base_offset=entry.offset,
                                   partition_leader_epoch=entry.epoch, is_control=True))
        else:
            run.append(entry)
    close_run()
    return b"".join(out)


def decode_entries(data: bytes | None) -> tuple[LogEntry, ...]:
    """The log entries of concatenated v2 record batches; CRCs are checked.

    Raises WireError when offsets are not consecutive, KafkaError for a corrupt batch.
    """
    if not data:
        return ()
    entries: list[LogEntry] = []
    view = bytes(data)
    # A trailing partial batch (a leader that cut its answer at a byte limit) is ignored, as
    # Kafka's readers do: the follower fetches it again from where the whole batches end.
    for pos, header in iter_batches(view):
        batch = view[pos:pos + header.size]
        control = bool(header.attributes & CONTROL_FLAG)
        for record in decode_records(batch, verify_crc=True):
            entries.append(LogEntry(header.base_offset + record.offset_delta,
                                    header.partition_leader_epoch,
                                    bytes(record.value or b""), control))
    for previous, entry in zip(entries, entries[1:], strict=False):
        if entry.offset != previous.offset + 1:
            raise WireError(f"record offsets jump from {previous.offset} to {entry.offset}")
    return tuple(entries)


# -- requests ---------------------------------------------------------------------------------


def _topic(partition: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"topic_name": CLUSTER_METADATA_TOPIC, "name": CLUSTER_METADATA_TOPIC,
             "partitions": [partition]}]


def request_to_wire(message: Message, version: int, *, cluster_id: str | None = None) -> Any:
    """The kio request entity of `version` carrying a request message."""
    api_key = api_key_of(message)
    _check_version(api_key, version)
    cls = request_class(api_key, version)
    if isinstance(message, VoteRequest):
        data: dict[str, Any] = {
            "cluster_id": cluster_id, "voter_id": message.dst,
            "topics": _topic({
                "partition_index": CLUSTER_METADATA_PARTITION,
                "replica_epoch": message.candidate_epoch, "replica_id": message.candidate_id,
                "last_offset_epoch": message.last_offset_epoch,
                "last_offset": message.last_offset, "pre_vote": False})}
    elif isinstance(message, BeginQuorumEpochRequest):
        data = {"cluster_id": cluster_id, "voter_id": message.dst, "leader_endpoints": [],
                "topics": _topic({"partition_index": CLUSTER_METADATA_PARTITION,
                                  "leader_id": message.leader_id,
                                  "leader_epoch": message.leader_epoch})}
    elif isinstance(message, EndQuorumEpochRequest):
        successors = list(message.preferred_successors)
        data = {"cluster_id": cluster_id, "leader_endpoints": [],
                "topics": _topic({
                    "partition_index": CLUSTER_METADATA_PARTITION,
                    "leader_id": message.leader_id, "leader_epoch": message.leader_epoch,
                    "preferred_successors": successors,
                    "preferred_candidates": [{"candidate_id": s} for s in successors]})}
    elif isinstance(message, FetchRequest):
        data = {
            "cluster_id": cluster_id, "replica_id": message.replica_id,
            "replica_state": {"replica_id": message.replica_id, "replica_epoch": -1},
            "max_wait": message.max_wait_ms, "min_bytes": 1, "max_bytes": _INT32_MAX,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "",
            "topics": [{
                "topic": CLUSTER_METADATA_TOPIC, "topic_id": CLUSTER_METADATA_TOPIC_ID,
                "partitions": [{
                    "partition": CLUSTER_METADATA_PARTITION,
                    "current_leader_epoch": message.current_leader_epoch,
                    "fetch_offset": message.fetch_offset,
                    "last_fetched_epoch": message.last_fetched_epoch,
                    "log_start_offset": -1,
                    "partition_max_bytes": FETCH_PARTITION_MAX_BYTES}]}]}
    elif isinstance(message, FetchSnapshotRequest):
        data = {
            "cluster_id": cluster_id, "replica_id": message.replica_id,
            "max_bytes": min(message.max_bytes, _INT32_MAX),
            "topics": _topic({
                "partition": CLUSTER_METADATA_PARTITION,
                "current_leader_epoch": message.current_leader_epoch,
                "snapshot_id": {"end_offset": message.snapshot_id.offset,
                                "epoch": message.snapshot_id.epoch},
                "position": message.position})}
    else:
        raise WireError(f"{type(message).__name__} is not a request")
    return build(cls, data)


def _metadata_partition(topics: Sequence[Any], index_field: str = "partition_index") -> Any:
    for topic in topics:
        name = getattr(topic, "topic_name", None) or getattr(topic, "name", None) \
            or getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name != CLUSTER_METADATA_TOPIC and topic_id != CLUSTER_METADATA_TOPIC_ID:
            continue
        for partition in topic.partitions:
            if getattr(partition, index_field) == CLUSTER_METADATA_PARTITION:
                return partition
    raise WireError(f"no {CLUSTER_METADATA_TOPIC}-{CLUSTER_METADATA_PARTITION} in the message")


def request_cluster_id(body: Any) -> str | None:
    return getattr(body, "cluster_id", None)


def request_from_wire(api_key: int, body: Any, *, dst: int, src: int | None = None) -> Message:
    """The request message a decoded kio request carries.

    `dst` is the receiving node; `src` the sender as the connection names it, else the id the
    body names (candidate, leader or replica).
    """
    if api_key == ApiKey.VOTE:
        p = _metadata_partition(body.topics)
        if getattr(p, "pre_vote", False):
            raise UnsupportedRequest("PreVote requests are not supported")
        return VoteRequest(src=p.replica_id if src is None else src, dst=dst,
                           candidate_epoch=p.replica_epoch, candidate_id=p.replica_id,
                           last_offset_epoch=p.last_offset_epoch, last_offset=p.last_offset)
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        p = _metadata_partition(body.topics)
        return BeginQuorumEpochRequest(src=p.leader_id if src is None else src, dst=dst,
                                       leader_id=p.leader_id, leader_epoch=p.leader_epoch)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        p = _metadata_partition(body.topics)
        if hasattr(p, "preferred_candidates"):
            successors = tuple(int(c.candidate_id) for c in p.preferred_candidates)
        else:
            successors = tuple(int(s) for s in p.preferred_successors)
        return EndQuorumEpochRequest(src=p.leader_id if src is None else src, dst=dst,
                                     leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                                     preferred_successors=successors)
    if api_key == ApiKey.FETCH:
        replica_state = getattr(body, "replica_state", None)
        replica_id = replica_state.replica_id if replica_state is not None else body.replica_id
        p = _metadata_partition(body.topics, "partition")
        return FetchRequest(src=replica_id if src is None else src, dst=dst,
                            replica_id=replica_id, current_leader_epoch=p.current_leader_epoch,
                            fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                            max_wait_ms=millis(body.max_wait))
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = _metadata_partition(body.topics, "partition")
        return FetchSnapshotRequest(
            src=body.replica_id if src is None else src, dst=dst, replica_id=body.replica_id,
            current_leader_epoch=p.current_leader_epoch,
            snapshot_id=OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            position=p.position, max_bytes=body.max_bytes)
    raise WireError(f"api {api_key} carries no Raft request")


# -- responses --------------------------------------------------------------------------------


def _offset_and_epoch(value: OffsetAndEpoch | None) -> dict[str, int]:
    if value is None:
        return {"end_offset": -1, "epoch": -1}
    return {"end_offset": value.offset, "epoch": value.epoch}


def response_to_wire(message: Message, version: int, *,
                     timestamp_ms: int | None = None) -> Any:
    """The kio response entity of `version` carrying a response message."""
    api_key = api_key_of(message)
    _check_version(api_key, version)
    cls = response_class(api_key, version)
    if isinstance(message, VoteResponse):
        data: dict[str, Any] = {"error_code": NONE, "topics": _topic({
            "partition_index": CLUSTER_METADATA_PARTITION, "error_code": message.error,
            "leader_id": message.leader_id, "leader_epoch": message.leader_epoch,
            "vote_granted": message.vote_granted})}
    elif isinstance(message, (BeginQuorumEpochResponse, EndQuorumEpochResponse)):
        data = {"error_code": NONE, "topics": _topic({
            "partition_index": CLUSTER_METADATA_PARTITION, "error_code": message.error,
            "leader_id": message.leader_id, "leader_epoch": message.leader_epoch})}
    elif isinstance(message, FetchResponse):
        data = {"throttle_time": 0, "error_code": NONE, "session_id": 0, "responses": [{
            "topic": CLUSTER_METADATA_TOPIC, "topic_id": CLUSTER_METADATA_TOPIC_ID,
            "partitions": [{
                "partition_index": CLUSTER_METADATA_PARTITION, "error_code": message.error,
                "high_watermark": message.high_watermark, "last_stable_offset": -1,
                "log_start_offset": -1,
                "diverging_epoch": _offset_and_epoch(message.diverging_epoch),
                "current_leader": {"leader_id": message.leader_id,
                                   "leader_epoch": message.leader_epoch},
                "snapshot_id": _offset_and_epoch(message.snapshot_id),
                "aborted_transactions": None, "preferred_read_replica": -1,
                "records": encode_entries(message.records, timestamp_ms=timestamp_ms)}]}]}
    elif isinstance(message, FetchSnapshotResponse):
        data = {"throttle_time": 0, "error_code": NONE, "topics": _topic({
            "index": CLUSTER_METADATA_PARTITION, "error_code": message.error,
            "snapshot_id": _offset_and_epoch(message.snapshot_id),
            "current_leader": {"leader_id": message.leader_id,
                               "leader_epoch": message.leader_epoch},
            "size": message.size, "position": message.position,
            "unaligned_records": bytes(message.data)})}
    else:
        raise WireError(f"{type(message).__name__} is not a response")
    return build(cls, data)


def error_response(api_key: int, version: int, error: ErrorCode) -> Any:
    """A response with only a top-level error (e.g. INCONSISTENT_CLUSTER_ID)."""
    cls = response_class(api_key, version)
    return build(cls, {"error_code": error, "topics": [], "responses": [],
                       "error_message": None})


def _snapshot_id(value: Any) -> OffsetAndEpoch | None:
    if value.end_offset == -1 and value.epoch == -1:
        return None
    return OffsetAndEpoch(value.end_offset, value.epoch)


def response_from_wire(api_key: int, body: Any, request: Message) -> Message:
    """The response message a decoded kio response carries; `request` is what it answers.

    A response with a top-level error and no partition becomes a message with that error and
    epoch -1, which the Raft node ignores as stale.
    """
    src, dst = request.dst, request.src
    top_error = body.error_code
    try:
        if api_key == ApiKey.FETCH:
            p = _metadata_partition(body.responses)
        elif api_key == ApiKey.FETCH_SNAPSHOT:
            p = _metadata_partition(body.topics, "index")
        else:
            p = _metadata_partition(body.topics)
    except WireError:
        if top_error == NONE:
            raise
        p = None
    if api_key == ApiKey.VOTE:
        if p is None:
            return VoteResponse(src=src, dst=dst, error=top_error, leader_epoch=-1)
        return VoteResponse(src=src, dst=dst, error=p.error_code, leader_id=p.leader_id,
                            leader_epoch=p.leader_epoch, vote_granted=p.vote_granted)
    if api_key in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
        cls = BeginQuorumEpochResponse if api_key == ApiKey.BEGIN_QUORUM_EPOCH \
            else EndQuorumEpochResponse
        if p is None:
            return cls(src=src, dst=dst, error=top_error, leader_epoch=-1)
        return cls(src=src, dst=dst, error=p.error_code, leader_id=p.leader_id,
                   leader_epoch=p.leader_epoch)
    if api_key == ApiKey.FETCH:
        if not isinstance(request, FetchRequest):
            raise WireError("a Fetch response answers a FetchRequest")
        position = {"fetch_offset": request.fetch_offset,
                    "last_fetched_epoch": request.last_fetched_epoch}
        if p is None:
            return FetchResponse(src=src, dst=dst, error=top_error, leader_epoch=-1, **position)
        return FetchResponse(
            src=src, dst=dst, error=p.error_code, leader_id=p.current_leader.leader_id,
            leader_epoch=p.current_leader.leader_epoch, high_watermark=p.high_watermark,
            records=decode_entries(p.records), diverging_epoch=_snapshot_id(p.diverging_epoch),
            snapshot_id=_snapshot_id(p.snapshot_id), **position)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        if p is None:
            return FetchSnapshotResponse(src=src, dst=dst, error=top_error, leader_epoch=-1)
        return FetchSnapshotResponse(
            src=src, dst=dst, error=p.error_code, leader_id=p.current_leader.leader_id,
            leader_epoch=p.current_leader.leader_epoch, snapshot_id=_snapshot_id(p.snapshot_id),
            size=p.size, position=p.position, data=bytes(p.unaligned_records))
    raise WireError(f"api {api_key} carries no Raft response")


# -- frames -----------------------------------------------------------------------------------


def request_frame(message: Message, version: int, correlation_id: int, *,
                  cluster_id: str | None = None) -> bytes:
    """A whole request frame: size, header v1/v2 (client id `raft-<src>`), body."""
    body = request_to_wire(message, version, cluster_id=cluster_id)
    return encode_request(api_key_of(message), version, correlation_id,
                          client_id_for(message.src), body)


def response_frame(message: Message, version: int, correlation_id: int) -> bytes:
    """A whole response frame: size, header v0/v1, body."""
    return encode_response(correlation_id, response_to_wire(message, version))


@functools.cache
def _response_reader(api_key: int, version: int) -> Any:
    return entity_reader(response_class(api_key, version))


def parse_response_frame(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio body) of a response frame without its size prefix."""
    cls = response_class(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame)
    pos = 4
    if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    body, _size = _response_reader(api_key, version)(frame, pos)
    return correlation_id, body


# -- DescribeQuorum ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1  # wall-clock ms, -1 when unknown
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """What DescribeQuorum reports about the metadata partition."""

    error: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    high_watermark: int = -1
    voters: tuple[ReplicaInfo, ...] = ()
    observers: tuple[ReplicaInfo, ...] = ()


def quorum_info(node: RaftNode, *, now_ms: int, wall_offset_ms: int,
                caught_up_ms: Mapping[int, int] | None = None) -> QuorumInfo:
    """Describe the quorum from a `RaftNode`'s state.

    Times are in the node's clock (`now_ms`, the replicas' last fetch, `caught_up_ms`: when
    each voter or observer was last known to hold everything the leader had); adding
    `wall_offset_ms` turns them into the wall-clock milliseconds the API reports. Only the
    leader knows the replicas' positions; any other node answers NOT_LEADER_OR_FOLLOWER.
    Observers are the non-voters that fetched from the leader in its epoch (and recently).
    """
    st = node.state
    leader = node.leader_id
    if not isinstance(st, LeaderState):
        return QuorumInfo(error=NOT_LEADER_OR_FOLLOWER,
                          leader_id=NO_LEADER if leader is None else leader,
                          leader_epoch=node.epoch, high_watermark=node.high_watermark,
                          voters=tuple(ReplicaInfo(v) for v in sorted(node.voters)))
    caught_up = caught_up_ms or {}
    now_wall = now_ms + wall_offset_ms

    def wall(value: int | None) -> int:
        return -1 if value is None else value + wall_offset_ms

    voters = []
    for voter in sorted(node.voters):
        if voter == node.node_id:
            voters.append(ReplicaInfo(voter, node.log.end_offset, now_wall, now_wall))
            continue
        replica = st.replicas[voter]
        voters.append(ReplicaInfo(voter, replica.end_offset, wall(replica.last_fetch_ms),
                                  wall(caught_up.get(voter))))
    observers = tuple(
        ReplicaInfo(observer_id, replica.end_offset, wall(replica.last_fetch_ms),
                    wall(caught_up.get(observer_id)))
        for observer_id, replica in sorted(st.observers.items()))
    return QuorumInfo(leader_id=node.node_id, leader_epoch=st.epoch,
                      high_watermark=node.high_watermark, voters=tuple(voters),
                      observers=observers)


def describe_quorum_request(version: int) -> Any:
    _check_version(ApiKey.DESCRIBE_QUORUM, version)
    return build(request_class(ApiKey.DESCRIBE_QUORUM, version), {"topics": _topic(
        {"partition_index": CLUSTER_METADATA_PARTITION})})


def _replica(info: ReplicaInfo) -> dict[str, Any]:
    return {"replica_id": info.replica_id, "log_end_offset": info.log_end_offset,
            "last_fetch_timestamp": info.last_fetch_timestamp,
            "last_caught_up_timestamp": info.last_caught_up_timestamp}


def quorum_info_to_wire(info: QuorumInfo, version: int) -> Any:
    """A DescribeQuorum response entity of `version`."""
    _check_version(ApiKey.DESCRIBE_QUORUM, version)
    return build(response_class(ApiKey.DESCRIBE_QUORUM, version), {
        "error_code": NONE, "error_message": None, "nodes": [],
        "topics": _topic({
            "partition_index": CLUSTER_METADATA_PARTITION, "error_code": info.error,
            "error_message": None if info.error == NONE else info.error.name,
            "leader_id": info.leader_id, "leader_epoch": info.leader_epoch,
            "high_watermark": info.high_watermark,
            "current_voters": [_replica(v) for v in info.voters],
            "observers": [_replica(o) for o in info.observers]})})


def quorum_info_from_wire(body: Any) -> QuorumInfo:
    if body.error_code != NONE:
        return QuorumInfo(error=body.error_code)
    p = _metadata_partition(body.topics)

    def replica(r: Any) -> ReplicaInfo:
        return ReplicaInfo(r.replica_id, r.log_end_offset,
                           getattr(r, "last_fetch_timestamp", -1),
                           getattr(r, "last_caught_up_timestamp", -1))

    return QuorumInfo(error=p.error_code, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                      high_watermark=p.high_watermark,
                      voters=tuple(replica(r) for r in p.current_voters),
                      observers=tuple(replica(r) for r in p.observers))

