"""RecordAccumulator: per-partition queues of batches waiting to be sent.

A record goes into the last batch of its partition's queue if it fits, else into a new batch
on a buffer from the BufferPool. The sender asks which leader nodes have something to send
(`ready`: a full batch, a batch that has lingered `linger.ms`, memory pressure, a flush or a
close) and then takes batches for those nodes (`drain`: at most one batch per partition per
request, rotating the starting partition so none starves, up to `max.request.size`).

Appends may come from the caller's thread (the synchronous producer) while the sender runs
on the event loop; one lock guards the queues.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from moldau.client.errors import ClientClosedError, KafkaError
from moldau.client.metadata import Cluster
from moldau.client.network import ExponentialBackoff
from moldau.client.producer.batch import Callback, Headers, ProducerBatch, RecordFuture
from moldau.client.producer.buffer_pool import BufferPool
from moldau.client.types import TopicPartition
from moldau.records.batch import HEADER_SIZE

if TYPE_CHECKING:
    from moldau.client.producer.transaction_manager import TransactionManager

# Bytes of a Produce request around the batches (header, topic names, acks, ...), roughly.
REQUEST_OVERHEAD = 128


class ReadyCheck(NamedTuple):
    ready_nodes: set[int]
    # Seconds until some batch may become sendable (linger or retry backoff ends).
    next_ready_check: float
    unknown_leader_topics: set[str]
    # Seconds until the oldest queued batch reaches delivery.timeout.ms.
    next_expiry: float


class RecordAccumulator:
    def __init__(self, pool: BufferPool, *, batch_size: int = 16384, compression: int = 0,
                 compression_level: int | None = None, linger_ms: int = 5,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 delivery_timeout_ms: int = 120000,
                 transaction_manager: TransactionManager | None = None) -> None:
        self.pool = pool
        self.batch_size = batch_size
        self.compression = compression
        self.compression_level = compression_level
        self.linger = linger_ms / 1000
        self.retry_backoff = ExponentialBackoff(retry_backoff_ms / 1000,
                                                retry_backoff_max_ms / 1000)
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.tm = transaction_manager
        # Set for a transactional producer: each record's partition joins the transaction.
        self._txn = transaction_manager if transaction_manager is not None and \
            transaction_manager.is_transactional else None
        self._lock = threading.Lock()
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._drain_index: dict[int, int] = {}
        self._flushes = 0
        self.closed = False

    # -------------------------------------------------------------------------- appending

    def buffer_size_for(self, record_size: int) -> int:
        return max(self.batch_size, HEADER_SIZE + record_size)

    def try_append(self, tp: TopicPartition, timestamp: int, key: bytes | None,
                   value: bytes | None, headers: Headers | None, callback: Callback | None
                   ) -> RecordFuture | None:
        """Append to the partition's open batch; None when a new batch is needed."""
        if self._txn is not None:
            self._txn.maybe_add_partition(tp)
        with self._lock:
            if self.closed:
                raise ClientClosedError("Producer closed while send in progress")
            queue = self._batches.get(tp)
            if queue:
                return queue[-1].try_append(timestamp, key, value, headers, callback)
        return None

    def append_new(self, tp: TopicPartition, buffer: bytearray, now: float, timestamp: int,
                   key: bytes | None, value: bytes | None, headers: Headers | None,
                   callback: Callback | None) -> tuple[RecordFuture, bool]:
        """Append into a new batch on `buffer` (unless another thread opened a batch with
        room meanwhile). Returns the future and whether `buffer` was used; if not, the
        caller gives it back to the pool. (try_append for `tp` came first, so a
        transaction has the partition already.)"""
        with self._lock:
            if self.closed:
                raise ClientClosedError("Producer closed while send in progress")
            queue = self._batches.get(tp)
            if queue is None:
                queue = self._batches[tp] = deque()
            elif queue:
                future = queue[-1].try_append(timestamp, key, value, headers, callback)
                if future is not None:
                    return future, False
            batch = ProducerBatch(tp, buffer, now, compression=self.compression,
                                  compression_level=self.compression_level,
                                  limit=self.batch_size)
            future = batch.try_append(timestamp, key, value, headers, callback)
            assert future is not None, "the first record of a batch always fits"
            queue.append(batch)
            self._incomplete.add(batch)
            return future, True

    # -------------------------------------------------------------------------- sending

    def ready(self, cluster: Cluster, now: float) -> ReadyCheck:
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        next_check = math.inf
        next_expiry = math.inf
        exhausted = self.pool.queued > 0
        force = exhausted or self.closed or self._flushes > 0
        with self._lock:
            queues = [(tp, queue[0], len(queue)) for tp, queue in self._batches.items()
                      if queue]
        linger = self.linger
        for tp, batch, length in queues:
            expiry = batch.created + self.delivery_timeout - now
            if expiry < next_expiry:
                next_expiry = expiry
            leader = cluster.leader_for(tp)
            if leader is None:
                unknown.add(tp.topic)
                continue
            if leader in ready_nodes:
                continue
            if batch.attempts and batch.retry_at > now:
                next_check = min(next_check, batch.retry_at - now)
                continue
            waited = now - batch.last_attempt
            if force or length > 1 or batch.full or waited >= linger:
                ready_nodes.add(leader)
            else:
                next_check = min(next_check, linger - waited)
        return ReadyCheck(ready_nodes, next_check, unknown, max(next_expiry, 0.0))

    def drain(self, cluster: Cluster, nodes: set[int], max_size: int,
              now: float) -> dict[int, list[ProducerBatch]]:
        """Take sendable batches for each node: one per partition, up to `max_size`."""
        drained: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            batches = self._drain_node(cluster, node, max_size, now)
            if batches:
                drained[node] = batches
        return drained

    def _drain_node(self, cluster: Cluster, node: int, max_size: int,
                    now: float) -> list[ProducerBatch]:
        parts = cluster.partitions_for_node(node)
        if not parts:
            return []
        tm = self.tm
        size = REQUEST_OVERHEAD
        ready: list[ProducerBatch] = []
        start = index = self._drain_index.get(node, 0) % len(parts)
        while True:
            tp = parts[index]
            self._drain_index[node] = index
            index = (index + 1) % len(parts)
            queue = self._batches.get(tp)
            if queue:
                with self._lock:
                    first = queue[0] if queue else None
                    if first is not None and not (first.attempts and first.retry_at > now) \
                            and (tm is None or tm.may_drain(first)):
                        if ready and size + first.size > max_size:
                            break
                        queue.popleft()
                        first.close_for_appends()
                        if tm is not None and not first.has_sequence:
                            tm.assign_sequence(first)
                        ready.append(first)
                        size += first.size
                        first.drained = now
            if index == start:
                break
        return ready

    def reenqueue(self, batch: ProducerBatch, now: float) -> None:
        """Put a batch to retry back at the front of its queue (in sequence order when
        sequences are used) with an exponential retry backoff."""
        batch.attempts += 1
        batch.last_attempt = now
        batch.retry_at = now + self.retry_backoff.backoff(batch.attempts - 1)
        batch.reenqueued = True
        batch.in_flight = False
        with self._lock:
            queue = self._batches.get(batch.tp)
            if queue is None:
                queue = self._batches[batch.tp] = deque()
            if batch.has_sequence:
                ahead: list[ProducerBatch] = []
                while queue and queue[0].has_sequence and \
                        queue[0].base_sequence < batch.base_sequence:
                    ahead.append(queue.popleft())
                queue.appendleft(batch)
                for earlier in reversed(ahead):
                    queue.appendleft(earlier)
            else:
                queue.appendleft(batch)

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than delivery.timeout.ms."""
        expired: list[ProducerBatch] = []
        limit = self.delivery_timeout
        with self._lock:
            for queue in self._batches.values():
                while queue and now - queue[0].created >= limit:
                    batch = queue.popleft()
                    batch.close_for_appends()
                    expired.append(batch)
        return expired

    # -------------------------------------------------------------------------- completion

    def deallocate(self, batch: ProducerBatch) -> None:
        """Release a completed batch's memory."""
        self._incomplete.discard(batch)
        buffer = batch.buffer
        if buffer is not None:
            batch.buffer = None
            self.pool.deallocate(buffer, batch.buffer_size)

    def has_undrained(self) -> bool:
        with self._lock:
            return any(self._batches.values())

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def incomplete_batches(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    def begin_flush(self) -> None:
        self._flushes += 1

    def end_flush(self) -> None:
        self._flushes -= 1

    @property
    def flush_in_progress(self) -> bool:
        return self._flushes > 0

    async def await_flush_completion(self) -> None:
        """Wait for every batch that exists now to complete."""
        for batch in list(self._incomplete):
            if not batch.done:
                await batch.aio_future()

    def close(self) -> None:
        """No more appends; everything queued becomes sendable at once."""
        with self._lock:
            self.closed = True

    def abort_undrained(self, error: KafkaError) -> list[ProducerBatch]:
        """Fail every batch still queued (not in flight); returns them."""
        with self._lock:
            queued = [batch for queue in self._batches.values() for batch in queue]
            for queue in self._batches.values():
                queue.clear()
        for batch in queued:
            batch.close_for_appends()
            batch.fail(error)
            self.deallocate(batch)
        return queued

    def abort_batches(self, error: KafkaError) -> list[ProducerBatch]:
        """Fail every incomplete batch (forced close); returns them."""
        with self._lock:
            for queue in self._batches.values():
                for batch in queue:
                    batch.close_for_appends()
                queue.clear()
        aborted = []
        for batch in list(self._incomplete):
            if batch.fail(error):
                aborted.append(batch)
            self.deallocate(batch)
        return aborted

