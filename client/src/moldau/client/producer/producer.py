"""AsyncProducer: the producer's public async API over the accumulator and the sender.

`await producer.send(...)` serializes the record, picks its partition, appends it to a
batch and returns a RecordFuture at once; the record is sent in the background. It waits
only when the topic's metadata is not known yet or buffer memory is short, for at most
`max.block.ms`. The common case takes no await at all, which is also what lets the
synchronous Producer append from its caller's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from moldau.client.config import parse_producer_config
from moldau.client.errors import (
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from moldau.client.metadata import Cluster, Metadata
from moldau.client.network import NetworkClient
from moldau.client.producer.accumulator import RecordAccumulator
from moldau.client.producer.batch import (
    RECORD_OVERHEAD_MAX,
    Callback,
    Headers,
    RecordFuture,
    estimate_size,
)
from moldau.client.producer.buffer_pool import BufferPool
from moldau.client.producer.partitioner import DefaultPartitioner, PartitionerFn, murmur2
from moldau.client.producer.sender import Sender
from moldau.client.producer.transaction_manager import TransactionManager, TxnState
from moldau.client.producer.transactions import TransactionMethods
from moldau.client.producer.txn_requests import TxnRequests
from moldau.client.serialization import Serializer, resolve_serializer, serialize_bytes
from moldau.client.types import RecordMetadata, TopicPartition
from moldau.records.batch import HEADER_SIZE, Compression

log = logging.getLogger("moldau.client.producer")

HeadersInput = Iterable[tuple[str, Any]] | Mapping[str, Any] | None


def normalize_headers(headers: HeadersInput) -> list[tuple[str, bytes | None]] | None:
    """Headers as (str, bytes | None) pairs; str values are UTF-8 encoded."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, got {type(name).__name__}")
        if value is not None and type(value) is not bytes:
            value = value.encode() if isinstance(value, str) else bytes(value)
        out.append((name, value))
    return out or None


class _Pending:
    """A serialized record that has to wait for metadata or memory."""

    __slots__ = ("args",)

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.args = args


class AsyncProducer(TransactionMethods):
    """Kafka producer for asyncio.

    `config` uses Kafka's setting names (`{"bootstrap.servers": "host:9092", "acks": "all"}`);
    keyword arguments with underscores (`linger_ms=10`) are merged in. Keys and values are
    serialized by `key_serializer` / `value_serializer` ("bytes" (default: bytes or str),
    "str", "json" or a callable). `partitioner` is an optional
    callable(topic, key_bytes, partition_count) -> partition. With a `transactional.id`
    the transaction methods of TransactionMethods apply (init_transactions() first).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 key_serializer: str | Serializer | None = None,
                 value_serializer: str | Serializer | None = None,
                 partitioner: PartitionerFn | None = None, **settings: Any) -> None:
        cfg = parse_producer_config(config, settings)
        self.config = cfg
        self.client_id: str = cfg["client.id"]
        self._key_serializer = resolve_serializer(key_serializer, "key serializer")
        self._value_serializer = resolve_serializer(value_serializer, "value serializer")
        self._custom_partitioner = partitioner or cfg["partitioner.class"]
        if self._custom_partitioner is not None and not callable(self._custom_partitioner):
            raise TypeError("partitioner.class must be a callable")
        self._partitioner = DefaultPartitioner(ignore_keys=cfg["partitioner.ignore.keys"])
        self._max_block = cfg["max.block.ms"] / 1000
        self._max_request_size = cfg["max.request.size"]
        self._total_memory = cfg["buffer.memory"]
        self.metadata = Metadata(cfg["bootstrap.servers"], max_age_ms=cfg["metadata.max.age.ms"],
                                 retry_backoff_ms=cfg["retry.backoff.ms"],
                                 retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
                                 allow_auto_topic_creation=True,
                                 topic_idle_ms=cfg["metadata.max.idle.ms"])
        self.network = NetworkClient.from_config(cfg, self.metadata)
        self.pool = BufferPool(cfg["buffer.memory"], cfg["batch.size"])
        self.transaction_manager = TransactionManager(
            cfg["transactional.id"], cfg["transaction.timeout.ms"]) \
            if cfg["enable.idempotence"] else None
        self.transactions = TxnRequests(
            self.transaction_manager, self.network, retry_backoff_ms=cfg["retry.backoff.ms"],
            retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
            request_timeout_ms=cfg["request.timeout.ms"]) \
            if self.transaction_manager is not None and cfg["transactional.id"] else None
        self._txn_state = self.transaction_manager if self.transactions is not None else None
        # Transaction calls still running after their caller timed out, by name: calling
        # the same method again waits for the same call, as in Kafka's client.
        self._txn_calls: dict[str, asyncio.Task[Any]] = {}
        codec = Compression.NAMES[cfg["compression.type"]]
        level = {Compression.GZIP: cfg["compression.gzip.level"],
                 Compression.ZSTD: cfg["compression.zstd.level"]}.get(codec)
        self.accumulator = RecordAccumulator(
            self.pool, batch_size=cfg["batch.size"], compression=codec,
            compression_level=None if level is None or level < 0 else level,
            linger_ms=cfg["linger.ms"], retry_backoff_ms=cfg["retry.backoff.ms"],
            retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
            delivery_timeout_ms=cfg["delivery.timeout.ms"],
            transaction_manager=self.transaction_manager)
        self.sender = Sender(self.accumulator, self.metadata, self.network,
                             acks=cfg["acks"], request_timeout_ms=cfg["request.timeout.ms"],
                             max_request_size=cfg["max.request.size"],
                             retries=cfg["retries"],
                             delivery_timeout_ms=cfg["delivery.timeout.ms"],
                             retry_backoff_ms=cfg["retry.backoff.ms"],
                             transaction_manager=self.transaction_manager,
                             transactions=self.transactions)
        self._started = False
        self._closed = False
        self._metadata_task: asyncio.Task[None] | None = None
        self._now = time.time
        # Per-record shortcuts: bytes pass the default serializer untouched; the largest
        # record size allowed; the sticky partitions; interned TopicPartitions per topic.
        self._key_passthrough = self._key_serializer is serialize_bytes
        self._value_passthrough = self._value_serializer is serialize_bytes
        self._record_limit = min(self._max_request_size, self._total_memory) - HEADER_SIZE
        self._ignore_keys = self._partitioner.ignore_keys
        self._sticky_current = self._partitioner.sticky.current
        self._tps: dict[str, list[TopicPartition]] = {}
        self._tps_lock = threading.Lock()
        self._batch_opened = False

    # -------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the background tasks (done by the first send if not called)."""
        if self._started:
            return
        if self._closed:
            raise ClientClosedError("Cannot start a closed producer")
        self._started = True
        loop = asyncio.get_running_loop()
        self.pool._loop = loop
        self._metadata_task = loop.create_task(self.metadata.run(self.network),
                                               name="moldau-producer-metadata")
        self.sender.start()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (ignoring linger.ms) and wait until each of those
        records has completed, successfully or not."""
        if not self._started:
            return
        self.accumulator.begin_flush()
        self.sender.wakeup()
        try:
            await asyncio.wait_for(self.accumulator.await_flush_completion(), timeout)
        except TimeoutError:
            raise KafkaTimeoutError(f"Failed to flush accumulated records within "
                                    f"{timeout} s") from None
        finally:
            self.accumulator.end_flush()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, then release everything. After `timeout` seconds
        (None: no limit) the remaining records fail instead."""
        if self._closed:
            return
        if self._started and self.transactions is not None:
            await self._abort_on_close(timeout)
        self._closed = True
        if not self._started:
            self.pool.close()
            return
        if self.transactions is not None:
            self.transactions.closed = True
            self._cancel_txn_calls()
        self.accumulator.close()
        self.sender.initiate_close()
        task = self.sender.task
        assert task is not None
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            self.sender.force_close()
        except Exception:  # the sender's failure was logged; resources still go
            pass
        if not task.done():
            with contextlib.suppress(Exception):
                await task
        self.pool.close()
        self.metadata.close()
        if self._metadata_task is not None:
            self._metadata_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._metadata_task
        await self.network.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -------------------------------------------------------------------------- sending

    async def send(self, topic: str, value: Any = None, key: Any = None,
                   headers: HeadersInput = None, partition: int | None = None,
                   timestamp_ms: int | None = None, callback: Callback | None = None
                   ) -> RecordFuture:
        """Queue one record; returns a future of its RecordMetadata. `callback(metadata,
        error)` runs when the record completes, before the future resolves."""
        if not self._started:
            await self.start()
        result = self.try_send(topic, value, key, headers, partition, timestamp_ms, callback)
        if type(result) is RecordFuture:
            if self._batch_opened:
                # A batch was just closed by a new one: let the sender ship it now rather
                # than when this caller next waits (a tight send loop never does).
                self._batch_opened = False
                await asyncio.sleep(0)
            return result
        return await self.place(*result.args)  # type: ignore[union-attr]

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            headers: HeadersInput = None, partition: int | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await future

    def try_send(self, topic: str, value: Any, key: Any, headers: HeadersInput,
                 partition: int | None, timestamp_ms: int | None,
                 callback: Callback | None) -> RecordFuture | _Pending:
        """Serialize and append without waiting: a RecordFuture, or a _Pending to finish
        with `place()` on the loop. Safe to call from any thread.

        This runs once per record, so the common case (known topic, room in the open batch)
        is written out inline."""
        if self._closed:
            raise ClientClosedError("Cannot perform operation after producer has been closed")
        if self.sender.fatal_error is not None:
            raise self.sender.fatal_error
        if self._txn_state is not None and \
                self._txn_state.state is not TxnState.IN_TRANSACTION:
            self._txn_state.check_send()  # before waiting for any metadata
        if key is not None and not (self._key_passthrough and type(key) is bytes):
            key = self._key_serializer(key)
        if value is not None and not (self._value_passthrough and type(value) is bytes):
            value = self._value_serializer(value)
        headers = normalize_headers(headers) if headers else None
        if timestamp_ms is None:
            timestamp_ms = int(self._now() * 1000)
        elif timestamp_ms < 0:
            raise ValueError(f"Invalid timestamp: {timestamp_ms}. Timestamp should always be "
                             f"non-negative or None.")
        size = RECORD_OVERHEAD_MAX + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size = estimate_size(key, value, headers)
        if size > self._record_limit:
            self._too_large(size)
        cluster = self.metadata.cluster
        count = cluster.partition_counts.get(topic)
        if count:
            sticky = False
            if partition is None:
                if self._custom_partitioner is not None:
                    partition = self._custom_partition(topic, key, count)
                elif key is None or self._ignore_keys:
                    partition = self._sticky_current.get(topic)
                    if partition is None:
                        partition = self._partitioner.sticky.partition(topic, cluster)
                    sticky = True
                else:
                    partition = (murmur2(key) & 0x7FFFFFFF) % count
            elif not 0 <= partition < count:
                return _Pending((topic, key, value, headers, partition, timestamp_ms, callback,
                                 size))
            partitions = self._tps.get(topic)
            if partitions is None or partition >= len(partitions):
                tp = self._topic_partition(topic, partition)
            else:
                tp = partitions[partition]
            future = self.accumulator.try_append(tp, timestamp_ms, key, value, headers,
                                                 callback)
            if future is not None:
                return future
            future = self._append_slower(tp, sticky, cluster, timestamp_ms, key, value,
                                         headers, callback, size)
            if future is not None:
                return future
            if sticky:
                partition = None  # place() picks the (possibly moved) sticky partition
        return _Pending((topic, key, value, headers, partition, timestamp_ms, callback, size))

    def _too_large(self, size: int) -> None:
        size += HEADER_SIZE
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than "
                f"{self._max_request_size}, which is the value of the max.request.size "
                f"configuration.")
        raise RecordTooLargeError(
            f"The message is {size} bytes when serialized which is larger than the total "
            f"memory buffer you have configured with the buffer.memory configuration.")

    def _topic_partition(self, topic: str, partition: int) -> TopicPartition:
        """Interned TopicPartition objects, so the per-record path creates none. A longer
        list replaces the old one whole, so lock-free readers always see a correct one."""
        with self._tps_lock:
            partitions = self._tps.get(topic, [])
            if len(partitions) <= partition:
                partitions = partitions + [TopicPartition(topic, index) for index in
                                           range(len(partitions), partition + 1)]
                self._tps[topic] = partitions
            return partitions[partition]

    def _custom_partition(self, topic: str, key: bytes | None, count: int) -> int:
        assert self._custom_partitioner is not None
        chosen = self._custom_partitioner(topic, key, count)
        if not isinstance(chosen, int) or not 0 <= chosen < count:
            raise ValueError(f"The partitioner returned {chosen!r} for topic {topic} with "
                             f"{count} partitions")
        return chosen

    def _route(self, topic: str, key: bytes | None, partition: int | None, count: int,
               cluster: Cluster) -> tuple[int, bool]:
        """(partition, chosen by the sticky partitioner)."""
        if partition is not None:
            return partition, False
        if self._custom_partitioner is not None:
            return self._custom_partition(topic, key, count), False
        if key is None or self._ignore_keys:
            return self._partitioner.sticky.partition(topic, cluster), True
        return (murmur2(key) & 0x7FFFFFFF) % count, False

    def _append_slower(self, tp: TopicPartition, sticky: bool, cluster: Cluster,
                       timestamp: int, key: bytes | None, value: bytes | None,
                       headers: Headers | None, callback: Callback | None, size: int
                       ) -> RecordFuture | None:
        """A new batch is needed: move keyless records to the next sticky partition first,
        then take a buffer if one is free right now (None otherwise)."""
        if sticky:
            moved = self._partitioner.sticky.next_partition(tp.topic, cluster, tp.partition)
            if moved != tp.partition:
                tp = self._topic_partition(tp.topic, moved)
                future = self.accumulator.try_append(tp, timestamp, key, value, headers,
                                                     callback)
                if future is not None:
                    return future
        buffer = self.pool.try_allocate(self.accumulator.buffer_size_for(size))
        if buffer is None:
            return None
        return self._append_new(tp, buffer, timestamp, key, value, headers, callback)

    def _append_new(self, tp: TopicPartition, buffer: bytearray, timestamp: int,
                    key: bytes | None, value: bytes | None, headers: Headers | None,
                    callback: Callback | None) -> RecordFuture:
        future, used = self.accumulator.append_new(tp, buffer, time.monotonic(), timestamp,
                                                   key, value, headers, callback)
        if used:
            self.metadata.touch(tp.topic)
            self._batch_opened = True
            self.sender.wakeup_threadsafe()
        else:
            self.pool.deallocate(buffer)
        return future

    async def place(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: Headers | None, partition: int | None, timestamp: int,
                    callback: Callback | None, size: int) -> RecordFuture:
        """The waiting part of send: metadata for the topic, then buffer memory, each within
        what is left of max.block.ms. Runs on the producer's loop."""
        if not self._started:
            await self.start()
        start = time.monotonic()
        deadline = start + self._max_block
        while True:
            if self._closed:
                raise ClientClosedError("Producer closed while send in progress")
            cluster = self.metadata.cluster
            count = cluster.partition_count(topic)
            remaining = deadline - time.monotonic()
            if not count:
                cluster = await self.metadata.fetch_topic(topic, max(remaining, 0.0))
                continue
            if partition is not None and not 0 <= partition < count:
                if partition < 0:
                    raise ValueError(f"Invalid partition {partition}")
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"Partition {partition} of topic {topic} with partition count "
                        f"{count} is not present in metadata after "
                        f"{round(self._max_block * 1000)} ms.")
                self.metadata.add_topic(topic)
                self.metadata.request_update()
                await self.metadata.wait_for_change(remaining)
                continue
            break
        chosen, sticky = self._route(topic, key, partition, count, cluster)
        tp = self._topic_partition(topic, chosen)
        future = self.accumulator.try_append(tp, timestamp, key, value, headers, callback)
        if future is not None:
            return future
        if sticky:
            chosen = self._partitioner.sticky.next_partition(topic, cluster, chosen)
            tp = self._topic_partition(topic, chosen)
            future = self.accumulator.try_append(tp, timestamp, key, value, headers, callback)
            if future is not None:
                return future
        remaining = max(deadline - time.monotonic(), 0.0)
        buffer = await self.pool.allocate(self.accumulator.buffer_size_for(size), remaining)
        return self._append_new(tp, buffer, timestamp, key, value, headers, callback)

    # -------------------------------------------------------------------------- metadata

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of `topic` (waits up to max.block.ms for its metadata)."""
        if not self._started:
            await self.start()
        cluster = await self.metadata.fetch_topic(topic, self._max_block)
        return sorted(cluster.topics[topic].partitions)

    @property
    def fatal_error(self) -> KafkaError | None:
        return self.sender.fatal_error
