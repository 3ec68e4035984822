"""The transaction coordinator (Kafka's TransactionCoordinator, transaction version 1).

A transactional id is coordinated by the leader of its `__transaction_state` partition, once
that partition is loaded. Every change is written there (acks=all) before the client is
answered. Ending a transaction is two-phase: PrepareCommit/PrepareAbort is written and
acknowledged, then the markers go to every partition of the transaction (markers.py), then
CompleteCommit/CompleteAbort is written. A new coordinator resumes the second phase of every
prepared transaction it loads.

All state lives on the event loop; a change in flight is the id's `pending` state, and
requests that meet one get CONCURRENT_TRANSACTIONS, which clients retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from moldau.broker.coordinators.group.loading import PartitionLoader
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.group.write_errors import store_error
from moldau.broker.coordinators.topic import CoordinatorTopic
from moldau.broker.coordinators.transaction.markers import (
    CoordinatorFenced,
    Marker,
    MarkerChannel,
)
from moldau.broker.coordinators.transaction.metadata import (
    IDLE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    CompleteAbort,
    CompleteCommit,
    Dead,
    Empty,
    Ongoing,
    PrepareAbort,
    PrepareCommit,
    Transition,
    TxnMetadata,
    apply,
    prepare,
)
from moldau.broker.coordinators.transaction.records import (
    TRANSACTION_TOPIC,
    TxnState,
    encode_key,
    encode_value,
)
from moldau.broker.coordinators.transaction.replay import replay
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.transactions")

COMPLETE_RETRY_BACKOFF_S = 0.5
# Kafka waits up to the request timeout (30 s by default) for a state write's replicas.
STATE_WRITE_TIMEOUT_MS = 30000
# A producer id and epoch, as InitProducerId answers them.
ProducerIdAndEpoch = tuple[ErrorCode, int, int]


@dataclass(frozen=True)
class TxnSettings:
    """Kafka's settings and defaults: transaction.max.timeout.ms,
    transaction.abort.timed.out.transaction.cleanup.interval.ms,
    transactional.id.expiration.ms and
    transaction.remove.expired.transaction.cleanup.interval.ms."""

    max_timeout_ms: int = 900000
    abort_interval_ms: int = 10000
    expiration_ms: int = 604800000
    expiration_interval_ms: int = 3600000


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, settings: TxnSettings, topic: CoordinatorTopic,
                 next_producer_id: Callable[[], Awaitable[int]], markers: MarkerChannel) -> None:
        self.settings = settings
        self.topic = topic
        self._next_producer_id = next_producer_id
        self.markers = markers
        self.txns: dict[str, TxnMetadata] = {}
        self._loader: PartitionLoader[TxnMetadata] = PartitionLoader(
            topic.read, self._install, self._unload_partition, replay=replay,
            topic=TRANSACTION_TOPIC, noun="transactional id(s)", logger=log)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._completions: dict[str, asyncio.Task[None]] = {}

    # --- ownership -----------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.topic.partitions)

    def error_for(self, transactional_id: str) -> ErrorCode:
        """NONE when this node coordinates the id now; else NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS."""
        return self._loader.ownership.error(self.partition_of(transactional_id))

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool,
                             leader_epoch: int) -> None:
        """The replica manager's hook: leading a partition loads its ids, losing it drops
        them."""
        if topic == TRANSACTION_TOPIC:
            self._loader.on_leadership(partition, is_leader, leader_epoch)

    async def load_partitions(self, led: Iterable[tuple[int, int]]) -> None:
        for partition, epoch in led:
            self._loader.on_leadership(partition, True, epoch)
        await self._loader.wait()

    def _install(self, partition: int, loaded: dict[str, TxnMetadata]) -> None:
        self._unload_partition(partition)
        self.txns.update(loaded)
        for meta in loaded.values():
            if meta.state in PREPARED:
                log.info("Resuming the %s of transactional id %s (producer %d, epoch %d)",
                         "commit" if meta.state is PrepareCommit else "abort",
                         meta.transactional_id, meta.producer_id, meta.producer_epoch)
                self._spawn(self._complete(meta), meta.transactional_id)

    def _unload_partition(self, partition: int) -> int:
        gone = [txn_id for txn_id in self.txns if self.partition_of(txn_id) == partition]
        for txn_id in gone:
            del self.txns[txn_id]
            task = self._completions.pop(txn_id, None)
            if task is not None:
                task.cancel()
        return len(gone)

    def _owns(self, meta: TxnMetadata, epoch: int) -> bool:
        """Whether `meta` is still this node's, under the same coordinator epoch."""
        partition = self.partition_of(meta.transactional_id)
        return (self.txns.get(meta.transactional_id) is meta
                and self._loader.ownership.epoch(partition) == epoch
                and self.error_for(meta.transactional_id) is ErrorCode.none)

    def _spawn(self, coroutine: Coroutine[Any, Any, None], completing: str | None = None
               ) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if completing is not None:
            self._completions[completing] = task
            task.add_done_callback(lambda done: self._completions.pop(completing, None)
                                   if self._completions.get(completing) is done else None)

    # --- writes --------------------------------------------------------------------------

    async def _write(self, meta: TxnMetadata, transition: Transition) -> ErrorCode:
        """Write the prepared transition and apply it once acknowledged; the error the
        client is to be given."""
        txn_id = meta.transactional_id
        partition = self.partition_of(txn_id)
        epoch = self._loader.ownership.epoch(partition)
        value = None if transition.state is Dead else encode_value(transition.value())
        try:
            await self.topic.write(partition, [(encode_key(txn_id), value)])
        except KafkaError as exc:
            meta.pending = None
            error = store_error(exc.code, offsets=False)
            log.warning("Cannot write the %s state of transactional id %s: %s (answered %s)",
                        transition.state.display, txn_id, exc, error.name)
            return error
        if not self._owns(meta, epoch):
            meta.pending = None
            return ErrorCode.not_coordinator
        apply(meta, transition)
        if transition.state is Dead:
            del self.txns[txn_id]
        return ErrorCode.none

    # --- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(self, txn_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> ProducerIdAndEpoch:
        """A producer with this transactional id starts (again): its producer id and a new
        epoch, which fences every older producer of the id. `expected` is the producer id
        and epoch the producer had (KIP-360), None for a new producer."""
        if not txn_id:
            return ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = self.error_for(txn_id)
        if error is not ErrorCode.none:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        meta = self.txns.get(txn_id)
        if meta is None:
            try:
                producer_id = await self._next_producer_id()
            except KafkaError as exc:
                return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            error = self.error_for(txn_id)
            if error is not ErrorCode.none:
                return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            meta = self.txns.setdefault(txn_id, TxnMetadata(
                txn_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms))
        if meta.pending is not None:
            return ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if expected is not None and meta.producer_epoch != NO_PRODUCER_EPOCH:
            if expected == (meta.last_producer_id, meta.last_producer_epoch):
                # A retry of the bump that produced the current epoch: same answer.
                return ErrorCode.none, meta.producer_id, meta.producer_epoch
            if expected != (meta.producer_id, meta.producer_epoch):
                return ErrorCode.producer_fenced, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state is Ongoing:
            # The producer of the open transaction is a zombie now: abort what it left,
            # fenced by a new epoch; the new producer retries until that is done.
            self._spawn(self._abort(meta, "a new producer initialised the id"))
            return ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state not in IDLE:
            return ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return await self._bump(meta, timeout_ms, expected)

    async def _bump(self, meta: TxnMetadata, timeout_ms: int,
                    expected: tuple[int, int] | None) -> ProducerIdAndEpoch:
        producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
        if meta.epoch_exhausted:
            try:
                producer_id, epoch = await self._next_producer_id(), 0
            except KafkaError as exc:
                return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if meta.pending is not None or meta.state not in IDLE or \
                    self.txns.get(meta.transactional_id) is not meta:
                return ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        last = (meta.producer_id, meta.producer_epoch) if expected is not None \
            else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        transition = prepare(meta, Empty, _now_ms(), producer_id=producer_id,
                             producer_epoch=epoch, timeout_ms=timeout_ms, start_ms=-1,
                             last_producer_id=last[0], last_producer_epoch=last[1])
        error = await self._write(meta, transition)
        if error is not ErrorCode.none:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        log.info("Initialised transactional id %s: producer %d, epoch %d",
                 meta.transactional_id, producer_id, epoch)
        return ErrorCode.none, producer_id, epoch

    # --- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------

    def _check_producer(self, txn_id: str, producer_id: int, epoch: int
                        ) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self.error_for(txn_id)
        if error is not ErrorCode.none:
            return error, None
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        if meta.pending is not None:
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    async def add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                             partitions: dict[str, set[int]]) -> ErrorCode:
        """The transaction writes to `partitions`: they get its markers when it ends."""
        error, meta = self._check_producer(txn_id, producer_id, epoch)
        if meta is None:
            return error
        if meta.state not in IDLE and meta.state is not Ongoing:
            return ErrorCode.concurrent_transactions
        if meta.state is Ongoing and meta.has_partitions(partitions):
            return ErrorCode.none
        now = _now_ms()
        merged = {topic: set(parts) for topic, parts in meta.partitions.items()}
        for topic, parts in partitions.items():
            merged.setdefault(topic, set()).update(parts)
        transition = prepare(meta, Ongoing, now, partitions=merged,
                             start_ms=meta.start_ms if meta.state is Ongoing else now)
        return await self._write(meta, transition)

    def verify_partitions(self, txn_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]
                          ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890's check for a partition leader (AddPartitionsToTxn with VerifyOnly): is
        each partition in the producer's ongoing transaction? Partitions join the metadata
        once their addition is written and leave when the transaction completes; a change in
        flight is not waited for, as in Kafka (the leader's append checks again)."""
        wanted = list(partitions)
        error = self.error_for(txn_id)
        meta = self.txns.get(txn_id) if error is ErrorCode.none else None
        if error is ErrorCode.none:
            if meta is None or meta.producer_id != producer_id:
                error = ErrorCode.invalid_producer_id_mapping
            elif meta.producer_epoch != epoch:
                error = ErrorCode.producer_fenced
            elif meta.state in (PrepareCommit, PrepareAbort):
                error = ErrorCode.concurrent_transactions
        if meta is None or error is not ErrorCode.none:
            return dict.fromkeys(wanted, error)
        return {(topic, index): ErrorCode.none if index in meta.partitions.get(topic, ())
                else ErrorCode.transaction_abortable for topic, index in wanted}

    # --- EndTxn --------------------------------------------------------------------------

    async def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool
                      ) -> ErrorCode:
        error, meta = self._check_producer(txn_id, producer_id, epoch)
        if meta is None:
            return error
        wanted, other = (PrepareCommit, PrepareAbort) if commit else \
            (PrepareAbort, PrepareCommit)
        done, undone = (CompleteCommit, CompleteAbort) if commit else \
            (CompleteAbort, CompleteCommit)
        if meta.state is done:
            return ErrorCode.none  # a retry of the request that ended it
        if meta.state is wanted:
            return ErrorCode.concurrent_transactions  # still ending
        if meta.state in (other, undone, Empty):
            return ErrorCode.invalid_txn_state
        if meta.state is not Ongoing:
            return ErrorCode.concurrent_transactions
        error = await self._write(meta, prepare(meta, wanted, _now_ms()))
        if error is ErrorCode.none:
            self._spawn(self._complete(meta), txn_id)
        return error

    async def _abort(self, meta: TxnMetadata, reason: str) -> None:
        """Abort the open transaction with a bumped epoch, so its producer is fenced from it
        (Kafka's PrepareEpochFence, an in-memory step, then PrepareAbort: here one write)."""
        if meta.state is not Ongoing or meta.pending is not None:
            return
        epoch = meta.producer_epoch if meta.epoch_exhausted else meta.producer_epoch + 1
        log.info("Aborting the transaction of transactional id %s (producer %d, epoch %d): %s",
                 meta.transactional_id, meta.producer_id, meta.producer_epoch, reason)
        transition = prepare(meta, PrepareAbort, _now_ms(), producer_epoch=epoch,
                             last_producer_id=NO_PRODUCER_ID,
                             last_producer_epoch=NO_PRODUCER_EPOCH)
        if await self._write(meta, transition) is ErrorCode.none:
            self._spawn(self._complete(meta), meta.transactional_id)

    async def _complete(self, meta: TxnMetadata) -> None:
        """The second phase: markers on every partition, then Complete*."""
        txn_id = meta.transactional_id
        commit = meta.state is PrepareCommit
        epoch = self._loader.ownership.epoch(self.partition_of(txn_id))
        marker = Marker(meta.producer_id, meta.producer_epoch, epoch, commit,
                        tuple(meta.partition_list()))
        try:
            if not await self.markers.write(marker, lambda: self._owns(meta, epoch)):
                return
        except CoordinatorFenced as exc:
            log.warning("Stopped ending the transaction of %s: %s", txn_id, exc)
            return
        final = CompleteCommit if commit else CompleteAbort
        while self._owns(meta, epoch) and meta.state is not final:
            if await self._write(meta, prepare(meta, final, _now_ms())) is ErrorCode.none:
                log.debug("Transaction of %s: %s", txn_id, final.display)
                return
            await asyncio.sleep(COMPLETE_RETRY_BACKOFF_S)

    # --- timeouts and expiry -------------------------------------------------------------

    def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Abort, with an epoch bump, every open transaction older than its timeout."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [meta for meta in self.txns.values()
                   if meta.state is Ongoing and meta.pending is None
                   and meta.start_ms + meta.timeout_ms < now]
        for meta in expired:
            self._spawn(self._abort(meta, f"open longer than its timeout of "
                                          f"{meta.timeout_ms} ms"))
        return len(expired)

    def expire_ids(self, now_ms: int | None = None) -> int:
        """Remove ids with no transaction that have been idle for
        transactional.id.expiration.ms (a tombstone in the log)."""
        now = _now_ms() if now_ms is None else now_ms
        idle = [meta for meta in self.txns.values()
                if meta.state in IDLE and meta.pending is None
                and meta.last_update_ms + self.settings.expiration_ms <= now]
        for meta in idle:
            self._spawn(self._expire(meta))
        return len(idle)

    async def _expire(self, meta: TxnMetadata) -> None:
        if await self._write(meta, prepare(meta, Dead, _now_ms())) is ErrorCode.none:
            log.info("Removed transactional id %s: idle for more than %d ms",
                     meta.transactional_id, self.settings.expiration_ms)

    def start(self) -> None:
        """The periodic timeout and expiry checks (needs the running loop)."""
        self._spawn(self._every(self.settings.abort_interval_ms, self.abort_timed_out))
        self._spawn(self._every(self.settings.expiration_interval_ms, self.expire_ids))

    @staticmethod
    async def _every(interval_ms: int, check: Callable[[], int]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                check()
            except Exception:
                log.exception("Transaction coordinator check %s failed", check.__name__)

    # --- ListTransactions / DescribeTransactions -----------------------------------------

    def listing_error(self) -> ErrorCode:
        return ErrorCode.coordinator_load_in_progress if self._loader.ownership.loading \
            else ErrorCode.none

    def list(self, states: set[TxnState] | None, producer_ids: set[int] | None,
             min_duration_ms: int = -1) -> list[TxnMetadata]:
        """The ids this node coordinates, filtered as ListTransactions asks (empty filters
        match everything; the duration counts from the start of an open transaction)."""
        now = _now_ms()
        return [meta for meta in self.txns.values()
                if meta.producer_epoch != NO_PRODUCER_EPOCH
                and (not states or meta.state in states)
                and (not producer_ids or meta.producer_id in producer_ids)
                and (min_duration_ms < 0 or
                     (meta.start_ms >= 0 and now - meta.start_ms >= min_duration_ms))]

    def describe(self, txn_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self.error_for(txn_id)
        if error is not ErrorCode.none:
            return error, None
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_epoch == NO_PRODUCER_EPOCH:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, meta

    def shutdown(self) -> None:
        self._loader.shutdown()
        for task in list(self._tasks):
            task.cancel()
        self.markers.close()
