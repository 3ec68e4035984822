"""Records of the `__transaction_state` topic, in Kafka's TransactionLog key/value layout.

    key   v0: transactional id string
    value v0: producer id int64, producer epoch int16, timeout ms int32, state int8,
              partitions [topic string, [partition int32]] (nullable),
              last update timestamp int64, start timestamp int64

Value v1 (flexible, with KIP-890's tagged fields) is what Kafka writes for transaction
version 2, which this coordinator does not offer (see docs/architecture.md): it writes and
reads v0. A null value is the tombstone of an expired transactional id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from moldau.broker.coordinators.record_format import Reader, Writer

TRANSACTION_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0


class TxnState(IntEnum):
    """Kafka's TransactionState ids, as stored in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name Kafka's tools print (DescribeTransactions, ListTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1


def encode_key(transactional_id: str) -> bytes:
    return bytes(Writer().i16(KEY_VERSION).string(transactional_id).out)


def decode_key(data: bytes) -> str | None:
    """The transactional id; None for a key version this broker does not know."""
    reader = Reader(data)
    if reader.i16() != KEY_VERSION:
        return None
    return reader.string()


def encode_value(value: TxnValue) -> bytes:
    out = (Writer().i16(VALUE_VERSION).i64(value.producer_id).i16(value.producer_epoch)
           .i32(value.timeout_ms).i8(value.state))
    # Kafka stores no partition list for the states that have none (Empty, Complete*).
    if value.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT,
                       TxnState.DEAD) and not value.partitions:
        out.i32(-1)
    else:
        out.i32(len(value.partitions))
        for topic, partitions in value.partitions.items():
            out.string(topic).i32(len(partitions))
            for partition in partitions:
                out.i32(partition)
    return bytes(out.i64(value.last_update_ms).i64(value.start_ms).out)


def decode_value(data: bytes) -> TxnValue:
    reader = Reader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise ValueError(f"unknown TransactionLogValue version {version}")
    producer_id, epoch, timeout_ms = reader.i64(), reader.i16(), reader.i32()
    state = TxnState(reader.i8())
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(max(reader.i32(), 0)):
        topic = reader.string() or ""
        partitions[topic] = tuple(reader.i32() for _ in range(reader.i32()))
    return TxnValue(producer_id, epoch, timeout_ms, state, partitions, reader.i64(),
                    reader.i64())

