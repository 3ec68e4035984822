"""Producer id blocks from a controller that may be remote and failing over: the next
block is fetched when 90% of the current one is used (Kafka's broker does so), and a
failure gives InitProducerId a retriable error instead of UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

import asyncio

import pytest

from moldau.broker.coordinators.producer_ids import ProducerIdManager
from moldau.errors import ErrorCode, KafkaError

BLOCK = 10


def run(coro, timeout: float = 10):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Controller:
    """Hands out blocks of BLOCK ids; can fail, or hold its answers until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.next = 1000
        self.failure: Exception | None = None
        self.open = asyncio.Event()
        self.open.set()

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        assert broker_id == 3
        self.calls += 1
        await self.open.wait()
        if self.failure is not None:
            raise self.failure
        first, self.next = self.next, self.next + BLOCK
        return first, BLOCK


def test_the_next_block_is_fetched_at_ninety_percent():
    async def scenario():
        controller = Controller()
        ids = ProducerIdManager(controller, 3)
        assert [await ids.next_id() for _ in range(9)] == list(range(1000, 1009))
        assert controller.calls == 1
        controller.open.clear()  # the next answer is slow: it must not be needed yet
        assert await ids.next_id() == 1009  # 90% handed out: the next block is asked for
        await asyncio.sleep(0)
        assert controller.calls == 2
        controller.open.set()
        await asyncio.sleep(0.01)
        controller.open.clear()
        # The new block is at hand: nobody waits for the controller at the switch.
        assert await asyncio.wait_for(ids.next_id(), 0.5) == 1010
        assert controller.calls == 2
        ids.close()

    run(scenario())


@pytest.mark.parametrize("failure", [
    KafkaError(ErrorCode.not_controller), KafkaError(ErrorCode.request_timed_out),
    TimeoutError(), ConnectionResetError()])
def test_a_failing_controller_gives_a_retriable_error(failure):
    async def scenario():
        controller = Controller()
        controller.failure = failure
        ids = ProducerIdManager(controller, 3, retry_backoff_s=0.05)
        with pytest.raises(KafkaError) as refused:
            await ids.next_id()
        assert refused.value.code is ErrorCode.coordinator_load_in_progress
        # Within the back-off callers are turned away without asking again.
        with pytest.raises(KafkaError):
            await ids.next_id()
        assert controller.calls == 1
        controller.failure = None
        await asyncio.sleep(0.06)
        assert await ids.next_id() == 1000

    run(scenario())


def test_a_slow_controller_is_waited_for_only_so_long():
    async def scenario():
        controller = Controller()
        controller.open.clear()
        ids = ProducerIdManager(controller, 3, max_wait_s=0.05)
        with pytest.raises(KafkaError) as refused:
            await ids.next_id()
        assert refused.value.code is ErrorCode.coordinator_load_in_progress
        # The request goes on; once answered, the retry is served at once.
        controller.open.set()
        await asyncio.sleep(0.01)
        assert await ids.next_id() == 1000
        assert controller.calls == 1

    run(scenario())


def test_concurrent_callers_share_one_request():
    async def scenario():
        controller = Controller()
        ids = ProducerIdManager(controller, 3)
        got = await asyncio.gather(*(ids.next_id() for _ in range(25)))
        assert sorted(got) == list(range(1000, 1025))
        assert controller.calls == 3

    run(scenario())
