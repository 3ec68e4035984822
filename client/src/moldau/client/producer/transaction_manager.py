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

Transactions will extend this class: a transactional id, the coordinator, and the
begin/commit/abort states; the sender already asks it before draining each partition.
"""

from __future__ import annotations

import logging
from typing import Any

from moldau.client.producer.batch import ProducerBatch
from moldau.client.types import TopicPartition
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.producer")

NO_PRODUCER_ID = -1
MAX_EPOCH = 32767
_SEQUENCE_MASK = 0x7FFFFFFF


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

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    # -------------------------------------------------------------------------- producer id

    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def needs_producer_id(self) -> bool:
        return self.producer_id < 0

    def init_producer_id_request(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id,
                "transaction_timeout": self.transaction_timeout_ms,
                "producer_id": -1, "producer_epoch": -1}

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        log.debug("producer id %d epoch %d", producer_id, epoch)
        self.producer_id = producer_id
        self.producer_epoch = epoch
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
        would leave a gap, so the sequences start over under a new epoch."""
        if not batch.has_sequence or batch.producer_id != self.producer_id or \
                batch.producer_epoch != self.producer_epoch:
            return
        self._remove(batch)
        self.request_epoch_bump(f"batch for {batch.tp} with sequence {batch.base_sequence} "
                                f"failed: {error}")

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
                self.request_epoch_bump(f"{batch.tp}: sequence {batch.base_sequence} was "
                                        f"overtaken by sequence {last}")
                return True
            # Retry when an earlier batch has not been written yet (it is being retried or
            # failed): this one is rejected only because of it. Otherwise the broker lost
            # records or state, and the batch fails.
            return not self.is_next_sequence(batch)
        if code in (ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_epoch):
            # The broker lost or no longer accepts this producer's state: start a new
            # epoch and send the batch again under it.
            self.request_epoch_bump(f"{code.name} for {batch.tp}")
            return True
        return None
