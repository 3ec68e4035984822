"""Transaction markers: the control batches that end a transaction on a partition (KIP-98).

A marker is a batch with the control and transactional flags, the producer's id and epoch, no
sequence, and one record:

    key    version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)
    value  version int16 (0) | coordinator epoch int32

The broker writes them (WriteTxnMarkers), readers skip them.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from .batch import HEADER_SIZE, BatchHeader, parse_header
from .codec import build_batch, decode_records

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    control_type: ControlType
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type is ControlType.ABORT


def build_end_txn_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, *,
                         commit: bool, timestamp_ms: int | None = None,
                         base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """One complete control batch ending `producer_id`'s transaction."""
    key = _KEY.pack(CONTROL_KEY_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)
    value = _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)
    return build_batch([(key, value, None, timestamp_ms)], base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       is_transactional=True, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)


def read_end_txn_marker(batch: bytes | bytearray | memoryview,
                        header: BatchHeader | None = None) -> EndTxnMarker | None:
    """The marker a control batch carries; None for other control records (or none at all).

    Raises KafkaError (CORRUPT_MESSAGE / INVALID_RECORD) for a batch that does not decode.
    """
    h = header or parse_header(batch)
    if not h.is_control or len(batch) < HEADER_SIZE:
        return None
    records = decode_records(batch)
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        return None
    _, kind = _KEY.unpack_from(records[0].key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    value = records[0].value or b""
    epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else -1
    return EndTxnMarker(ControlType(kind), epoch)


__all__ = ["ControlType", "EndTxnMarker", "build_end_txn_marker", "read_end_txn_marker"]
