"""Producer id, epoch and per-partition sequence numbers of the idempotent producer.

The broker deduplicates retried batches by (producer id, epoch, sequence), and rejects a
batch whose sequence leaves a gap, which keeps each partition in order even with several
requests in flight. This class does the client's half of that bookkeeping:

- the producer id and epoch, from InitProducerId before the first batch is sent;
- per partition the next sequence to assign and the batches sent but not yet resolved, in
  sequence order, so a retried batch is re-sent only in its turn;
- an epoch bump when a sequence can no longer be trusted (a batch with a sequence failed or
  expired, or the broker lost or rejected the producer's state). As in Kafka's client for
  non-transactional producers, the epoch is bumped locally once nothing is in flight, and
  every partition's sequences start again at 0, which the broker accepts for a newer epoch.

With a transactional id it also holds the transaction's state, as Kafka's client does:

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION,
    IN_TRANSACTION -> COMMITTING_TRANSACTION or ABORTING_TRANSACTION -> READY,
    IN_TRANSACTION or COMMITTING_TRANSACTION -> ABORTABLE_ERROR -> ABORTING_TRANSACTION,
    IN_TRANSACTION -> PREPARED_TRANSACTION (flushed and left open for another process to
    end: the producer's last state, in which closing does not abort),
    anything -> FATAL_ERROR (for good: every later call raises the error);

and the partitions of the current transaction: a partition gets its first send queued as
"new", goes to the coordinator in the next AddPartitionsToTxn (all new ones together), and
only once added may its batches be drained. Transactional producers never bump their epoch
locally: a batch that fails makes the transaction abortable, and after the abort a new epoch
comes from the coordinator (InitProducerId with the current id and epoch, KIP-360).
"""

from __future__ import annotations

import logging
import threading
from enum import Enum
from typing import Any

from moldau.client.errors import (
    IllegalStateError,
    KafkaError,
    ProducerFencedError,  # type: ignore[attr-defined]
    TransactionAbortableError,  # type: ignore[attr-defined]
    TransactionAbortedError,
    error_for,
)
from moldau.client.producer.batch import ProducerBatch
from moldau.client.types import TopicPartition
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.producer")

NO_PRODUCER_ID = -1
MAX_EPOCH = 32767
_SEQUENCE_MASK = 0x7FFFFFFF


class TxnState(Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    FATAL_ERROR = "FATAL_ERROR"

    def __str__(self) -> str:
        return self.value


_S = TxnState
# The states each state may be entered from (FATAL_ERROR: from any).
_SOURCES: dict[TxnState, frozenset[TxnState]] = {
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION,
                         _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION,
                                   _S.ABORTABLE_ERROR}),
    _S.PREPARED_TRANSACTION: frozenset({_S.IN_TRANSACTION}),
}

# Errors that fence this producer: another one with the same transactional id took over.
FENCING_ERRORS = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


class TransactionManager:
    def __init__(self, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.bump_required = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self._last_acked: dict[TopicPartition, int] = {}
        # Batches with a sequence that have not completed, per partition, in sequence order.
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self.state = TxnState.UNINITIALIZED
        self.last_error: KafkaError | None = None
        # The current transaction's partitions: waiting for AddPartitionsToTxn, in it, and
        # whether the coordinator knows of the transaction (partitions or offsets added).
        self._new_partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        self._partitions: set[TopicPartition] = set()
        self.offsets_added = False
        # Guards the partition sets: sends add to them from the caller's thread.
        self._lock = threading.Lock()

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    # -------------------------------------------------------------------------- producer id

    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def needs_producer_id(self) -> bool:
        return self.producer_id < 0

    def init_producer_id_request(self) -> dict[str, Any]:
        """With a producer id already, a transactional producer asks for its next epoch
        (KIP-360) rather than a new id, which keeps its sequences' history usable."""
        return {"transactional_id": self.transactional_id,
                "transaction_timeout": self.transaction_timeout_ms,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        log.debug("producer id %d epoch %d", producer_id, epoch)
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.bump_required = False
        self._reset_sequences()

    def reset_producer_id(self) -> None:
        """Forget the id (e.g. the epoch is exhausted): a new InitProducerId follows."""
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self._reset_sequences()

    def request_epoch_bump(self, reason: str) -> None:
        if not self.bump_required:
            log.info("producer %d will bump its epoch: %s", self.producer_id, reason)
        self.bump_required = True

    def bump_epoch(self) -> None:
        """Called by the sender once no produce request is in flight."""
        self.bump_required = False
        if self.producer_epoch >= MAX_EPOCH:
            self.reset_producer_id()
            return
        self.producer_epoch += 1
        self._reset_sequences()

    def _reset_sequences(self) -> None:
        for batches in self._in_flight.values():
            for batch in batches:
                if not batch.done:
                    batch.reset_producer_state()
        self._in_flight.clear()
        self._next_sequence.clear()
        self._last_acked.clear()

    # -------------------------------------------------------------------------- sequences

    def assign_sequence(self, batch: ProducerBatch) -> None:
        tp = batch.tp
        sequence = self._next_sequence.get(tp, 0)
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        batch.base_sequence = sequence
        self._next_sequence[tp] = (sequence + batch.count) & _SEQUENCE_MASK
        self._in_flight.setdefault(tp, []).append(batch)

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        batches = self._in_flight.get(tp)
        return batches[0].base_sequence if batches else -1

    def may_drain(self, batch: ProducerBatch) -> bool:
        """Whether `batch`, first in its partition's queue, may be sent now: a retried
        batch waits until every batch before it in sequence order is back in the queue."""
        if self.bump_required or self.producer_id < 0:
            return False
        if self.transactional_id is not None and batch.tp not in self._partitions:
            return False
        if batch.has_sequence:
            if batch.producer_id != self.producer_id or \
                    batch.producer_epoch != self.producer_epoch:
                batch.reset_producer_state()
                return True
            return batch.base_sequence == self.first_in_flight_sequence(batch.tp)
        return True

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        last = self._last_acked.get(batch.tp, -1)
        return batch.base_sequence == ((last + 1) & _SEQUENCE_MASK)

    # -------------------------------------------------------------------------- outcomes

    def _remove(self, batch: ProducerBatch) -> None:
        batches = self._in_flight.get(batch.tp)
        if batches and batch in batches:
            batches.remove(batch)
            if not batches:
                del self._in_flight[batch.tp]

    def on_success(self, batch: ProducerBatch) -> None:
        if not batch.has_sequence or batch.producer_epoch != self.producer_epoch or \
                batch.producer_id != self.producer_id:
            return
        self._remove(batch)
        last = (batch.base_sequence + batch.count - 1) & _SEQUENCE_MASK
        self._last_acked[batch.tp] = last

    def on_failure(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch failed for good. If it had a sequence, later batches of its partition
        would leave a gap, so the sequences start over under a new epoch. In a transaction
        the failure also dooms the transaction: it can only be aborted."""
        if self.transactional_id is not None:
            self._transaction_batch_failed(error)
        if not batch.has_sequence or batch.producer_id != self.producer_id or \
                batch.producer_epoch != self.producer_epoch:
            return
        self._remove(batch)
        self.request_epoch_bump(f"batch for {batch.tp} with sequence {batch.base_sequence} "
                                f"failed: {error}")

    def _transaction_batch_failed(self, error: BaseException) -> None:
        if isinstance(error, TransactionAbortedError) or \
                self.state is TxnState.ABORTING_TRANSACTION:
            return
        code = getattr(error, "code", None)
        if code in (ErrorCode.producer_fenced, ErrorCode.transactional_id_authorization_failed):
            self.fail_fatal(error if isinstance(error, KafkaError)
                            else error_for(code, str(error)))
        elif isinstance(error, KafkaError):
            self.fail_abortable(error)
        else:
            self.fail_abortable(KafkaError(ErrorCode.unknown_server_error, str(error)))

    def retry_decision(self, batch: ProducerBatch, code: ErrorCode) -> bool | None:
        """For sequence-related errors: True to retry, False to fail the batch; None when
        the error is not about sequences (the caller decides by its retriable flag)."""
        if code is ErrorCode.out_of_order_sequence_number:
            if not batch.has_sequence:
                return False
            last = self._last_acked.get(batch.tp, -1)
            if last >= 0 and batch.base_sequence <= last:
                # A later batch was written first (this one failed retriably, e.g. on a
                # leader that was not ready, while the next was in flight; a broker takes any
                # first sequence of a producer it has no state for). Its sequence cannot be
                # written any more: start a new epoch and send it again under that.
                return self._bump_and_retry(f"{batch.tp}: sequence {batch.base_sequence} "
                                            f"was overtaken by sequence {last}")
            # Retry when an earlier batch has not been written yet (it is being retried or
            # failed): this one is rejected only because of it. Otherwise the broker lost
            # records or state, and the batch fails.
            return not self.is_next_sequence(batch)
        if code in (ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_epoch):
            # The broker lost or no longer accepts this producer's state: start a new
            # epoch and send the batch again under it.
            return self._bump_and_retry(f"{code.name} for {batch.tp}")
        if code is ErrorCode.producer_fenced:
            return False
        return None

    def _bump_and_retry(self, reason: str) -> bool:
        """Retry the batch under a new epoch. A transactional producer gets its new epoch
        only from the coordinator after an abort, so its batch fails (and the transaction
        with it) instead."""
        self.request_epoch_bump(reason)
        return self.transactional_id is None

    # -------------------------------------------------------------------------- transaction

    def raise_if_error(self, action: str, *, aborting: bool = False) -> None:
        """Raise the error that stops `action`: a fatal error always, an abortable one
        unless the action is the abort."""
        if self.transactional_id is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional "
                                    "producer.")
        if self.state is TxnState.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state is TxnState.ABORTABLE_ERROR and not aborting:
            raise TransactionAbortableError(
                f"Cannot {action}: the transaction failed and must be aborted: "
                f"{self.last_error}") from self.last_error

    def transition(self, target: TxnState, action: str) -> None:
        """Enter `target` for the user's `action` ("commit", ...), or raise why not."""
        self.raise_if_error(action, aborting=target is TxnState.ABORTING_TRANSACTION)
        if self.state not in _SOURCES[target]:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Invalid "
                                    f"transition attempted from state {self.state} to state "
                                    f"{target}")
        log.debug("transactional id %s: %s -> %s", self.transactional_id, self.state, target)
        self.state = target

    def check_in_transaction(self, action: str) -> None:
        self.raise_if_error(action)
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot {action} if a transaction is not in progress "
                                    f"(currentState= {self.state})")

    def fail_abortable(self, error: KafkaError) -> None:
        """The transaction cannot commit any more; abort_transaction() recovers."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION,
                          TxnState.ABORTABLE_ERROR):
            if self.state is not TxnState.ABORTABLE_ERROR:
                log.info("transactional id %s: the transaction must be aborted: %s",
                         self.transactional_id, error)
                self.last_error = error
            self.state = TxnState.ABORTABLE_ERROR
        elif self.state is TxnState.ABORTING_TRANSACTION and not isinstance(
                error, TransactionAbortedError):
            self.last_error = error

    def fail_fatal(self, error: KafkaError) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return
        if error.code in FENCING_ERRORS:
            error = ProducerFencedError(
                f"There is a newer producer with the same transactionalId "
                f"{self.transactional_id} which fences the current one ({error})")
        log.info("transactional id %s: fatal error: %s", self.transactional_id, error)
        self.last_error = error
        self.state = TxnState.FATAL_ERROR

    @property
    def has_error(self) -> bool:
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    def check_send(self) -> None:
        """Raise unless a record may be sent now: only inside a transaction."""
        if self.state is TxnState.IN_TRANSACTION:
            return
        self.raise_if_error("send")
        if self.state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError("Cannot perform a 'send' before completing a call to "
                                    "init_transactions when transactions are enabled.")
        raise IllegalStateError(f"Cannot call send in state {self.state}; call "
                                f"begin_transaction() first")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """Called for every record sent: the partition joins the transaction."""
        if self.state is not TxnState.IN_TRANSACTION:
            self.check_send()
        if tp in self._partitions or tp in self._pending_partitions:
            return
        with self._lock:
            self._new_partitions.add(tp)

    def has_partitions_to_add(self) -> bool:
        return bool(self._new_partitions)

    def take_partitions_to_add(self) -> list[TopicPartition]:
        """The new partitions for one AddPartitionsToTxn; they are pending until it ends."""
        with self._lock:
            taken = sorted(self._new_partitions)
            self._pending_partitions.update(taken)
            self._new_partitions.clear()
        return taken

    def partitions_added(self, partitions: list[TopicPartition], added: bool) -> None:
        """AddPartitionsToTxn ended: the partitions are in the transaction, or (`added`
        False) they go back to be sent with the next one."""
        with self._lock:
            self._pending_partitions.difference_update(partitions)
            if added:
                self._partitions.update(partitions)
            else:
                self._new_partitions.update(partitions)

    @property
    def adding_partitions(self) -> bool:
        return bool(self._pending_partitions)

    @property
    def transaction_started(self) -> bool:
        """Whether the coordinator has the transaction, so that it must be ended."""
        return bool(self._partitions) or self.offsets_added

    def complete_transaction(self) -> None:
        """The transaction ended (committed or aborted): ready for the next."""
        with self._lock:
            self._new_partitions.clear()
            self._pending_partitions.clear()
            self._partitions.clear()
        self.offsets_added = False
        self.last_error = None
        self.state = TxnState.READY
