"""Records of the `__consumer_offsets` topic, in Kafka's own key/value layout.

Keys and values are versioned big-endian structs (Kafka's OffsetCommitKey/Value and
GroupMetadataKey/Value schemas), so the topic's content reads the same as Kafka's:

    offset commit key   v1: group string, topic string, partition int32
    offset commit value v3: offset int64, leader epoch int32, metadata string,
                            commit timestamp int64
    group key           v2: group string
    group value         v3: protocol type string, generation int32, protocol string?,
                            leader string?, state timestamp int64, members[...]

A record with a null value is a tombstone: the offset or the group was deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.broker.coordinators.record_format import Reader, Writer

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's choice: Utils.abs(groupId.hashCode()) % partitions, where Utils.abs is the
    absolute value of the Java int, with Integer.MIN_VALUE mapped to 0."""
    value = 0
    for unit in _utf16_units(group_id):
        value = (31 * value + unit) & 0xFFFFFFFF
    signed = value - (1 << 32) if value >= 1 << 31 else value
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


def encode_offset_key(key: OffsetKey) -> bytes:
    return bytes(Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic)
                 .i32(key.partition).out)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(Writer().i16(GROUP_KEY_VERSION).string(key.group).out)


def encode_offset_value(value: OffsetValue) -> bytes:
    return bytes(Writer().i16(OFFSET_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
                 .string(value.metadata).i64(value.commit_timestamp).out)


def encode_group_value(value: GroupValue) -> bytes:
    out = (Writer().i16(GROUP_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
           .string(value.protocol).string(value.leader).i64(value.state_timestamp)
           .i32(len(value.members)))
    for member in value.members:
        (out.string(member.member_id).string(member.group_instance_id).string(member.client_id)
         .string(member.client_host).i32(member.rebalance_timeout_ms)
         .i32(member.session_timeout_ms).bytes_(member.subscription).bytes_(member.assignment))
    return bytes(out.out)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a `__consumer_offsets` record; None for key types this broker ignores."""
    reader = Reader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string() or "", reader.string() or "", reader.i32())
    if version == 2:
        return GroupKey(reader.string() or "")
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = Reader(data)
    version = reader.i16()
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string() or ""
    commit_timestamp = reader.i64()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    reader = Reader(data)
    version = reader.i16()
    protocol_type = reader.string() or ""
    generation = reader.i32()
    protocol = reader.string()
    leader = reader.string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.i32()):
        member_id = reader.string() or ""
        instance_id = reader.string() if version >= 3 else None
        client_id = reader.string() or ""
        client_host = reader.string() or ""
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        rebalance_timeout = session_timeout if rebalance_timeout < 0 else rebalance_timeout
        members.append(MemberValue(member_id, instance_id, client_id, client_host,
                                   rebalance_timeout, session_timeout, reader.bytes_(),
                                   reader.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp,
                      tuple(members))
