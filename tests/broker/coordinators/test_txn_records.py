"""`__transaction_state` records in Kafka's TransactionLog layout, and the transitions the
state machine allows."""

from __future__ import annotations

import struct

import pytest

from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.topic import LogRecord
from moldau.broker.coordinators.transaction.metadata import (
    IllegalTransition,
    TxnMetadata,
    apply,
    prepare,
)
from moldau.broker.coordinators.transaction.records import (
    TxnState,
    TxnValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from moldau.broker.coordinators.transaction.replay import replay


def test_key_layout() -> None:
    assert encode_key("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert decode_key(encode_key("my-txn")) == "my-txn"
    assert decode_key(b"\x00\x07\x00\x01x") is None  # a version this broker does not know


def test_value_layout_of_an_ongoing_transaction() -> None:
    value = TxnValue(producer_id=42, producer_epoch=3, timeout_ms=60000,
                     state=TxnState.ONGOING, partitions={"orders": (0, 2)},
                     last_update_ms=1700000000123, start_ms=1700000000000)
    expected = (struct.pack(">hqhib", 0, 42, 3, 60000, 1) + struct.pack(">i", 1)
                + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">qq", 1700000000123, 1700000000000))
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_a_completed_transaction_stores_no_partition_list() -> None:
    value = TxnValue(7, 0, 1000, TxnState.COMPLETE_COMMIT, {}, 5, -1)
    encoded = encode_value(value)
    assert encoded[17:21] == b"\xff\xff\xff\xff"  # null array, as Kafka writes it
    assert decode_value(encoded) == value


def test_unknown_value_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version 3"):
        decode_value(b"\x00\x03" + bytes(30))


def test_state_names_are_kafkas() -> None:
    assert [state.display for state in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_transactional_id_partition_is_javas_string_hash() -> None:
    # "txn".hashCode() == 115306; Integer.MIN_VALUE ("polygenelubricants") maps to 0.
    assert partition_for("txn", 50) == 115306 % 50
    assert partition_for("polygenelubricants", 50) == 0


def test_replay_keeps_the_last_value_and_honours_tombstones() -> None:
    first = TxnValue(1, 0, 1000, TxnState.EMPTY, {}, 10, -1)
    later = TxnValue(1, 1, 1000, TxnState.ONGOING, {"t": (0,)}, 20, 15)
    loaded = replay([LogRecord(encode_key("a"), encode_value(first)),
                     LogRecord(encode_key("b"), encode_value(first)),
                     LogRecord(encode_key("a"), encode_value(later)),
                     LogRecord(encode_key("b"), None)])
    assert list(loaded) == ["a"]
    meta = loaded["a"]
    assert (meta.producer_epoch, meta.state, meta.partitions, meta.start_ms) == \
        (1, TxnState.ONGOING, {"t": {0}}, 15)


def test_transitions_follow_kafkas_state_machine() -> None:
    meta = TxnMetadata("t", 1, 0, 1000)
    with pytest.raises(IllegalTransition, match="Empty cannot go to PrepareCommit"):
        prepare(meta, TxnState.PREPARE_COMMIT, 1)
    transition = prepare(meta, TxnState.ONGOING, 5, partitions={"x": {1}}, start_ms=5)
    with pytest.raises(IllegalTransition, match="pending"):
        prepare(meta, TxnState.ONGOING, 6)
    apply(meta, transition)
    assert (meta.state, meta.partitions, meta.pending) == (TxnState.ONGOING, {"x": {1}}, None)
    apply(meta, prepare(meta, TxnState.PREPARE_ABORT, 7))
    done = prepare(meta, TxnState.COMPLETE_ABORT, 8)
    assert done.partitions == {} and done.start_ms == 5
    apply(meta, done)
    with pytest.raises(IllegalTransition):
        prepare(meta, TxnState.PREPARE_COMMIT, 9)
