"""The transactional producer's coordinator requests against a scripted broker on a real
socket: which requests go out, at which versions, and how each answer is handled (retried
in place, retried after looking the coordinator up again, or raised)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_broker import FakeBroker, FakeRequest, metadata_response

from moldau.client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    ProducerFencedError,  # type: ignore[attr-defined]
    UnknownProducerIdError,  # type: ignore[attr-defined]
)
from moldau.client.metadata import Metadata
from moldau.client.network import NetworkClient
from moldau.client.producer import AsyncProducer
from moldau.client.producer.transaction_manager import TransactionManager, TxnState
from moldau.client.producer.txn_requests import TxnRequests
from moldau.client.types import TopicPartition
from moldau.client.versions import ApiKey
from moldau.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

# The broker offers KIP-890's newer versions too; the client must stay below them.
VERSIONS = {3: (0, 12), 18: (0, 4), 10: (0, 6), 22: (0, 5), 24: (0, 5), 26: (0, 5)}
TXN_ID = "tx-1"


class Script:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.seen: list[ApiKey] = []

    async def answer(self, api_key: ApiKey, data: dict[str, Any]) -> FakeRequest:
        request = await self.next_request()
        self.seen.append(ApiKey(request.api_key))
        assert request.api_key == api_key, (ApiKey(request.api_key), api_key)
        await request.reply(data)
        return request

    async def next_request(self) -> FakeRequest:
        """The next request other than Metadata (answered: one broker, this one)."""
        while True:
            request = await asyncio.wait_for(self.broker.requests.get(), 20)
            if request.api_key != ApiKey.METADATA:
                return request
            await request.reply(metadata_response("fake", self.broker.port))

    async def initialized(self, producer: AsyncProducer, error_code: int = 0) -> None:
        """Run init_transactions() with this answer to its InitProducerId."""
        init = asyncio.create_task(producer.init_transactions())
        await self.coordinator()
        await self.answer(ApiKey.INIT_PRODUCER_ID, {
            "error_code": error_code, "producer_id": 42, "producer_epoch": 0})
        await init

    def assert_no_more_requests(self) -> None:
        left = [self.broker.requests.get_nowait().api_key
                for _ in range(self.broker.requests.qsize())]
        assert set(left) <= {ApiKey.METADATA}, left

    async def coordinator(self) -> FakeRequest:
        return await self.answer(ApiKey.FIND_COORDINATOR, {"coordinators": [{
            "key": TXN_ID, "node_id": 1, "host": "127.0.0.1", "port": self.broker.port,
            "error_code": 0, "error_message": None}]})


def manager(state: TxnState, producer_id: int = -1) -> TransactionManager:
    tm = TransactionManager(TXN_ID, 30000)
    tm.state = state
    if producer_id >= 0:
        tm.set_producer_id(producer_id, 3)
    return tm


def run(scenario: Any) -> None:
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            network = NetworkClient(Metadata([broker.address]), client_id="test")
            try:
                await scenario(broker, network)
            finally:
                await network.close()
    asyncio.run(main())


def requests_for(tm: TransactionManager, network: NetworkClient) -> TxnRequests:
    return TxnRequests(tm, network, retry_backoff_ms=1, retry_backoff_max_ms=5)


def test_init_retries_a_loading_coordinator_and_finds_a_moved_one_again() -> None:
    async def scenario(broker: FakeBroker, network: NetworkClient) -> None:
        tm = manager(TxnState.INITIALIZING)
        script = Script(broker)
        task = asyncio.create_task(requests_for(tm, network).init_producer_id())
        find = await script.coordinator()
        assert (find.body.key_type, find.body.coordinator_keys) == (1, (TXN_ID,))
        for code in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator):
            await script.answer(ApiKey.INIT_PRODUCER_ID, {"error_code": code})
        await script.coordinator()
        init = await script.answer(ApiKey.INIT_PRODUCER_ID, {
            "error_code": 0, "producer_id": 42, "producer_epoch": 3})
        await task
        assert script.seen == [ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID,
                               ApiKey.INIT_PRODUCER_ID, ApiKey.FIND_COORDINATOR,
                               ApiKey.INIT_PRODUCER_ID]
        assert init.body.transactional_id == TXN_ID
        assert init.body.transaction_timeout.total_seconds() == 30
        assert (tm.producer_id, tm.producer_epoch) == (42, 3)
    run(scenario)


def test_partitions_are_added_in_one_request_and_retried_while_concurrent() -> None:
    async def scenario(broker: FakeBroker, network: NetworkClient) -> None:
        tm = manager(TxnState.IN_TRANSACTION, producer_id=42)
        script = Script(broker)
        partitions = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]
        task = asyncio.create_task(requests_for(tm, network).add_partitions(partitions))
        await script.coordinator()

        def results(code: ErrorCode, other: ErrorCode) -> dict[str, Any]:
            return {"results_by_topic_v3_and_below": [
                {"name": "a", "results_by_partition": [
                    {"partition_index": 0, "partition_error_code": code},
                    {"partition_index": 1, "partition_error_code": other}]},
                {"name": "b", "results_by_partition": [
                    {"partition_index": 0, "partition_error_code": other}]}]}
        first = await script.answer(ApiKey.ADD_PARTITIONS_TO_TXN, results(
            ErrorCode.concurrent_transactions, ErrorCode.operation_not_attempted))
        assert first.version == 3  # v4+ is for brokers
        body = first.body
        assert (body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch) == (TXN_ID, 42, 3)
        assert [(t.name, list(t.partitions)) for t in body.v3_and_below_topics] == \
            [("a", [0, 1]), ("b", [0])]
        await script.answer(ApiKey.ADD_PARTITIONS_TO_TXN,
                            results(ErrorCode.none, ErrorCode.none))
        await task
        assert tm.state is TxnState.IN_TRANSACTION
    run(scenario)


def test_end_txn_uses_the_version_one_protocol_and_fencing_is_fatal() -> None:
    async def scenario(broker: FakeBroker, network: NetworkClient) -> None:
        tm = manager(TxnState.COMMITTING_TRANSACTION, producer_id=42)
        script = Script(broker)
        requests = requests_for(tm, network)
        task = asyncio.create_task(requests.end_transaction(commit=True))
        await script.coordinator()
        busy = await script.answer(ApiKey.END_TXN,
                                   {"error_code": ErrorCode.concurrent_transactions})
        assert busy.version == 4  # v5 would bump the epoch per transaction (KIP-890)
        assert (busy.body.producer_id, busy.body.producer_epoch, busy.body.committed) == \
            (42, 3, True)
        await script.answer(ApiKey.END_TXN, {"error_code": 0})
        await task

        task = asyncio.create_task(requests.end_transaction(commit=False))
        await script.answer(ApiKey.END_TXN, {"error_code": ErrorCode.producer_fenced})
        with pytest.raises(ProducerFencedError, match="newer producer"):
            await task
        assert tm.state is TxnState.FATAL_ERROR
    run(scenario)


def test_a_timed_out_call_goes_on_and_calling_again_waits_for_it() -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        script = Script(broker)
        async with AsyncProducer({"bootstrap.servers": broker.address,
                                  "transactional.id": TXN_ID, "max.block.ms": 500}) as p:
            find = asyncio.create_task(script.next_request())
            with pytest.raises(KafkaTimeoutError, match="Timeout expired after 500ms while "
                                                        "awaiting InitProducerId"):
                await p.init_transactions()
            retried = asyncio.create_task(p.init_transactions(timeout=20))
            await (await find).reply({"coordinators": [{
                "key": TXN_ID, "node_id": 1, "host": "127.0.0.1", "port": broker.port,
                "error_code": 0, "error_message": None}]})
            await script.answer(ApiKey.INIT_PRODUCER_ID, {
                "error_code": 0, "producer_id": 42, "producer_epoch": 0})
            await retried  # the first call's InitProducerId, not a second one
            assert p.transaction_manager is not None
            assert p.transaction_manager.state is TxnState.READY
            assert script.seen == [ApiKey.INIT_PRODUCER_ID]
            script.assert_no_more_requests()
    run(scenario)


def producer_on(broker: FakeBroker, **settings: Any) -> AsyncProducer:
    return AsyncProducer({"bootstrap.servers": broker.address, "transactional.id": TXN_ID},
                         **settings)


def test_a_send_outside_a_transaction_fails_before_waiting_for_metadata() -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        async with producer_on(broker, max_block_ms=30000) as p:  # metadata never comes
            started = asyncio.get_running_loop().time()
            with pytest.raises(IllegalStateError, match="before completing a call to "
                                                        "init_transactions"):
                await p.send("unknown-topic", b"v")
            assert asyncio.get_running_loop().time() - started < 10
    run(scenario)


def test_a_failed_init_is_fatal_for_every_later_call() -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        script = Script(broker)
        async with producer_on(broker) as p:
            with pytest.raises(UnknownProducerIdError) as first:
                await script.initialized(p, ErrorCode.unknown_producer_id)
            for call in (p.init_transactions, p.abort_transaction):
                with pytest.raises(UnknownProducerIdError) as again:
                    await call()
                assert again.value is first.value
    run(scenario)


def test_sending_no_offsets_sends_no_request() -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        script = Script(broker)
        async with producer_on(broker) as p:
            await script.initialized(p)
            p.begin_transaction()
            await p.send_offsets_to_transaction({}, "some-group")
            await p.commit_transaction()  # nothing started on the coordinator: no EndTxn
            assert p.transaction_manager is not None
            assert p.transaction_manager.state is TxnState.READY
            script.assert_no_more_requests()
    run(scenario)


@pytest.mark.parametrize("state, adds", [
    (TxnState.IN_TRANSACTION, True), (TxnState.COMMITTING_TRANSACTION, True),
    (TxnState.ABORTING_TRANSACTION, False),
])
def test_the_sender_adds_partitions_only_while_the_transaction_may_commit(
        state: TxnState, adds: bool) -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        p = producer_on(broker)
        tm = p.transaction_manager
        assert tm is not None
        tm.state = TxnState.IN_TRANSACTION
        tm.maybe_add_partition(TopicPartition("a", 0))
        tm.state = state
        p.sender._run_transaction()
        assert tm.adding_partitions is adds
        await p.close(0)
    run(scenario)


def test_close_ends_calls_that_timed_out() -> None:
    async def scenario(broker: FakeBroker, _network: NetworkClient) -> None:
        p = producer_on(broker)  # FindCoordinator is never answered
        with pytest.raises(KafkaTimeoutError):
            await p.init_transactions(timeout=0.3)
        (pending,) = p._txn_calls.values()
        await p.close(0)
        await asyncio.sleep(0)
        assert pending.cancelled()
    run(scenario)
