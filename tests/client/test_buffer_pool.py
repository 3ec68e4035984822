"""BufferPool: pooled reuse, FIFO waiters gathering memory in pieces, max.block.ms expiry,
oversize requests, close."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from moldau.client.errors import BufferExhaustedError, ClientClosedError, RecordTooLargeError
from moldau.client.producer.buffer_pool import BufferPool


def run(coro):
    return asyncio.run(coro)


def test_pooled_buffers_are_reused():
    async def main():
        pool = BufferPool(1024, 128)
        first = await pool.allocate(128, 1)
        pool.deallocate(first)
        assert pool.free_buffers == 1
        again = await pool.allocate(128, 1)
        assert again is first
        assert pool.available_memory == 1024 - 128
    run(main())


def test_other_sizes_use_the_non_pooled_budget_and_free_pooled_buffers():
    async def main():
        pool = BufferPool(512, 128)
        buffers = [await pool.allocate(128, 1) for _ in range(4)]
        for buffer in buffers:
            pool.deallocate(buffer)
        assert pool.free_buffers == 4 and pool.unallocated_memory == 0
        big = await pool.allocate(300, 1)
        assert len(big) == 300
        # Three pooled buffers had to be given up to make room.
        assert pool.free_buffers == 1
        assert pool.available_memory == 512 - 300
        pool.deallocate(big)
        assert pool.available_memory == 512
    run(main())


def test_a_request_larger_than_the_pool_fails_at_once():
    async def main():
        pool = BufferPool(1024, 128)
        started = time.monotonic()
        with pytest.raises(RecordTooLargeError):
            await pool.allocate(1025, 10)
        assert time.monotonic() - started < 0.5
        with pytest.raises(RecordTooLargeError):
            pool.try_allocate(2048)
    run(main())


def test_waiters_are_served_first_in_first_out():
    async def main():
        pool = BufferPool(256, 128)
        held = [await pool.allocate(128, 1), await pool.allocate(128, 1)]
        order: list[str] = []

        async def waiter(name: str, size: int) -> bytearray:
            buffer = await pool.allocate(size, 5)
            order.append(name)
            return buffer

        first = asyncio.create_task(waiter("first", 128))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(waiter("second", 128))
        await asyncio.sleep(0.01)
        assert pool.queued == 2
        # A newcomer does not overtake the queue even if memory were free.
        assert pool.try_allocate(128) is None
        pool.deallocate(held[0])
        await asyncio.sleep(0.01)
        assert order == ["first"]
        pool.deallocate(held[1])
        await asyncio.sleep(0.01)
        assert order == ["first", "second"]
        await first
        await second
    run(main())


def test_first_waiter_gathers_memory_in_pieces():
    async def main():
        pool = BufferPool(300, 100)
        held = [await pool.allocate(100, 1) for _ in range(3)]
        task = asyncio.create_task(pool.allocate(250, 5))
        await asyncio.sleep(0.01)
        for buffer in held[:2]:
            pool.deallocate(buffer)
            await asyncio.sleep(0.01)
            assert not task.done()
        # 200 bytes gathered so far and held by the waiter, not available to others.
        assert pool.available_memory == 0
        pool.deallocate(held[2])
        buffer = await asyncio.wait_for(task, 1)
        assert len(buffer) == 250
        assert pool.available_memory == 50
    run(main())


def test_max_block_expiry_raises_and_returns_partial_memory():
    async def main():
        pool = BufferPool(300, 100)
        held = [await pool.allocate(100, 1) for _ in range(3)]
        task = asyncio.create_task(pool.allocate(250, 0.2))
        await asyncio.sleep(0.02)
        pool.deallocate(held[0])  # the waiter takes these 100 bytes
        await asyncio.sleep(0.02)
        assert pool.available_memory == 0
        started = time.monotonic()
        with pytest.raises(BufferExhaustedError, match="max blocking time"):
            await task
        assert time.monotonic() - started < 0.5
        assert pool.queued == 0
        assert pool.available_memory == 100  # the partial memory came back
    run(main())


def test_expired_waiter_lets_the_next_one_through():
    async def main():
        pool = BufferPool(200, 100)
        held = [await pool.allocate(100, 1), await pool.allocate(100, 1)]
        big = asyncio.create_task(pool.allocate(200, 0.1))
        await asyncio.sleep(0.01)
        small = asyncio.create_task(pool.allocate(100, 2))
        await asyncio.sleep(0.01)
        pool.deallocate(held[0])  # goes to the big waiter, which still needs 100 more
        await asyncio.sleep(0.01)
        assert not small.done()
        with pytest.raises(BufferExhaustedError):
            await big
        # Its 100 bytes went back and were handed to the next waiter.
        assert len(await asyncio.wait_for(small, 1)) == 100
    run(main())


def test_close_fails_all_waiters():
    async def main():
        pool = BufferPool(100, 100)
        held = await pool.allocate(100, 1)
        waiters = [asyncio.create_task(pool.allocate(100, 10)) for _ in range(3)]
        await asyncio.sleep(0.01)
        pool.close()
        for task in waiters:
            with pytest.raises(ClientClosedError):
                await asyncio.wait_for(task, 1)
        with pytest.raises(ClientClosedError):
            await pool.allocate(10, 1)
        pool.deallocate(held)
    run(main())


def test_every_release_wakes_the_first_waiter_even_from_another_thread():
    async def main():
        pool = BufferPool(100, 100)
        held = await pool.allocate(100, 1)
        task = asyncio.create_task(pool.allocate(100, 5))
        await asyncio.sleep(0.01)
        releaser = threading.Thread(target=pool.deallocate, args=(held,))
        releaser.start()
        buffer = await asyncio.wait_for(task, 2)
        releaser.join()
        assert buffer is held  # the pooled buffer itself was handed over
    run(main())


def test_try_allocate_never_waits():
    pool = BufferPool(100, 50)
    first = pool.try_allocate(50)
    second = pool.try_allocate(50)
    assert first is not None and second is not None
    assert pool.try_allocate(50) is None
    pool.deallocate(first)
    assert pool.try_allocate(50) is first
