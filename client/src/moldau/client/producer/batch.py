"""ProducerBatch: records for one partition, encoded straight into a pooled buffer.

Records are written in the v2 record format as they are appended, after room for the
61-byte batch header; when the batch is sent the header is filled in (and the records section
compressed if asked), so building a request copies nothing per record. A batch completes
exactly once: its record callbacks run in append order, each guarded so one that raises
does not stop the rest, and only then do the record futures resolve. A record's offset is
the batch's base offset plus the record's index in the batch.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

import crc32c

from moldau.client.types import RecordMetadata, TopicPartition
from moldau.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
)
from moldau.records.codec import MAGIC, encode_varint
from moldau.records.compression import compress

log = logging.getLogger("moldau.client.producer")

Callback = Callable[[RecordMetadata | None, Exception | None], Any]
Headers = Sequence[tuple[str, bytes | None]]

# Unsigned varints 0..2**14-1 (one or two bytes): record lengths and offset deltas of
# ordinary batches and the zigzag of small timestamp deltas all come from this table.
_UV = [bytes((z,)) for z in range(0x80)] + [
    bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(0x80, 1 << 14)]
_UV_LIMIT = len(_UV)
_CRC = struct.Struct(">I")
# Worst case of the fixed fields around key, value and headers: length (5), attributes (1),
# timestamp delta (10), offset delta (5), key and value lengths (5 each), header count (5).
RECORD_OVERHEAD_MAX = 36
_done_lock = threading.Lock()


def _uvarint(z: int) -> bytes:
    if z < _UV_LIMIT:
        return _UV[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _header_bytes(headers: Headers) -> bytes:
    out = [_uvarint(len(headers) << 1)]
    for name, value in headers:
        raw = name.encode() if isinstance(name, str) else bytes(name)
        out.append(_uvarint(len(raw) << 1))
        out.append(raw)
        if value is None:
            out.append(b"\x01")
        else:
            out.append(_uvarint(len(value) << 1))
            out.append(bytes(value))
    return b"".join(out)


def estimate_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    """An upper bound of a record's encoded size."""
    size = RECORD_OVERHEAD_MAX + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for name, hvalue in headers:
            size += 10 + len(name) * 4 + (len(hvalue) if hvalue else 0)
    return size


class ProducerBatch:
    __slots__ = (
        "_aio", "_callbacks", "_done_callbacks", "_event", "attempts", "base_offset",
        "base_sequence", "base_ts", "buffer", "buffer_size", "compression",
        "compression_level", "count", "created", "done", "drained", "error", "full",
        "in_flight", "is_transactional", "last_attempt", "limit", "log_append_time",
        "log_start_offset", "max_ts", "payload", "pos", "producer_epoch", "producer_id",
        "reenqueued", "retry_at", "sealed", "tp",
    )

    def __init__(self, tp: TopicPartition, buffer: bytearray, now: float, *,
                 compression: int = 0, compression_level: int | None = None,
                 limit: int | None = None) -> None:
        self.tp = tp
        self.buffer: bytearray | None = buffer
        self.buffer_size = len(buffer)
        self.limit = len(buffer) if limit is None else min(limit, len(buffer))
        self.pos = HEADER_SIZE
        self.count = 0
        self.base_ts = 0
        self.max_ts = -1
        self.compression = compression
        self.compression_level = compression_level
        self.created = now
        self.last_attempt = now
        self.drained = 0.0
        self.attempts = 0
        self.retry_at = 0.0
        self.full = False
        self.sealed: bytes | None = None  # compressed records section, kept for retries
        self.payload: bytes | memoryview | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.is_transactional = False
        self.in_flight = False
        self.reenqueued = False
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.error: BaseException | None = None
        self._callbacks: list[tuple[int, Callback, RecordFuture]] | None = None
        self._event: threading.Event | None = None
        self._aio: asyncio.Future[None] | None = None
        self._done_callbacks: list[Callable[[], None]] | None = None

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.tp} records={self.count} bytes={self.pos} "
                f"seq={self.base_sequence} attempts={self.attempts}>")

    # -------------------------------------------------------------------------- appending

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Headers | None, callback: Callback | None
                   ) -> RecordFuture | None:
        """Encode the record into the buffer; None (and the batch is closed for appends)
        when it does not fit. The first record always fits: the buffer was sized for it."""
        if self.full:
            return None
        count = self.count
        uv = _UV
        if count:
            delta = timestamp - self.base_ts
            if 0 <= delta < 8192:  # the usual case: a little after the first record
                ts_part = uv[delta << 1]
            else:
                z = (delta << 1) ^ (delta >> 63)
                ts_part = uv[z] if 0 <= z < _UV_LIMIT else encode_varint(delta)
        else:
            self.base_ts = timestamp
            ts_part = b"\x00"
        if key is None:
            key_len = b"\x01"
            key = b""
            key_size = -1
        else:
            key_size = len(key)
            key_len = uv[key_size << 1] if key_size < 8192 else _uvarint(key_size << 1)
        if value is None:
            value_len = b"\x01"
            value = b""
            value_size = -1
        else:
            value_size = len(value)
            value_len = uv[value_size << 1] if value_size < 8192 else _uvarint(value_size << 1)
        record = b"".join((b"\x00", ts_part, uv[count << 1] if count < 8192 else
                           _uvarint(count << 1), key_len, key, value_len, value,
                           _header_bytes(headers) if headers else b"\x00"))
        size = len(record)
        record = (uv[size << 1] if size < 8192 else _uvarint(size << 1)) + record
        pos = self.pos
        end = pos + len(record)
        if end > self.limit and count:
            self.full = True
            return None
        self.buffer[pos:end] = record  # type: ignore[index]
        self.pos = end
        self.count = count + 1
        if timestamp > self.max_ts:
            self.max_ts = timestamp
        future = RecordFuture(self, count, timestamp, key_size, value_size)
        if callback is not None:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append((count, callback, future))
        return future

    def close_for_appends(self) -> None:
        self.full = True

    @property
    def size(self) -> int:
        """Bytes of the batch as it stands (uncompressed)."""
        return self.pos

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    # -------------------------------------------------------------------------- sending

    def build(self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
              is_transactional: bool = False) -> bytes | memoryview:
        """The complete v2 batch to send. Compression happens once; a retry with other
        producer fields only rewrites the header and CRC."""
        self.full = True
        if (self.payload is not None and producer_id == self.producer_id
                and producer_epoch == self.producer_epoch
                and base_sequence == self.base_sequence
                and is_transactional == self.is_transactional):
            return self.payload
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        buffer = self.buffer
        assert buffer is not None
        attributes = 0
        if self.compression and self.sealed is None:
            self.sealed = compress(self.compression, memoryview(buffer)[HEADER_SIZE:self.pos],
                                   level=self.compression_level)
        if self.sealed is not None:
            attributes = self.compression
        if is_transactional:
            attributes |= TRANSACTIONAL_FLAG
        total = self.pos if self.sealed is None else HEADER_SIZE + len(self.sealed)
        header = HEADER.pack(0, total - LOG_OVERHEAD, -1, MAGIC, 0, attributes, self.count - 1,
                             self.base_ts, self.max_ts, producer_id, producer_epoch,
                             base_sequence, self.count)
        if self.sealed is not None:
            crc = crc32c.crc32c(self.sealed, crc32c.crc32c(header[ATTRIBUTES_OFFSET:]))
            payload: bytes | memoryview = b"".join(
                (header[:CRC_OFFSET], _CRC.pack(crc), header[ATTRIBUTES_OFFSET:], self.sealed))
        else:
            buffer[:HEADER_SIZE] = header
            view = memoryview(buffer)
            crc = crc32c.crc32c(view[ATTRIBUTES_OFFSET:total])
            _CRC.pack_into(buffer, CRC_OFFSET, crc)
            payload = view[:total]
        self.payload = payload
        return payload

    def reset_producer_state(self) -> None:
        """Forget the sequence (after an epoch bump); the next build assigns a new one."""
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self._release_payload()

    def _release_payload(self) -> None:
        payload = self.payload
        self.payload = None
        if isinstance(payload, memoryview):
            payload.release()

    # -------------------------------------------------------------------------- completion

    def complete(self, base_offset: int, log_append_time: int = -1,
                 log_start_offset: int = -1) -> bool:
        """Success; False if the batch had already completed."""
        if self.done:
            return False
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self._finish()
        return True

    def fail(self, error: BaseException) -> bool:
        """Failure of every record; False if the batch had already completed."""
        if self.done:
            return False
        self.error = error
        self._finish()
        return True

    def _finish(self) -> None:
        self._release_payload()
        callbacks = self._callbacks
        self._callbacks = None
        if callbacks:
            error = self.error
            if error is None:
                # Once per record: RecordMetadata built without NamedTuple's Python __new__.
                topic, partition = self.tp
                base = self.base_offset
                append_time = self.log_append_time
                make = tuple.__new__
                for index, callback, future in callbacks:
                    metadata = make(RecordMetadata, (
                        topic, partition, base + index if base >= 0 else -1,
                        append_time if append_time >= 0 else future._timestamp,
                        future._key_size, future._value_size))
                    try:
                        callback(metadata, None)
                    except Exception:
                        log.exception("producer callback for %s raised", self.tp)
            else:
                for _index, callback, _future in callbacks:
                    try:
                        callback(None, error)
                    except Exception:
                        log.exception("producer callback for %s raised", self.tp)
        with _done_lock:
            self.done = True
            event = self._event
        if event is not None:
            event.set()
        aio = self._aio
        if aio is not None and not aio.done():
            aio.set_result(None)
        done_callbacks = self._done_callbacks
        self._done_callbacks = None
        if done_callbacks:
            for done_callback in done_callbacks:
                try:
                    done_callback()
                except Exception:
                    log.exception("done callback for %s raised", self.tp)

    def wait(self, timeout: float | None) -> bool:
        """Block the calling thread until the batch completes (not on the loop thread)."""
        with _done_lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """callback() after completion (at once if already complete), on the loop thread."""
        with _done_lock:
            if not self.done:
                if self._done_callbacks is None:
                    self._done_callbacks = []
                self._done_callbacks.append(callback)
                return
        callback()

    def aio_future(self) -> asyncio.Future[None]:
        """A future on the running loop that resolves when the batch completes."""
        if self._aio is None:
            self._aio = asyncio.get_running_loop().create_future()
            if self.done:
                self._aio.set_result(None)
        return self._aio


class RecordFuture:
    """The result of one send(): awaitable, or `.get(timeout)` from a thread. Resolves to
    RecordMetadata, or raises the batch's error."""

    __slots__ = ("_batch", "_index", "_key_size", "_timestamp", "_value_size")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int, key_size: int,
                 value_size: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
        self._key_size = key_size
        self._value_size = value_size

    def __repr__(self) -> str:
        state = "pending" if not self._batch.done else (
            "failed" if self._batch.error is not None else "done")
        return f"<RecordFuture {self._batch.tp} #{self._index} {state}>"

    def _metadata(self) -> RecordMetadata:
        batch = self._batch
        base = batch.base_offset
        return RecordMetadata(batch.tp.topic, batch.tp.partition,
                              base + self._index if base >= 0 else -1,
                              batch.log_append_time if batch.log_append_time >= 0
                              else self._timestamp,
                              self._key_size, self._value_size)

    def done(self) -> bool:
        return self._batch.done

    def result(self) -> RecordMetadata:
        """The metadata of a completed send (raises its error, or if not complete)."""
        batch = self._batch
        if not batch.done:
            raise asyncio.InvalidStateError("Result is not ready.")
        if batch.error is not None:
            raise batch.error
        return self._metadata()

    def exception(self) -> BaseException | None:
        if not self._batch.done:
            raise asyncio.InvalidStateError("Exception is not set.")
        return self._batch.error

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged; KafkaTimeoutError after `timeout`."""
        if not self._batch.wait(timeout):
            from moldau.client.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} s for the record "
                                    f"to be acknowledged")
        return self.result()

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self._batch.add_done_callback(lambda: fn(self))

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.done:
            yield from batch.aio_future().__await__()
        return self.result()
