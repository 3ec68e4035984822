"""Producer: the synchronous face of AsyncProducer.

The async core runs on a private event-loop thread. `send()` serializes and appends on the
caller's thread, so the common case costs no thread hop; only a send that must wait for
metadata or memory blocks the caller while the loop thread does the waiting. Callbacks run
on the loop thread and must not block; `RecordFuture.get(timeout)` waits from any other
thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.loop_thread import LoopThread
from moldau.client.producer.batch import Callback, RecordFuture
from moldau.client.producer.partitioner import PartitionerFn
from moldau.client.producer.producer import AsyncProducer, HeadersInput
from moldau.client.serialization import Serializer
from moldau.client.types import (
    ConsumerGroupMetadata,
    PreparedTransaction,
    RecordMetadata,
    TopicPartition,
)


class Producer:
    """Kafka producer for threads. Settings as for AsyncProducer."""

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 key_serializer: str | Serializer | None = None,
                 value_serializer: str | Serializer | None = None,
                 partitioner: PartitionerFn | None = None, **settings: Any) -> None:
        self._core = AsyncProducer(config, key_serializer=key_serializer,
                                   value_serializer=value_serializer, partitioner=partitioner,
                                   **settings)
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
    def async_producer(self) -> AsyncProducer:
        return self._core

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: HeadersInput = None, partition: int | None = None,
             timestamp_ms: int | None = None, callback: Callback | None = None
             ) -> RecordFuture:
        """Queue one record; returns a future whose `.get(timeout)` gives RecordMetadata.
        Blocks up to max.block.ms only when metadata or buffer memory is missing."""
        result = self._core.try_send(topic, value, key, headers, partition, timestamp_ms,
                                     callback)
        if type(result) is RecordFuture:
            return result
        return self._thread.run(self._core.place(*result.args))  # type: ignore[union-attr]

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                      headers: HeadersInput = None, partition: int | None = None,
                      timestamp_ms: int | None = None,
                      timeout: float | None = None) -> RecordMetadata:
        return self.send(topic, value, key, headers, partition, timestamp_ms).get(timeout)

    def flush(self, timeout: float | None = None) -> None:
        self._thread.run(self._core.flush(timeout))

    # Transactions: see AsyncProducer's methods of the same names. Each waits at most
    # `timeout` seconds (max.block.ms by default).

    def init_transactions(self, timeout: float | None = None) -> None:
        self._thread.run(self._core.init_transactions(timeout))

    def begin_transaction(self) -> None:
        self._core.begin_transaction()

    def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
            group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None) -> None:
        self._thread.run(self._core.send_offsets_to_transaction(offsets, group_metadata,
                                                                timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._thread.run(self._core.commit_transaction(timeout))

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        return self._thread.run(self._core.prepare_transaction(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._thread.run(self._core.abort_transaction(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._core.partitions_for(topic))

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (for up to `timeout` seconds), then stop the loop thread."""
        if self._core.closed and self._thread.loop.is_closed():
            return
        try:
            if not self._thread.loop.is_closed():
                self._thread.run(self._core.close(timeout))
        finally:
            self._thread.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
