"""Record batches decoded into Arrow columns in bulk.

One Python step per record finds where each record starts (its length is a varint, so each
start depends on the one before); everything else is numpy over all the records of the batches
that share one buffer (the uncompressed batches of a fetch response share it): the varints of
the timestamp and offset deltas and of the key and value lengths, and the key and value
columns themselves, which are Arrow binary views into the fetched bytes (no per-record
objects) and become plain binary columns in one C++ copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np
import pyarrow as pa

from moldau.client import FetchedBatch
from moldau.records.codec import MIN_RECORD_BODY, decode_headers, read_uvarint

# A binary view of up to 12 bytes holds them inline; longer ones point into a data buffer.
_INLINE = 12
_STEPS = np.arange(_INLINE)
_SHIFTS = (7 * _STEPS).astype(np.uint64)


class InvalidRecordsError(ValueError):
    """A records section whose records do not parse."""


@dataclass
class RecordColumns:
    """The columns of the records of one or more batches, numpy and Arrow."""

    offsets: np.ndarray
    timestamps: np.ndarray  # epoch milliseconds
    log_append_time: np.ndarray  # bool per record
    keys: pa.Array
    values: pa.Array
    headers: list[list[tuple[str, bytes | None]]] | None

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, count: int) -> RecordColumns:
        return RecordColumns(self.offsets[:count], self.timestamps[:count],
                             self.log_append_time[:count], self.keys.slice(0, count),
                             self.values.slice(0, count),
                             None if self.headers is None else self.headers[:count])


def length_positions(data: bytes, pos: int, count: int, out: list[int]) -> int:
    """Append where each of `count` records begins (its length varint) and return where the
    last one ends: the one walk that cannot be vectorized, kept to a few steps per record.
    The lengths are checked afterwards, all at once (record_bounds)."""
    append = out.append
    for _ in range(count):
        append(pos)
        b = data[pos]
        if b < 0x80:
            pos += 1 + ((b >> 1) ^ -(b & 1))
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            pos += 2 + ((z >> 1) ^ -(z & 1))
        else:
            z, pos = read_uvarint(data, pos, 5)
            pos += (z >> 1) ^ -(z & 1)
    return pos


def record_bounds(buf: np.ndarray, batches: list[FetchedBatch]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's body starts and ends, over batches sharing `buf`."""
    positions: list[int] = []
    for batch in batches:
        if batch.header.record_count < 0:
            raise InvalidRecordsError(f"Invalid record count {batch.header.record_count}")
        try:
            last = length_positions(batch.records, batch.start, batch.header.record_count,
                                    positions)
        except IndexError:
            raise InvalidRecordsError("Records run past the end of the data") from None
        if last != batch.end:
            raise InvalidRecordsError(f"The batch's {batch.header.record_count} records end at "
                                      f"byte {last - batch.start} of {batch.end - batch.start}")
    begins = np.array(positions, dtype=np.int64)
    lengths, starts = varints(buf, begins, 5)
    ends = starts + lengths
    if (lengths < MIN_RECORD_BODY).any():
        raise InvalidRecordsError(f"Invalid record size {int(lengths.min())}")
    return starts, ends


def varints(buf: np.ndarray, at: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints starting at each position `at`, and the positions after them.
    Varints of one or two bytes (nearly all of them) take a short path."""
    last_byte = len(buf) - 1
    b0 = buf[at].astype(np.int64)
    b1 = buf[np.minimum(at + 1, last_byte)].astype(np.int64)
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    if (one | two).all():
        z = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
        return (z >> 1) ^ -(z & 1), at + np.where(one, 1, 2)
    steps = _STEPS[:width]
    raw = buf[np.minimum(at[:, None] + steps, last_byte)]
    last = np.argmax(raw < 0x80, axis=1)
    if not (raw[np.arange(len(at)), last] < 0x80).all():
        raise InvalidRecordsError("Invalid varint: too long")
    parts = (raw & 0x7F).astype(np.uint64) << _SHIFTS[:width]
    zu = np.where(steps <= last[:, None], parts, 0).sum(axis=1, dtype=np.uint64)
    value = (zu >> np.uint64(1)).astype(np.int64) ^ -(zu & np.uint64(1)).astype(np.int64)
    return value, at + last + 1


def binary_column(buf: np.ndarray, data: pa.Buffer, starts: np.ndarray,
                  sizes: np.ndarray) -> pa.Array:
    """A binary column of data[start:start + size] per row (size -1: null), built as views
    into `data`, then copied into a plain binary array in C++."""
    count = len(starts)
    lengths = np.maximum(sizes, 0).astype(np.int32)
    views = np.zeros((count, 16), dtype=np.uint8)
    words = views.view("<i4")
    words[:, 0] = lengths
    last = len(buf) - 1
    # A short value inline: its bytes after the length.
    short = np.flatnonzero((lengths > 0) & (lengths <= _INLINE))
    if len(short):
        head = buf[np.minimum(starts[short, None] + _STEPS, last)]
        head[_STEPS[None, :] >= lengths[short, None]] = 0
        views[short, 4:16] = head
    # A long one: its first 4 bytes, the data buffer's index (0, the only one) and the
    # value's offset in it.
    long = np.flatnonzero(lengths > _INLINE)
    if len(long):
        views[long, 4:8] = buf[starts[long, None] + _STEPS[:4]]
        words[long, 3] = starts[long]
    valid = sizes >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(pa.binary_view(), count, [validity, pa.py_buffer(views), data])
    return array.cast(pa.binary())


def decode_batches(batches: Sequence[FetchedBatch], with_headers: bool) -> RecordColumns:
    """Every record at or after each batch's first offset, as columns, in order."""
    parts = [_decode(list(group), with_headers)
             for _, group in groupby(batches, key=lambda b: id(b.records))]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        empty = pa.array([], pa.binary())
        return RecordColumns(np.empty(0, np.int64), np.empty(0, np.int64),
                             np.empty(0, bool), empty, empty, [] if with_headers else None)
    return RecordColumns(
        np.concatenate([p.offsets for p in parts]),
        np.concatenate([p.timestamps for p in parts]),
        np.concatenate([p.log_append_time for p in parts]),
        pa.concat_arrays([p.keys for p in parts]),
        pa.concat_arrays([p.values for p in parts]),
        [h for p in parts for h in p.headers] if with_headers else None)  # type: ignore[union-attr]


def _per_record(batches: list[FetchedBatch], counts: list[int], field: str) -> np.ndarray:
    return np.repeat(np.array([getattr(b.header, field) for b in batches], dtype=np.int64),
                     counts)


def _decode(batches: list[FetchedBatch], with_headers: bool) -> RecordColumns:
    """The records of batches that share one buffer."""
    data = batches[0].records
    counts = [batch.header.record_count for batch in batches]
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = record_bounds(buf, batches)
    ts_delta, at = varints(buf, starts + 1, 10)  # after the attributes byte
    offset_delta, at = varints(buf, at, 5)
    key_size, at = varints(buf, at, 5)
    key_start = at
    at = at + np.maximum(key_size, 0)
    value_size, at = varints(buf, at, 5)
    value_start = at
    at = at + np.maximum(value_size, 0)
    if (key_size < -1).any() or (value_size < -1).any() or (at >= ends).any():
        raise InvalidRecordsError("Invalid key or value length")
    offsets = _per_record(batches, counts, "base_offset") + offset_delta
    appended = np.repeat(np.array([b.header.log_append_time for b in batches]), counts)
    timestamps = np.where(appended, _per_record(batches, counts, "max_timestamp"),
                          _per_record(batches, counts, "base_timestamp") + ts_delta)
    keep = offsets >= np.repeat(np.array([b.first_offset for b in batches]), counts)
    headers = None
    if with_headers:
        headers = []
        for index in np.flatnonzero(keep):
            found: list[tuple[str, bytes | None]] = []
            if buf[at[index]] != 0:
                decode_headers(data, int(at[index]), int(ends[index]), found)
            headers.append(found)
    if not keep.all():
        offsets, timestamps, appended, key_size, key_start, value_size, value_start = (
            a[keep] for a in (offsets, timestamps, appended, key_size, key_start, value_size,
                              value_start))
    shared = pa.py_buffer(data)
    return RecordColumns(offsets, timestamps, appended,
                         binary_column(buf, shared, key_start, key_size),
                         binary_column(buf, shared, value_start, value_size), headers)
