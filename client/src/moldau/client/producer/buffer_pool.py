"""BufferPool: the producer's bounded memory for record batches.

`total_memory` bytes (buffer.memory) in all. Buffers of exactly `poolable_size` (batch.size)
are kept on a free list when released and handed out again, so steady-state producing
allocates nothing. Other sizes come from the non-pooled budget, which may take memory back
from the free list. When memory is short, callers queue first-in first-out; the first one
gathers memory piece by piece as it is released, and nobody overtakes it. A caller that waits
longer than `max_time` gets BufferExhaustedError and whatever it had gathered goes back to
the pool. A request larger than the whole pool fails at once; closing the pool fails every
waiter.

Waiting is an awaited future on the pool's event loop. Memory may also be taken without
waiting (`try_allocate`) and released from other threads, which is how the synchronous
producer appends from the caller's thread; a lock guards the accounting.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from moldau.client.errors import BufferExhaustedError, ClientClosedError, RecordTooLargeError


class _Waiter:
    __slots__ = ("accumulated", "buffer", "future", "satisfied", "size")

    def __init__(self, size: int, future: asyncio.Future[bytearray]) -> None:
        self.size = size
        self.future = future
        self.accumulated = 0
        self.buffer: bytearray | None = None
        self.satisfied = False


class BufferPool:
    def __init__(self, total_memory: int, poolable_size: int,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.total_memory = total_memory
        self.poolable_size = poolable_size
        self._loop = loop
        self._lock = threading.Lock()
        self._free: deque[bytearray] = deque()
        # Memory not on the free list and not handed out.
        self._non_pooled_available = total_memory
        self._waiters: deque[_Waiter] = deque()
        self._closed = False

    # -------------------------------------------------------------------------- queries

    @property
    def available_memory(self) -> int:
        """Free-list memory plus unallocated memory."""
        with self._lock:
            return self._non_pooled_available + len(self._free) * self.poolable_size

    @property
    def unallocated_memory(self) -> int:
        with self._lock:
            return self._non_pooled_available

    @property
    def free_buffers(self) -> int:
        return len(self._free)

    @property
    def queued(self) -> int:
        """Callers waiting for memory."""
        return len(self._waiters)

    @property
    def closed(self) -> bool:
        return self._closed

    # -------------------------------------------------------------------------- allocate

    def _check_size(self, size: int) -> None:
        if size > self.total_memory:
            raise RecordTooLargeError(
                f"Attempt to allocate {size} bytes, but there is a hard limit of "
                f"{self.total_memory} on memory allocations (buffer.memory).")

    def _take_locked(self, size: int) -> bytearray | None:
        """Whole allocation without waiting, or None. Caller holds the lock."""
        if size == self.poolable_size and self._free:
            return self._free.popleft()
        if self._non_pooled_available + len(self._free) * self.poolable_size >= size:
            self._free_up(size)
            self._non_pooled_available -= size
            return bytearray(size)
        return None

    def _free_up(self, size: int) -> None:
        """Move free-list buffers into the non-pooled budget until `size` is available."""
        while self._free and self._non_pooled_available < size:
            self._free.pop()
            self._non_pooled_available += self.poolable_size

    def try_allocate(self, size: int) -> bytearray | None:
        """A buffer of `size` bytes if one is available right now and nobody is queued
        ahead; otherwise None. Never waits."""
        self._check_size(size)
        with self._lock:
            if self._closed:
                raise ClientClosedError("Producer closed while allocating memory")
            if self._waiters:
                return None
            return self._take_locked(size)

    async def allocate(self, size: int, max_time: float) -> bytearray:
        """A buffer of `size` bytes, waiting up to `max_time` seconds for memory."""
        self._check_size(size)
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        with self._lock:
            if self._closed:
                raise ClientClosedError("Producer closed while allocating memory")
            if not self._waiters:
                buffer = self._take_locked(size)
                if buffer is not None:
                    return buffer
            waiter = _Waiter(size, loop.create_future())
            self._waiters.append(waiter)
            # Memory may already be free (e.g. others queued ahead just left).
            resolved = self._serve_waiters_locked()
        self._resolve(resolved)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), max_time)
        except TimeoutError:
            with self._lock:
                if waiter.satisfied:
                    buffer = waiter.buffer
                else:
                    buffer = None
                    self._abandon_locked(waiter)
                    resolved = self._serve_waiters_locked()
            if buffer is not None:
                return buffer
            self._resolve(resolved)
            raise BufferExhaustedError(
                f"Failed to allocate {size} bytes within the configured max blocking time "
                f"{round(max_time * 1000)} ms. Total memory: {self.total_memory} bytes. "
                f"Available memory: {self.available_memory} bytes. Poolable size: "
                f"{self.poolable_size} bytes") from None
        except asyncio.CancelledError:
            with self._lock:
                if waiter.satisfied and waiter.buffer is not None:
                    self._release_locked(waiter.buffer, waiter.size)
                elif not waiter.satisfied:
                    self._abandon_locked(waiter)
                resolved = self._serve_waiters_locked()
            self._resolve(resolved)
            raise

    def _abandon_locked(self, waiter: _Waiter) -> None:
        """A waiter leaves: its partial memory goes back."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        self._non_pooled_available += waiter.accumulated
        waiter.accumulated = 0

    def _serve_waiters_locked(self) -> list[_Waiter]:
        """Give released memory to the first waiter, piece by piece; move on to the next only
        once it has all it asked for. Returns the waiters now satisfied."""
        done: list[_Waiter] = []
        while self._waiters and not self._closed:
            first = self._waiters[0]
            if first.accumulated == 0 and first.size == self.poolable_size and self._free:
                first.buffer = self._free.popleft()
                first.accumulated = first.size
            else:
                need = first.size - first.accumulated
                self._free_up(need)
                got = min(need, self._non_pooled_available)
                self._non_pooled_available -= got
                first.accumulated += got
                if first.accumulated < first.size:
                    break
                first.buffer = bytearray(first.size)
            first.satisfied = True
            self._waiters.popleft()
            done.append(first)
        return done

    def _resolve(self, waiters: list[_Waiter]) -> None:
        """Wake satisfied waiters on the pool's loop, whichever thread released memory."""
        if not waiters:
            return
        loop = self._loop
        assert loop is not None
        try:
            same_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            same_loop = False
        for waiter in waiters:
            if same_loop:
                _set_result(waiter)
            else:
                loop.call_soon_threadsafe(_set_result, waiter)

    # -------------------------------------------------------------------------- release

    def _release_locked(self, buffer: bytearray, size: int) -> None:
        if size == self.poolable_size and len(buffer) == self.poolable_size:
            self._free.append(buffer)
        else:
            self._non_pooled_available += size

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Return a buffer; every release serves the first waiter."""
        size = len(buffer) if size is None else size
        with self._lock:
            self._release_locked(buffer, size)
            resolved = self._serve_waiters_locked()
        self._resolve(resolved)

    def close(self) -> None:
        """Fail every waiter; later allocations fail too."""
        with self._lock:
            self._closed = True
            waiters = list(self._waiters)
            self._waiters.clear()
            for waiter in waiters:
                self._non_pooled_available += waiter.accumulated
                waiter.accumulated = 0
        loop = self._loop
        for waiter in waiters:
            error = ClientClosedError("Producer closed while allocating memory")
            if loop is None:
                continue
            try:
                same_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                same_loop = False
            if same_loop:
                _set_error(waiter, error)
            else:
                loop.call_soon_threadsafe(_set_error, waiter, error)


def _set_result(waiter: _Waiter) -> None:
    if not waiter.future.done():
        assert waiter.buffer is not None
        waiter.future.set_result(waiter.buffer)


def _set_error(waiter: _Waiter, error: Exception) -> None:
    if not waiter.future.done():
        waiter.future.set_exception(error)
