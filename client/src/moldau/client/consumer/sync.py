"""Consumer: the synchronous face of AsyncConsumer.

The async core runs on a private event-loop thread; each call hands its work to that loop
and waits. Rebalance listener callbacks run on the caller's own thread, inside poll() (or
close()), so they may call the consumer (commit, seek, position) as Kafka's allow.

As in Kafka, a consumer is for one thread at a time: a call from a second thread while
another is inside the consumer raises ConcurrentModificationError (the same thread may
re-enter, e.g. from a listener). `wakeup()` is the one call any thread may make; it makes
the current or next blocking call raise WakeupError.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.consumer.consumer import AsyncConsumer, CommitCallback, OffsetAndTimestamp
from moldau.client.consumer.records import ConsumerRecord, ConsumerRecords, FetchedBatch
from moldau.client.errors import ClientClosedError, ConcurrentModificationError
from moldau.client.loop_thread import LoopThread
from moldau.client.serialization import Deserializer
from moldau.client.types import ConsumerGroupMetadata, TopicPartition

T = TypeVar("T")

_Job = Callable[[], None]


class Consumer:
    """Kafka consumer for threads. Settings as for AsyncConsumer."""

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 key_deserializer: str | Deserializer | None = None,
                 value_deserializer: str | Deserializer | None = None,
                 **settings: Any) -> None:
        self._core = AsyncConsumer(config, key_deserializer=key_deserializer,
                                   value_deserializer=value_deserializer, **settings)
        self._core.listener_runner = self._listener_on_caller
        self._guard = threading.Lock()
        self._owner: int | None = None
        self._depth = 0
        self._inbox: queue.SimpleQueue[_Job | None] | None = None
        self._thread = LoopThread(name=f"moldau-{self._core.client_id}")
        try:
            self._thread.run(self._core.start())
        except BaseException:
            self._thread.stop()
            raise

    @property
    def config(self) -> dict[str, Any]:
        return self._core.config

    @property
    def async_consumer(self) -> AsyncConsumer:
        return self._core

    # -------------------------------------------------------------------------- plumbing

    @contextlib.contextmanager
    def _use(self, *, closing: bool = False) -> Iterator[None]:
        me = threading.get_ident()
        with self._guard:
            if self._owner is not None and self._owner != me:
                raise ConcurrentModificationError(
                    "KafkaConsumer is not safe for multi-threaded access")
            self._owner = me
            self._depth += 1
        try:
            if self._core.closed and not closing:
                raise ClientClosedError("This consumer has already been closed.")
            yield
        finally:
            with self._guard:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop; meanwhile run listener callbacks it sends back here."""
        loop = self._thread.loop
        if self._thread.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking consumer call was made from the consumer's own "
                               "event loop thread")
        if loop.is_closed():
            coro.close()
            raise ClientClosedError("This consumer has already been closed.")
        inbox: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        outer, self._inbox = self._inbox, inbox
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        future.add_done_callback(lambda _f: inbox.put(None))
        try:
            while True:
                job = inbox.get()
                if job is not None:
                    job()
                elif future.done():
                    return future.result()
        except BaseException:
            future.cancel()
            raise
        finally:
            self._inbox = outer

    def _call(self, function: Callable[..., T], *args: Any) -> T:
        """Run a plain method of the core on the loop thread (its state lives there)."""
        async def call() -> T:
            return function(*args)
        return self._run(call())

    async def _listener_on_caller(self, method: Callable[[list[TopicPartition]], Any],
                                  partitions: list[TopicPartition]) -> None:
        inbox = self._inbox
        if inbox is None:  # not inside a call: nobody to hand it to
            method(partitions)
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def job() -> None:
            try:
                method(partitions)
            except BaseException as exc:
                loop.call_soon_threadsafe(settle, exc)
            else:
                loop.call_soon_threadsafe(settle, None)

        inbox.put(job)
        await done

    # -------------------------------------------------------------------------- API

    def subscribe(self, topics: Iterable[str] | str | None = None, *,
                  pattern: Any = None, listener: Any = None) -> None:
        with self._use():
            self._call(lambda: self._core.subscribe(topics, pattern=pattern,
                                                    listener=listener))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        with self._use():
            self._call(self._core.assign, list(partitions))

    def unsubscribe(self) -> None:
        with self._use():
            self._run(self._core.unsubscribe())

    def assignment(self) -> set[TopicPartition]:
        with self._use():
            return self._call(self._core.assignment)

    def subscription(self) -> set[str]:
        with self._use():
            return self._call(self._core.subscription)

    def group_metadata(self) -> ConsumerGroupMetadata:
        with self._use():
            return self._call(self._core.group_metadata)

    def poll(self, timeout: float = 0.0, *, max_records: int | None = None
             ) -> ConsumerRecords:
        with self._use():
            return self._run(self._core.poll(timeout, max_records=max_records))

    def poll_batches(self, timeout: float = 0.0, *, max_records: int | None = None
                     ) -> list[FetchedBatch]:
        with self._use():
            return self._run(self._core.poll_batches(timeout, max_records=max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, polling as needed, until the consumer is closed."""
        while not self._core.closed:
            yield from self.poll(1.0)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        with self._use():
            self._call(self._core.seek, partition, offset)

    def seek_to_beginning(self, *partitions: Any) -> None:
        with self._use():
            self._call(self._core.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: Any) -> None:
        with self._use():
            self._call(self._core.seek_to_end, *partitions)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        with self._use():
            return self._run(self._core.position(partition, timeout))

    def pause(self, *partitions: Any) -> None:
        with self._use():
            self._call(self._core.pause, *partitions)

    def resume(self, *partitions: Any) -> None:
        with self._use():
            self._call(self._core.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        with self._use():
            return self._call(self._core.paused)

    def highwater(self, partition: TopicPartition) -> int | None:
        with self._use():
            return self._call(self._core.highwater, partition)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout: float | None = None) -> None:
        """Commit and wait (Kafka's commitSync)."""
        with self._use():
            self._run(self._core.commit(offsets, timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
                     = None, callback: CommitCallback | None = None) -> None:
        """Commit in the background; `callback(offsets, error)` runs on the loop thread."""
        with self._use():
            self._call(self._core.commit_async, offsets, callback)

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        with self._use():
            return self._run(self._core.committed(list(partitions), timeout))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: float | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        with self._use():
            return self._run(self._core.offsets_for_times(timestamps, timeout))

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        with self._use():
            return self._run(self._core.beginning_offsets(list(partitions), timeout))

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout: float | None = None) -> dict[TopicPartition, int]:
        with self._use():
            return self._run(self._core.end_offsets(list(partitions), timeout))

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        with self._use():
            return self._run(self._core.partitions_for(topic, timeout))

    def topics(self, timeout: float | None = None) -> set[str]:
        with self._use():
            return self._run(self._core.topics(timeout))

    def wakeup(self) -> None:
        """Interrupt the current or next blocking call (WakeupError); thread-safe."""
        self._core.wakeup()

    def close(self, timeout: float | None = None) -> None:
        """Commit (with auto commit), leave the group, stop the loop thread."""
        with self._use(closing=True):
            if self._thread.loop.is_closed():
                return
            try:
                if not self._core.closed:
                    self._run(self._core.close(timeout))
            finally:
                self._thread.stop()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
