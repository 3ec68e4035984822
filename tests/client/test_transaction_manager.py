"""The transactional producer's state machine and partition bookkeeping, and how replies
from the coordinators are classified (retried, abortable, fatal)."""

from __future__ import annotations

import pytest

from moldau.client.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    MessageTooLargeError,
    ProducerFencedError,  # type: ignore[attr-defined]
    TransactionAbortableError,  # type: ignore[attr-defined]
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,  # type: ignore[attr-defined]
    error_for,
)
from moldau.client.network import NetworkClient
from moldau.client.producer.batch import ProducerBatch
from moldau.client.producer.transaction_manager import TransactionManager, TxnState
from moldau.client.producer.txn_requests import TxnRequests, _Retry
from moldau.client.types import TopicPartition
from moldau.errors import ErrorCode

A = TopicPartition("a", 0)
B = TopicPartition("b", 1)


def ready_manager() -> TransactionManager:
    tm = TransactionManager("tx-1")
    tm.transition(TxnState.INITIALIZING, "initialize transactions")
    tm.set_producer_id(7, 0)
    tm.transition(TxnState.READY, "initialize transactions")
    return tm


def in_transaction() -> TransactionManager:
    tm = ready_manager()
    tm.transition(TxnState.IN_TRANSACTION, "begin a transaction")
    return tm


def batch(tp: TopicPartition = A) -> ProducerBatch:
    made = ProducerBatch(tp, bytearray(1024), 0.0)
    assert made.try_append(0, None, b"v", None, None) is not None
    return made


def test_a_transaction_goes_through_commit_and_abort_back_to_ready() -> None:
    tm = in_transaction()
    tm.maybe_add_partition(A)
    tm.partitions_added(tm.take_partitions_to_add(), added=True)
    assert tm.transaction_started
    tm.transition(TxnState.COMMITTING_TRANSACTION, "commit the transaction")
    tm.complete_transaction()
    assert tm.state is TxnState.READY and not tm.transaction_started
    tm.transition(TxnState.IN_TRANSACTION, "begin a transaction")
    tm.transition(TxnState.ABORTING_TRANSACTION, "abort the transaction")
    tm.complete_transaction()
    assert tm.state is TxnState.READY


@pytest.mark.parametrize("start, target", [
    ("UNINITIALIZED", "IN_TRANSACTION"), ("READY", "COMMITTING_TRANSACTION"),
    ("READY", "ABORTING_TRANSACTION"), ("IN_TRANSACTION", "IN_TRANSACTION"),
    ("READY", "INITIALIZING"),
])
def test_a_call_in_the_wrong_state_names_both_states(start: str, target: str) -> None:
    tm = TransactionManager("tx-1")
    tm.state = TxnState[start]
    with pytest.raises(IllegalStateError) as raised:
        tm.transition(TxnState[target], "act")
    assert str(raised.value) == (f"TransactionalId tx-1: Invalid transition attempted from "
                                 f"state {start} to state {target}")
    assert tm.state is TxnState[start]


def test_sends_need_an_initialized_producer_and_an_open_transaction() -> None:
    tm = TransactionManager("tx-1")
    with pytest.raises(IllegalStateError, match="Cannot perform a 'send' before completing "
                                                "a call to init_transactions"):
        tm.maybe_add_partition(A)
    tm = ready_manager()
    with pytest.raises(IllegalStateError, match=r"Cannot call send in state READY; call "
                                                r"begin_transaction\(\) first"):
        tm.maybe_add_partition(A)
    with pytest.raises(IllegalStateError, match=r"Cannot send offsets if a transaction is "
                                                r"not in progress \(currentState= READY\)"):
        tm.check_in_transaction("send offsets")


def test_new_partitions_are_added_together_and_drained_only_once_added() -> None:
    tm = in_transaction()
    first = batch(A)
    for tp in (B, A, A):
        tm.maybe_add_partition(tp)
    assert not tm.may_drain(first)
    assert tm.take_partitions_to_add() == [A, B]  # one request for both
    assert tm.adding_partitions and not tm.has_partitions_to_add()
    tm.maybe_add_partition(A)  # pending already: not asked for again
    assert not tm.has_partitions_to_add()
    tm.partitions_added([A, B], added=False)  # the request failed: both go again
    assert tm.take_partitions_to_add() == [A, B]
    tm.partitions_added([A, B], added=True)
    assert tm.may_drain(first)
    tm.maybe_add_partition(A)
    assert not tm.has_partitions_to_add()


def test_an_abortable_error_blocks_everything_but_the_abort() -> None:
    tm = in_transaction()
    cause = MessageTooLargeError("too large")
    tm.on_failure(batch(), cause)
    assert tm.state is TxnState.ABORTABLE_ERROR and tm.last_error is cause
    for call in (lambda: tm.maybe_add_partition(A),
                 lambda: tm.transition(TxnState.COMMITTING_TRANSACTION, "commit"),
                 lambda: tm.check_in_transaction("send offsets")):
        with pytest.raises(TransactionAbortableError, match="must be aborted: too large") \
                as raised:
            call()
        assert raised.value.__cause__ is cause
    tm.transition(TxnState.ABORTING_TRANSACTION, "abort the transaction")
    tm.on_failure(batch(), TransactionAbortedError("aborted"))  # expected while aborting
    tm.complete_transaction()
    assert tm.state is TxnState.READY and tm.last_error is None
    tm.transition(TxnState.IN_TRANSACTION, "begin a transaction")
    tm.maybe_add_partition(A)


@pytest.mark.parametrize("code", [ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch])
def test_fencing_is_fatal_and_every_later_call_raises_it(code: ErrorCode) -> None:
    tm = in_transaction()
    tm.fail_fatal(error_for(code, "EndTxn"))
    assert isinstance(tm.last_error, ProducerFencedError)
    assert "newer producer with the same transactionalId tx-1" in str(tm.last_error)
    tm.fail_abortable(MessageTooLargeError("later"))  # does not leave the fatal state
    for target in (TxnState.ABORTING_TRANSACTION, TxnState.COMMITTING_TRANSACTION,
                   TxnState.IN_TRANSACTION):
        with pytest.raises(ProducerFencedError):
            tm.transition(target, "act")
    with pytest.raises(ProducerFencedError):
        tm.maybe_add_partition(A)


def test_a_failed_batch_with_a_sequence_needs_a_new_epoch_from_the_coordinator() -> None:
    tm = in_transaction()
    tm.maybe_add_partition(A)
    tm.partitions_added(tm.take_partitions_to_add(), added=True)
    sent = batch()
    tm.assign_sequence(sent)
    # Not retried under a local epoch bump, as an idempotent producer would.
    assert tm.retry_decision(sent, ErrorCode.unknown_producer_id) is False
    assert tm.bump_required
    assert tm.init_producer_id_request()["producer_id"] == 7  # KIP-360: same id, next epoch
    assert tm.init_producer_id_request()["producer_epoch"] == 0
    tm.set_producer_id(7, 1)
    assert not tm.bump_required


def test_idempotent_producers_still_retry_under_a_local_epoch_bump() -> None:
    tm = TransactionManager()
    tm.set_producer_id(3, 0)
    sent = batch()
    tm.assign_sequence(sent)
    assert tm.retry_decision(sent, ErrorCode.unknown_producer_id) is True
    with pytest.raises(IllegalStateError, match="non-transactional producer"):
        tm.transition(TxnState.INITIALIZING, "initialize transactions")


def requests_for(tm: TransactionManager) -> TxnRequests:
    return TxnRequests(tm, NetworkClient.__new__(NetworkClient))


@pytest.mark.parametrize("code, refind", [
    (ErrorCode.not_coordinator, True), (ErrorCode.coordinator_not_available, True),
    (ErrorCode.coordinator_load_in_progress, False), (ErrorCode.concurrent_transactions, False),
])
def test_coordinator_moves_and_concurrent_transactions_are_retried(code: ErrorCode,
                                                                   refind: bool) -> None:
    tm = in_transaction()
    with pytest.raises(_Retry) as raised:
        requests_for(tm).check(code, "EndTxn")
    assert raised.value.refind is refind
    assert tm.state is TxnState.IN_TRANSACTION


@pytest.mark.parametrize("code, raised_class, state, bump", [
    (ErrorCode.producer_fenced, ProducerFencedError, TxnState.FATAL_ERROR, False),
    (ErrorCode.invalid_producer_epoch, ProducerFencedError, TxnState.FATAL_ERROR, False),
    (ErrorCode.transactional_id_authorization_failed, TransactionalIdAuthorizationFailedError,
     TxnState.FATAL_ERROR, False),
    (ErrorCode.unknown_producer_id, KafkaError, TxnState.ABORTABLE_ERROR, True),
    (ErrorCode.illegal_generation, CommitFailedError, TxnState.ABORTABLE_ERROR, False),
    (ErrorCode.group_authorization_failed, KafkaError, TxnState.ABORTABLE_ERROR, False),
])
def test_coordinator_errors_are_fatal_or_abortable_as_in_kafka(
        code: ErrorCode, raised_class: type, state: TxnState, bump: bool) -> None:
    tm = in_transaction()
    with pytest.raises(raised_class):
        requests_for(tm).check(code, "TxnOffsetCommit")
    assert tm.state is state
    assert tm.bump_required is bump
