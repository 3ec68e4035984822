"""The transaction coordinator on real logs: InitProducerId and epochs, the state machine's
errors, both phases of commit and abort (markers on the data partitions), timeouts, expiry,
and resuming a prepared transaction after the state is loaded again."""

from __future__ import annotations

import asyncio

import pytest
from txn_node import DATA, TxnNode, txn_id_in

from moldau.broker.coordinators.transaction.coordinator import TxnSettings
from moldau.broker.coordinators.transaction.metadata import MAX_EPOCH
from moldau.broker.coordinators.transaction.records import (
    TxnState,
    TxnValue,
    encode_key,
    encode_value,
)
from moldau.errors import ErrorCode

NONE = ErrorCode.none
TXN = txn_id_in(0)


def run(coro, timeout: float = 20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def node(tmp_path):
    node = TxnNode(tmp_path)
    yield node
    node.close()


async def settle(coordinator, txn_id: str, state: TxnState) -> None:
    while coordinator.txns[txn_id].state is not state or coordinator.txns[txn_id].pending:
        await asyncio.sleep(0.01)


def test_epochs_grow_and_fence_older_producers(node):
    async def scenario():
        coordinator = await node.coordinator()
        error, producer_id, epoch = await coordinator.init_producer_id(TXN, 60000, None)
        assert (error, epoch) == (NONE, 0)
        assert await coordinator.init_producer_id(TXN, 60000, None) == (NONE, producer_id, 1)
        # The producer of epoch 0 is fenced; an unknown producer id has no mapping.
        assert await coordinator.add_partitions(TXN, producer_id, 0, {DATA: {0}}) == \
            ErrorCode.producer_fenced
        assert await coordinator.add_partitions(TXN, producer_id + 1, 1, {DATA: {0}}) == \
            ErrorCode.invalid_producer_id_mapping
        assert await coordinator.end_txn("unknown", producer_id, 1, True) == \
            ErrorCode.invalid_producer_id_mapping
        # KIP-360: the producer of epoch 1 re-initialises, and retries that request.
        assert await coordinator.init_producer_id(TXN, 60000, (producer_id, 1)) == \
            (NONE, producer_id, 2)
        assert await coordinator.init_producer_id(TXN, 60000, (producer_id, 1)) == \
            (NONE, producer_id, 2)
        assert await coordinator.init_producer_id(TXN, 60000, (producer_id, 0)) == \
            (ErrorCode.producer_fenced, -1, -1)
        assert (await coordinator.init_producer_id(TXN, 900001, None))[0] is \
            ErrorCode.invalid_transaction_timeout
        assert (await coordinator.init_producer_id("", 1000, None))[0] is \
            ErrorCode.invalid_request
        coordinator.shutdown()
    run(scenario())


def test_an_exhausted_epoch_moves_to_a_new_producer_id(node):
    async def scenario():
        coordinator = await node.coordinator()
        _, producer_id, _ = await coordinator.init_producer_id(TXN, 60000, None)
        coordinator.txns[TXN].producer_epoch = MAX_EPOCH
        error, new_id, epoch = await coordinator.init_producer_id(TXN, 60000, None)
        assert (error, epoch) == (NONE, 0) and new_id != producer_id
        coordinator.shutdown()
    run(scenario())


def test_commit_and_abort_write_markers_then_complete(node):
    async def scenario():
        coordinator = await node.coordinator()
        _, pid, epoch = await coordinator.init_producer_id(TXN, 60000, None)
        assert await coordinator.end_txn(TXN, pid, epoch, True) == ErrorCode.invalid_txn_state
        assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {0, 1}}) == NONE
        assert coordinator.txns[TXN].state is TxnState.ONGOING
        assert await coordinator.end_txn(TXN, pid, epoch, True) == NONE
        await settle(coordinator, TXN, TxnState.COMPLETE_COMMIT)
        assert node.markers(0) == node.markers(1) == [(pid, epoch, True)]
        # A retried commit succeeds; an abort of the committed transaction does not.
        assert await coordinator.end_txn(TXN, pid, epoch, True) == NONE
        assert await coordinator.end_txn(TXN, pid, epoch, False) == ErrorCode.invalid_txn_state

        assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {1}}) == NONE
        assert await coordinator.end_txn(TXN, pid, epoch, False) == NONE
        assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {0}}) in (
            ErrorCode.concurrent_transactions, NONE)
        await settle(coordinator, TXN, TxnState.COMPLETE_ABORT)
        assert node.markers(1) == [(pid, epoch, True), (pid, epoch, False)]
        assert node.markers(0) == [(pid, epoch, True)]
        coordinator.shutdown()

        # Another coordinator loads the same state from the log.
        reloaded = await node.coordinator()
        meta = reloaded.txns[TXN]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == \
            (pid, epoch, TxnState.COMPLETE_ABORT)
        reloaded.shutdown()
    run(scenario())


def test_markers_appended_here_are_reported_once_replicated(node):
    async def scenario():
        coordinator = await node.coordinator()
        _, pid, epoch = await coordinator.init_producer_id(TXN, 60000, None)
        assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {0, 1}}) == NONE
        assert await coordinator.end_txn(TXN, pid, epoch, False) == NONE
        await settle(coordinator, TXN, TxnState.COMPLETE_ABORT)
        # The group coordinator hears of these (and ends pending offsets) from here.
        assert node.written == [(pid, False, [(DATA, 0), (DATA, 1)])]
        coordinator.shutdown()
    run(scenario())


def test_a_loaded_prepared_transaction_is_completed(node):
    async def scenario():
        # PrepareCommit written by a coordinator that died before the markers went out.
        value = TxnValue(77, 4, 60000, TxnState.PREPARE_COMMIT, {DATA: (1,)}, 10, 5)
        await node.topic.write(0, [(encode_key(TXN), encode_value(value))])
        coordinator = await node.coordinator()
        await settle(coordinator, TXN, TxnState.COMPLETE_COMMIT)
        assert node.markers(1) == [(77, 4, True)]
        coordinator.shutdown()
    run(scenario())


def test_a_new_producer_aborts_the_open_transaction_first(node):
    async def scenario():
        coordinator = await node.coordinator()
        _, pid, epoch = await coordinator.init_producer_id(TXN, 60000, None)
        assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {0}}) == NONE
        assert (await coordinator.init_producer_id(TXN, 60000, None))[0] is \
            ErrorCode.concurrent_transactions
        await settle(coordinator, TXN, TxnState.COMPLETE_ABORT)
        assert node.markers(0) == [(pid, epoch + 1, False)]  # fenced by the bumped epoch
        assert await coordinator.init_producer_id(TXN, 60000, None) == (NONE, pid, epoch + 2)
        assert await coordinator.end_txn(TXN, pid, epoch, True) == ErrorCode.producer_fenced
        coordinator.shutdown()
    run(scenario())


def test_timed_out_transactions_are_aborted_and_idle_ids_expire(tmp_path):
    node = TxnNode(tmp_path, TxnSettings(expiration_ms=1000))
    try:
        async def scenario():
            coordinator = await node.coordinator()
            _, pid, epoch = await coordinator.init_producer_id(TXN, 500, None)
            assert await coordinator.add_partitions(TXN, pid, epoch, {DATA: {0}}) == NONE
            start = coordinator.txns[TXN].start_ms
            assert coordinator.abort_timed_out(start + 500) == 0
            assert coordinator.abort_timed_out(start + 501) == 1
            await settle(coordinator, TXN, TxnState.COMPLETE_ABORT)
            assert coordinator.txns[TXN].producer_epoch == epoch + 1
            assert node.markers(0) == [(pid, epoch + 1, False)]
            assert await coordinator.end_txn(TXN, pid, epoch, False) == \
                ErrorCode.producer_fenced

            updated = coordinator.txns[TXN].last_update_ms
            assert coordinator.expire_ids(updated + 999) == 0
            assert coordinator.expire_ids(updated + 1000) == 1
            while TXN in coordinator.txns:
                await asyncio.sleep(0.01)
            assert coordinator.describe(TXN)[0] is ErrorCode.transactional_id_not_found
            coordinator.shutdown()
            reloaded = await node.coordinator()
            assert TXN not in reloaded.txns  # the tombstone removed it from the log too
            reloaded.shutdown()
        run(scenario())
    finally:
        node.close()


def test_only_loaded_partitions_are_coordinated(node):
    async def scenario():
        coordinator = await node.coordinator()
        other = txn_id_in(1)
        coordinator.on_leadership_change("__transaction_state", 1, False, 1)
        assert (await coordinator.init_producer_id(other, 1000, None))[0] is \
            ErrorCode.not_coordinator
        assert coordinator.error_for(TXN) is NONE
        coordinator.shutdown()
    run(scenario())
