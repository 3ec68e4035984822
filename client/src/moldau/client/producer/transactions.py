"""The transaction methods of AsyncProducer: init_transactions, begin_transaction,
send_offsets_to_transaction, commit_transaction and abort_transaction, as in Kafka's client,
and prepare_transaction, which leaves the transaction for another process to end.

Each blocking call waits at most its timeout (max.block.ms by default). A call that times
out goes on in the background, and calling the same method again waits for it, so a caller
can retry a timed-out commit without starting a second one. The state checks and the error
classification are the TransactionManager's; the requests are TxnRequests'.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.errors import (
    ClientClosedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortedError,
)
from moldau.client.producer.transaction_manager import TransactionManager, TxnState
from moldau.client.producer.txn_requests import TxnRequests
from moldau.client.types import ConsumerGroupMetadata, PreparedTransaction, TopicPartition

if TYPE_CHECKING:
    from moldau.client.producer.accumulator import RecordAccumulator
    from moldau.client.producer.sender import Sender

log = logging.getLogger("moldau.client.producer")

T = TypeVar("T")


class TransactionMethods:
    """Mixed into AsyncProducer, whose attributes these are."""

    transaction_manager: TransactionManager | None
    transactions: TxnRequests | None
    accumulator: RecordAccumulator
    sender: Sender
    _closed: bool
    _started: bool
    _max_block: float
    _txn_calls: dict[str, asyncio.Task[Any]]

    async def start(self) -> None:
        raise NotImplementedError

    async def flush(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def _txn(self) -> tuple[TransactionManager, TxnRequests]:
        tm = self.transaction_manager
        if self.transactions is None or tm is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional "
                                    "producer.")
        if self._closed:
            raise ClientClosedError("Cannot perform operation after producer has been closed")
        return tm, self.transactions

    async def _txn_call(self, name: str, what: str, start: Callable[[], Coroutine[Any, Any, T]],
                        timeout: float | None) -> T:
        """Run a transaction call for at most `timeout` seconds (max.block.ms by default).
        `start()` checks the state (raising at once if the call is not allowed) and returns
        the work; a call that timed out goes on, and the next call of the same method
        waits for it rather than starting another."""
        if not self._started:
            await self.start()
        task = self._txn_calls.get(name)
        if task is None:
            task = self._txn_calls[name] = asyncio.get_running_loop().create_task(
                start(), name=f"moldau-{name}")
        limit = self._max_block if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(task), limit)
        except TimeoutError:
            if task.done():
                raise
            raise KafkaTimeoutError(f"Timeout expired after {round(limit * 1000)}ms while "
                                    f"awaiting {what}") from None
        finally:
            if task.done():
                self._txn_calls.pop(name, None)

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: fences any older producer
        with the same id and completes (aborts) a transaction it left open."""
        tm, requests = self._txn()

        def start() -> Coroutine[Any, Any, None]:
            tm.transition(TxnState.INITIALIZING, "initialize transactions")
            return self._initialize(tm, requests)
        await self._txn_call("init_transactions", "InitProducerId", start, timeout)

    @staticmethod
    async def _initialize(tm: TransactionManager, requests: TxnRequests) -> None:
        try:
            await requests.init_producer_id()
        except KafkaError as exc:
            tm.fail_fatal(exc)  # as in Kafka's client: no way on without a producer id
            raise
        tm.transition(TxnState.READY, "initialize transactions")

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        tm, _ = self._txn()
        tm.transition(TxnState.IN_TRANSACTION, "begin a transaction")

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
            group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets as part of the transaction: they take effect
        only if it commits. `offsets` are the next offsets to read (last processed + 1);
        `group_metadata` is the consumer's group_metadata() (or a bare group id)."""
        tm, requests = self._txn()
        if not offsets:  # nothing to commit: no request, as in Kafka's client
            tm.check_in_transaction("send offsets")
            return
        group = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) \
            else ConsumerGroupMetadata(group_metadata)
        normalized = {tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                      for tp, om in offsets.items()}

        async def send() -> None:
            await requests.add_offsets(group.group_id)
            tm.offsets_added = True
            await requests.commit_offsets(normalized, group)

        def start() -> Coroutine[Any, Any, None]:
            tm.check_in_transaction("send offsets")
            return send()
        await self._txn_call("send_offsets_to_transaction", "AddOffsetsToTxn", start, timeout)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it. A TransactionAbortableError
        means it cannot commit: call abort_transaction() and start again."""
        tm, requests = self._txn()

        async def commit() -> None:
            await self.flush()
            tm.raise_if_error("commit the transaction")
            if tm.transaction_started:
                await requests.end_transaction(commit=True)
            tm.complete_transaction()

        def start() -> Coroutine[Any, Any, None]:
            tm.transition(TxnState.COMMITTING_TRANSACTION, "commit the transaction")
            return commit()
        await self._txn_call("commit_transaction", "EndTxn", start, timeout)

    async def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Send every record of the transaction and leave it open, for another process to
        commit or abort with `Admin.complete_transactions` (or for the coordinator to abort
        after transaction.timeout.ms). The producer can only be closed afterwards, and
        closing it does not abort the transaction. Raises TransactionAbortableError when a
        record failed (abort and start again) and IllegalStateError when the transaction
        has neither records nor offsets, so that there is nothing to end."""
        tm, _ = self._txn()

        async def prepare() -> PreparedTransaction:
            await self.flush()
            tm.raise_if_error("prepare the transaction")
            if not tm.transaction_started:
                raise IllegalStateError("Cannot prepare a transaction without records or "
                                        "offsets")
            tm.transition(TxnState.PREPARED_TRANSACTION, "prepare the transaction")
            assert tm.transactional_id is not None
            return PreparedTransaction(tm.transactional_id, tm.producer_id, tm.producer_epoch)

        def start() -> Coroutine[Any, Any, PreparedTransaction]:
            tm.check_in_transaction("prepare the transaction")
            return prepare()
        return await self._txn_call("prepare_transaction", "the transaction's records", start,
                                    timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail with TransactionAbortedError,
        and read_committed consumers never see the ones sent."""
        tm, requests = self._txn()

        async def abort() -> None:
            await self.sender.partitions_settled()
            aborted = TransactionAbortedError("Failing batch since transaction was aborted")
            for batch in self.accumulator.abort_undrained(aborted):
                tm.on_failure(batch, aborted)
            await self.accumulator.await_flush_completion()
            if tm.transaction_started:
                await requests.end_transaction(commit=False)
            if tm.bump_required:
                await requests.init_producer_id()  # a new epoch: sequences start again
            tm.complete_transaction()

        def start() -> Coroutine[Any, Any, None]:
            tm.transition(TxnState.ABORTING_TRANSACTION, "abort the transaction")
            return abort()
        await self._txn_call("abort_transaction", "EndTxn", start, timeout)

    def _cancel_txn_calls(self) -> None:
        """Closing ends the calls that timed out and still retry in the background."""
        for task in self._txn_calls.values():
            task.cancel()
        self._txn_calls.clear()

    async def _abort_on_close(self, timeout: float | None) -> None:
        """As Kafka's client does, a graceful close aborts an open transaction rather than
        leaving it to time out on the coordinator."""
        assert self.transaction_manager is not None
        if timeout == 0 or self.transaction_manager.state not in (
                TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                TxnState.ABORTING_TRANSACTION):
            return
        try:
            await self.abort_transaction(timeout)
        except KafkaError as exc:
            log.warning("could not abort the open transaction on close: %s", exc)
