"""Raw requests of transactions, transactional offsets and producer state, built by hand as
in wire.py: AddPartitionsToTxn v3, TxnOffsetCommit (v0 and v3), OffsetFetch v8 with
require_stable, DescribeProducers v0."""

from __future__ import annotations

from dataclasses import dataclass

from e2e.wire import (
    TAGS,
    Conn,
    array,
    compact_array,
    compact_string,
    int8,
    int16,
    int32,
    int64,
    request,
    string,
)

OFFSET_FETCH = 9
ADD_PARTITIONS_TO_TXN = 24
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS = 61

# Error codes these tests meet.
COORDINATOR_LOAD_IN_PROGRESS = 14
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
UNSTABLE_OFFSET_COMMIT = 88


@dataclass(frozen=True)
class TxnCommit:
    """One TxnOffsetCommit: a producer's offsets for a group, in its transaction."""

    transactional_id: str
    group: str
    producer_id: int
    producer_epoch: int
    offsets: dict[tuple[str, int], int]
    generation: int = -1
    member_id: str = ""
    instance_id: str | None = None


def add_partitions_to_txn(conn: Conn, correlation_id: int, transactional_id: str,
                          producer_id: int, producer_epoch: int,
                          partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v3 (what a producer sends): error code per (topic, partition)."""
    topics = [compact_string(topic) + compact_array([int32(p) for p in parts]) + TAGS
              for topic, parts in partitions.items()]
    body = (compact_string(transactional_id) + int64(producer_id) + int16(producer_epoch)
            + compact_array(topics) + TAGS)
    conn.send(request(ADD_PARTITIONS_TO_TXN, 3, correlation_id, body, flexible=True))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    reader.int32()  # throttle
    out = {}
    for _ in range(reader.compact_array_len()):
        topic = reader.compact_string()
        for _ in range(reader.compact_array_len()):
            partition, error = reader.int32(), reader.int16()
            reader.tags()
            out[(topic, partition)] = error
        reader.tags()
    reader.tags()
    reader.done()
    return out


def txn_offset_commit(conn: Conn, correlation_id: int, commit: TxnCommit, version: int = 3
                      ) -> dict[tuple[str, int], int]:
    """Error code per (topic, partition). v0 is the classic encoding, v3 the flexible one
    with the member fields of KIP-447."""
    flexible = version >= 3
    text, items = (compact_string, compact_array) if flexible else (string, array)
    tags = TAGS if flexible else b""
    by_topic: dict[str, list[bytes]] = {}
    for (topic, partition), offset in commit.offsets.items():
        epoch = int32(-1) if version >= 2 else b""
        by_topic.setdefault(topic, []).append(
            int32(partition) + int64(offset) + epoch + text(f"meta-{offset}") + tags)
    body = (text(commit.transactional_id) + text(commit.group) + int64(commit.producer_id)
            + int16(commit.producer_epoch))
    if version >= 3:
        body += (int32(commit.generation) + text(commit.member_id)
                 + text(commit.instance_id))
    body += items([text(topic) + items(parts) + tags for topic, parts in by_topic.items()])
    conn.send(request(TXN_OFFSET_COMMIT, version, correlation_id, body + tags,
                      flexible=flexible))
    corr, reader = conn.recv_response(header_v1=flexible)
    assert corr == correlation_id
    read_text, read_len = ((reader.compact_string, reader.compact_array_len) if flexible
                           else (reader.string, reader.array_len))
    reader.int32()
    out = {}
    for _ in range(read_len()):
        topic = read_text()
        for _ in range(read_len()):
            partition, error = reader.int32(), reader.int16()
            if flexible:
                reader.tags()
            out[(topic, partition)] = error
        if flexible:
            reader.tags()
    if flexible:
        reader.tags()
    reader.done()
    return out


def offset_fetch(conn: Conn, correlation_id: int, group: str,
                 partitions: dict[str, list[int]] | None, require_stable: bool
                 ) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None]]]:
    """OffsetFetch v8 for one group (every partition with an offset when `partitions` is
    None): (group error, {(topic, partition): (offset, error, metadata)})."""
    topics = None if partitions is None else [
        compact_string(t) + compact_array([int32(p) for p in ps]) + TAGS
        for t, ps in partitions.items()]
    body = (compact_array([compact_string(group) + compact_array(topics) + TAGS])
            + int8(int(require_stable)) + TAGS)
    conn.send(request(OFFSET_FETCH, 8, correlation_id, body, flexible=True))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    reader.int32()
    [_] = range(reader.compact_array_len())
    assert reader.compact_string() == group
    out = {}
    for _ in range(reader.compact_array_len()):
        topic = reader.compact_string()
        for _ in range(reader.compact_array_len()):
            partition, offset = reader.int32(), reader.int64()
            reader.int32()
            metadata = reader.compact_string()
            out[(topic, partition)] = (offset, reader.int16(), metadata)
            reader.tags()
        reader.tags()
    group_error = reader.int16()
    reader.tags()
    reader.tags()
    reader.done()
    return group_error, out


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


def describe_producers(conn: Conn, correlation_id: int, topic: str, partition: int
                       ) -> tuple[int, list[ProducerState]]:
    """DescribeProducers v0 for one partition: (error code, its active producers)."""
    body = compact_array([compact_string(topic) + compact_array([int32(partition)]) + TAGS])
    conn.send(request(DESCRIBE_PRODUCERS, 0, correlation_id, body + TAGS, flexible=True))
    corr, reader = conn.recv_response(header_v1=True)
    assert corr == correlation_id
    reader.int32()
    [_] = range(reader.compact_array_len())
    assert reader.compact_string() == topic
    [_] = range(reader.compact_array_len())
    assert reader.int32() == partition
    error = reader.int16()
    reader.compact_string()
    producers = []
    for _ in range(reader.compact_array_len()):
        producers.append(ProducerState(reader.int64(), reader.int32(), reader.int32(),
                                       reader.int64(), reader.int32(), reader.int64()))
        reader.tags()
    reader.tags()
    reader.tags()
    reader.tags()
    reader.done()
    return error, producers
