"""A private event loop on a daemon thread: how the synchronous clients run the async core.

Each synchronous client owns one, so its network I/O, timers and callbacks run there while
the caller's thread blocks only in the calls that must wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from moldau.client.errors import ClientClosedError, KafkaTimeoutError

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "moldau-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(
                        asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @property
    def ident(self) -> int | None:
        return self.thread.ident

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result from the calling thread."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking client call was made from the client's own "
                               "event loop thread (e.g. inside a callback)")
        if self.loop.is_closed() or not self.thread.is_alive():
            coro.close()
            raise ClientClosedError("The client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the coroutine itself raised a timeout error
            future.cancel()
            raise KafkaTimeoutError(f"The operation did not complete within {timeout} s") \
                from None

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float | None = 10.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        if not self.in_loop_thread():
            self.thread.join(timeout)
