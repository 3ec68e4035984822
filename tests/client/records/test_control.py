"""Transaction marker control batches: Kafka's layout, read back."""

from __future__ import annotations

import struct

from moldau.records.batch import parse_header
from moldau.records.codec import build_batch, decode_records
from moldau.records.control import (
    ControlType,
    EndTxnMarker,
    build_end_txn_marker,
    read_end_txn_marker,
)


def test_marker_batch_has_kafkas_flags_key_and_value():
    batch = build_end_txn_marker(42, 7, 3, commit=True, timestamp_ms=1_000, base_offset=9)
    h = parse_header(batch)
    assert h.is_control and h.is_transactional
    assert (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (9, 42, 7, -1)
    (record,) = decode_records(batch, verify_crc=True)
    assert record.key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert record.value == struct.pack(">hi", 0, 3)  # version 0, coordinator epoch
    assert read_end_txn_marker(batch) == EndTxnMarker(ControlType.COMMIT, 3)


def test_abort_marker_reads_back_and_other_control_records_are_not_markers():
    abort = build_end_txn_marker(42, 0, 0, commit=False)
    assert read_end_txn_marker(abort).is_abort
    leader_change = build_batch([(struct.pack(">hh", 0, 2), b"", None, 1)], is_control=True)
    assert read_end_txn_marker(leader_change) is None
    assert read_end_txn_marker(build_batch([(b"k", b"v", None, 1)])) is None
