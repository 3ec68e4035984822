"""Sender: the producer's event-loop task that turns queued batches into Produce requests.

Each round it asks the accumulator which leader nodes have sendable data, keeps those whose
connection can take another request, drains batches for them and sends one Produce request
per node. Responses complete batches; retriable failures go back to the queue (with backoff,
within delivery.timeout.ms) after a metadata refresh when the leader may have moved. With
idempotence, the producer id is fetched first and sequence errors are resolved with the
TransactionManager. Between rounds it sleeps until woken (a new or full batch, a response,
a connection change) or until the next linger/backoff/expiry deadline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

from moldau.client.errors import (
    ClientClosedError,
    DisconnectedError,
    KafkaError,
    KafkaTimeoutError,
    error_for,
)
from moldau.client.metadata import REFRESH_ERRORS, Metadata
from moldau.client.network import NetworkClient
from moldau.client.producer.accumulator import RecordAccumulator
from moldau.client.producer.batch import ProducerBatch
from moldau.client.producer.transaction_manager import TransactionManager, TxnState
from moldau.client.producer.txn_requests import TxnRequests
from moldau.client.types import TopicPartition
from moldau.client.versions import TXN_V1_MAX, ApiKey
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.producer")

# Partitions join a transaction only while it may still commit: never during an abort.
ADDING_STATES = (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_produce(version: int, acks: int, timeout_ms: int, transactional_id: str | None,
                   batches: Sequence[tuple[str, int, bytes | memoryview]]) -> list[Any]:
    """The body of a Produce request (v3-v12) as pieces, batches included without copying.
    `batches` are (topic, partition, records) with each topic's entries adjacent."""
    flexible = version >= 9
    topics: dict[str, list[tuple[int, bytes | memoryview]]] = {}
    for topic, partition, records in batches:
        topics.setdefault(topic, []).append((partition, records))
    out: list[Any] = []
    if flexible:
        if transactional_id is None:
            out.append(b"\x00")
        else:
            raw = transactional_id.encode()
            out += (_uvarint(len(raw) + 1), raw)
        out.append(_ACKS_TIMEOUT.pack(acks, timeout_ms))
        out.append(_uvarint(len(topics) + 1))
        for topic, parts in topics.items():
            raw = topic.encode()
            out += (_uvarint(len(raw) + 1), raw, _uvarint(len(parts) + 1))
            for partition, records in parts:
                out += (_I32.pack(partition), _uvarint(len(records) + 1), records, b"\x00")
            out.append(b"\x00")
        out.append(b"\x00")
    else:
        if transactional_id is None:
            out.append(b"\xff\xff")
        else:
            raw = transactional_id.encode()
            out += (_I16.pack(len(raw)), raw)
        out.append(_ACKS_TIMEOUT.pack(acks, timeout_ms))
        out.append(_I32.pack(len(topics)))
        for topic, parts in topics.items():
            raw = topic.encode()
            out += (_I16.pack(len(raw)), raw, _I32.pack(len(parts)))
            for partition, records in parts:
                out += (_I32.pack(partition), _I32.pack(len(records)), records)
    return out


def _millis(value: Any) -> int:
    if value is None:
        return -1
    return round(value.timestamp() * 1000)


class Sender:
    def __init__(self, accumulator: RecordAccumulator, metadata: Metadata,
                 network: NetworkClient, *, acks: int = -1, request_timeout_ms: int = 30000,
                 max_request_size: int = 1048576, retries: int = 2**31 - 1,
                 delivery_timeout_ms: int = 120000, retry_backoff_ms: int = 100,
                 transaction_manager: TransactionManager | None = None,
                 transactions: TxnRequests | None = None) -> None:
        self.accumulator = accumulator
        self.metadata = metadata
        self.network = network
        self.acks = acks
        self.request_timeout_ms = request_timeout_ms
        self.max_request_size = max_request_size
        self.retries = retries
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.tm = transaction_manager
        self.transactions = transactions
        # Transactional producers speak the transaction protocol before KIP-890's v2.
        self._produce_max_version = TXN_V1_MAX[ApiKey.PRODUCE] if transactions else None
        self.in_flight_requests = 0
        self.fatal_error: KafkaError | None = None
        self._running = False
        self._force_close = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._pid_task: asyncio.Task[None] | None = None
        self._add_task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._threadsafe_pending = False
        network.add_listener(self.wakeup)
        # New leaders may make queued batches sendable.
        metadata.add_listener(lambda _cluster: self.wakeup())

    # -------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._running = True
        self._task = self._loop.create_task(self._run(), name="moldau-sender")

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def initiate_close(self) -> None:
        """Send what is queued, then stop."""
        self._running = False
        self.wakeup()

    def force_close(self) -> None:
        """Stop now; queued and in-flight batches fail."""
        self._running = False
        self._force_close = True
        self.wakeup()

    # -------------------------------------------------------------------------- waking

    def wakeup(self) -> None:
        """Run another round soon. Loop thread only; see wakeup_threadsafe."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wakeup_threadsafe(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self.wakeup()
            return
        if self._threadsafe_pending or self._loop is None:
            return
        self._threadsafe_pending = True
        try:
            self._loop.call_soon_threadsafe(self._wakeup_from_thread)
        except RuntimeError:  # the loop is closed
            self._threadsafe_pending = False

    def _wakeup_from_thread(self) -> None:
        self._threadsafe_pending = False
        self.wakeup()

    async def _sleep(self, timeout: float) -> None:
        if self._woken:
            self._woken = False
            await asyncio.sleep(0)
            return
        if timeout <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        handle = None if math.isinf(timeout) else loop.call_later(
            timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            if handle is not None:
                handle.cancel()
            self._waiter = None
            self._woken = False

    # -------------------------------------------------------------------------- main loop

    async def _run(self) -> None:
        try:
            while self._running:
                await self._sleep(self._run_once())
            # Closing: keep sending until nothing is queued or in flight (or forced).
            while not self._force_close and self.fatal_error is None and (
                    self.accumulator.has_undrained() or self.in_flight_requests > 0):
                await self._sleep(self._run_once())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("producer sender failed")
            self.fatal_error = KafkaError(ErrorCode.unknown_server_error,
                                          f"The producer's sender failed: {exc!r}")
            raise
        finally:
            for task in (self._pid_task, self._add_task):
                if task is not None:
                    task.cancel()
            if self._force_close or self.fatal_error is not None:
                error = self.fatal_error or ClientClosedError(
                    "Producer is closed forcefully.")
                for batch in self.accumulator.abort_batches(error):
                    if self.tm is not None:
                        self.tm.on_failure(batch, error)

    def _run_once(self) -> float:
        """One round; returns how long to sleep before the next unless woken."""
        now = time.monotonic()
        tm = self.tm
        if self.transactions is not None:
            self._run_transaction()
        elif tm is not None:
            if tm.bump_required and self.in_flight_requests == 0:
                tm.bump_epoch()
            if tm.needs_producer_id():
                self._ensure_producer_id()
        accumulator = self.accumulator
        cluster = self.metadata.cluster
        result = accumulator.ready(cluster, now)
        if result.unknown_leader_topics:
            for topic in result.unknown_leader_topics:
                self.metadata.add_topic(topic)
            self.metadata.request_update()
        timeout = min(result.next_ready_check, result.next_expiry)
        network = self.network
        sendable = set()
        for node in result.ready_nodes:
            if network.ready(node, now):
                sendable.add(node)
            else:
                timeout = min(timeout, max(network.connection_delay(node, now), 0.005))
        drained = accumulator.drain(cluster, sendable, self.max_request_size, now) \
            if sendable else {}
        for batch in accumulator.expired_batches(now):
            self._fail_batch(batch, KafkaTimeoutError(
                f"Expiring {batch.count} record(s) for {batch.tp}: "
                f"{round((now - batch.created) * 1000)} ms has passed since batch creation"))
        for node, batches in drained.items():
            self._send_produce(node, batches, now)
        if drained:
            return 0.0
        if sendable:
            # Ready nodes but nothing could be drained (ordering or backoff): check again
            # shortly rather than spin.
            timeout = min(timeout, self.retry_backoff)
        return timeout

    # -------------------------------------------------------------------------- transaction

    def _run_transaction(self) -> None:
        """Fail what a failed transaction still has queued; add new partitions to the
        transaction (one AddPartitionsToTxn at a time, with every partition new since)."""
        tm = self.tm
        assert tm is not None
        if tm.has_error:
            assert tm.last_error is not None
            for batch in self.accumulator.abort_undrained(tm.last_error):
                tm.on_failure(batch, tm.last_error)
        elif tm.state in ADDING_STATES and tm.has_partitions_to_add() and (
                self._add_task is None or self._add_task.done()):
            self._add_task = asyncio.get_running_loop().create_task(
                self._add_partitions(tm.take_partitions_to_add()),
                name="moldau-add-partitions-to-txn")

    async def partitions_settled(self) -> None:
        """Wait for the AddPartitionsToTxn in flight, if any, to end."""
        task = self._add_task
        if task is not None and not task.done():
            await asyncio.wait([task])

    async def _add_partitions(self, partitions: list[TopicPartition]) -> None:
        assert self.transactions is not None and self.tm is not None
        added = False
        try:
            await self.transactions.add_partitions(partitions)
            added = True
        except KafkaError as exc:  # recorded by the transaction manager
            log.debug("AddPartitionsToTxn for %s failed: %s", partitions, exc)
        finally:
            self.tm.partitions_added(partitions, added)
            self.wakeup()

    # -------------------------------------------------------------------------- producer id

    def _ensure_producer_id(self) -> None:
        if self._pid_task is None or self._pid_task.done():
            self._pid_task = asyncio.get_running_loop().create_task(
                self._init_producer_id(), name="moldau-init-producer-id")

    async def _init_producer_id(self) -> None:
        tm = self.tm
        assert tm is not None
        attempts = 0
        while self._running or self.accumulator.has_undrained():
            if self._force_close:
                return
            try:
                node = self.network.least_loaded_node()
            except KafkaError as exc:
                self.fatal_error = exc
                self.wakeup()
                return
            if node is None:
                await self.network.wait_for_event(
                    max(self.network.min_connection_delay(), 0.01))
                continue
            try:
                response = await self.network.request(node, ApiKey.INIT_PRODUCER_ID,
                                                      tm.init_producer_id_request())
            except KafkaError as exc:
                log.debug("InitProducerId via node %d failed: %s", node, exc)
                attempts += 1
                await asyncio.sleep(min(self.retry_backoff * 2 ** attempts, 1.0))
                continue
            code = ErrorCode(response.error_code)
            if code is ErrorCode.none:
                tm.set_producer_id(response.producer_id, response.producer_epoch)
                self.wakeup()
                return
            if not code.retriable and code not in (ErrorCode.coordinator_load_in_progress,
                                                   ErrorCode.not_coordinator):
                # A fatal error: nothing can be sent with idempotence.
                self.fatal_error = error_for(code, "InitProducerId failed")
                self._running = False
                self.wakeup()
                return
            attempts += 1
            await asyncio.sleep(min(self.retry_backoff * 2 ** attempts, 1.0))

    # -------------------------------------------------------------------------- produce

    def _send_produce(self, node: int, batches: list[ProducerBatch], now: float) -> None:
        tm = self.tm
        transactional_id = tm.transactional_id if tm is not None else None
        entries = []
        for batch in batches:
            payload = batch.build(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                  transactional_id is not None)
            entries.append((batch.tp.topic, batch.tp.partition, payload))
            batch.in_flight = True
        acks = self.acks
        timeout_ms = self.request_timeout_ms

        def encode(version: int) -> list[Any]:
            return encode_produce(version, acks, timeout_ms, transactional_id, entries)

        try:
            future = self.network.send(node, ApiKey.PRODUCE, encode,
                                       expect_response=acks != 0,
                                       max_version=self._produce_max_version)
        except KafkaError as exc:
            self._handle_result(batches, node, exc, None)
            return
        self.in_flight_requests += 1
        future.add_done_callback(lambda f: self._on_response(batches, node, f))

    def _on_response(self, batches: list[ProducerBatch], node: int,
                     future: asyncio.Future[Any]) -> None:
        self.in_flight_requests -= 1
        if future.cancelled():
            error: BaseException | None = DisconnectedError("Produce request cancelled")
            response = None
        else:
            error = future.exception()
            response = None if error is not None else future.result()
        self._handle_result(batches, node, error, response)
        self.wakeup()

    def _handle_result(self, batches: list[ProducerBatch], node: int,
                       error: BaseException | None, response: Any) -> None:
        now = time.monotonic()
        if error is not None:
            if isinstance(error, DisconnectedError):
                self.metadata.request_update()
            for batch in batches:
                self._complete_with_error(batch, error, None, now)
            return
        if self.acks == 0:
            for batch in batches:
                self._complete(batch, -1, -1, -1)
            return
        results = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                results[(topic.name, part.index)] = part
        for batch in batches:
            part = results.get(batch.tp)
            if part is None:
                self._complete_with_error(batch, KafkaError(
                    ErrorCode.unknown_server_error,
                    f"No response for {batch.tp} in the Produce response"), None, now)
                continue
            code = part.error_code
            if code == ErrorCode.none or code == ErrorCode.duplicate_sequence_number:
                self._complete(batch, part.base_offset, _millis(part.log_append_time),
                               part.log_start_offset)
            else:
                code = ErrorCode(code)
                leader = getattr(part, "current_leader", None)
                if leader is not None and leader.leader_id >= 0 and code in (
                        ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
                    # The broker names the new leader (KIP-951): use it without waiting
                    # for a metadata round trip.
                    self.metadata.update_leader(batch.tp, leader.leader_id,
                                                leader.leader_epoch)
                message = part.error_message
                if part.record_errors:
                    details = "; ".join(f"record {e.batch_index}: "
                                        f"{e.batch_index_error_message}"
                                        for e in part.record_errors[:5])
                    message = f"{message or code.name} ({details})"
                self._complete_with_error(batch, error_for(code, message), code, now)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                  log_start_offset: int) -> None:
        if self.tm is not None:
            self.tm.on_success(batch)
        batch.in_flight = False
        batch.complete(base_offset, log_append_time, log_start_offset)
        self.accumulator.deallocate(batch)

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        if self.tm is not None:
            self.tm.on_failure(batch, error)
        batch.in_flight = False
        batch.fail(error)
        self.accumulator.deallocate(batch)

    def _complete_with_error(self, batch: ProducerBatch, error: BaseException,
                             code: ErrorCode | None, now: float) -> None:
        retry: bool | None = None
        if self.tm is not None and code is not None:
            retry = self.tm.retry_decision(batch, code)
        if retry is None:
            retry = bool(getattr(error, "retriable", False))
        if retry and self._can_retry(batch, now):
            if code in REFRESH_ERRORS or isinstance(error, DisconnectedError):
                self.metadata.request_update()
            log.debug("retrying %r after %s", batch, error)
            self.accumulator.reenqueue(batch, now)
            return
        if code is not None and code in REFRESH_ERRORS:
            self.metadata.request_update()
        if retry and now - batch.created >= self.delivery_timeout:
            error = KafkaTimeoutError(
                f"Expiring {batch.count} record(s) for {batch.tp}: "
                f"{round((now - batch.created) * 1000)} ms has passed since batch creation "
                f"(last error: {error})")
        self._fail_batch(batch, error)

    def _can_retry(self, batch: ProducerBatch, now: float) -> bool:
        return (batch.attempts < self.retries and now - batch.created < self.delivery_timeout
                and not self._force_close and self.fatal_error is None)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
