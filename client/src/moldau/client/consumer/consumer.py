"""AsyncConsumer: the consumer's public asyncio API over the Fetcher and group membership.

    async with AsyncConsumer({"bootstrap.servers": "localhost:9092",
                              "group.id": "billing"}) as consumer:
        consumer.subscribe(["orders"])
        while True:
            for record in await consumer.poll(1.0):
                ...

Rebalance listener callbacks, auto commits and position look-ups all happen inside poll(),
as in Kafka's consumer; heartbeats run in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.config import parse_consumer_config
from moldau.client.consumer.assignors import resolve_assignors
from moldau.client.consumer.coordinator import ConsumerCoordinator
from moldau.client.consumer.fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Fetcher
from moldau.client.consumer.records import ConsumerRecord, ConsumerRecords, FetchedBatch
from moldau.client.consumer.subscription_state import (
    OffsetResetStrategy,
    SubscriptionState,
)
from moldau.client.errors import (
    ClientClosedError,
    IllegalStateError,
    InvalidGroupIdError,  # type: ignore[attr-defined]
    KafkaError,
    KafkaTimeoutError,
    WakeupError,
)
from moldau.client.metadata import Metadata
from moldau.client.network import NetworkClient
from moldau.client.serialization import Deserializer, resolve_deserializer
from moldau.client.types import ConsumerGroupMetadata, TopicPartition

log = logging.getLogger("moldau.client.consumer")

_NO_GROUP = ("To use the group management or offset commit APIs, you must provide a valid "
             "group.id in the consumer configuration.")

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], KafkaError | None],
                          Any]


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class ConsumerRebalanceListener:
    """Override the methods you need; in AsyncConsumer they may be coroutines. They run
    inside poll() (and close()), so committing offsets from them is safe."""

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> Any:
        """Before a rebalance takes partitions away (commit their offsets here)."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> Any:
        """After a rebalance gives partitions (with the cooperative protocol: only the
        newly added ones)."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> Any:
        """The partitions already belong to someone else (the member was fenced or timed
        out); by default the same as revoked, as in Kafka."""
        return self.on_partitions_revoked(lost)


# Runs one listener method; the synchronous Consumer replaces it to run on its caller's
# thread.
ListenerRunner = Callable[[Callable[[list[TopicPartition]], Any], list[TopicPartition]],
                          Awaitable[None]]


async def _run_here(method: Callable[[list[TopicPartition]], Any],
                    partitions: list[TopicPartition]) -> None:
    result = method(partitions)
    if inspect.isawaitable(result):
        await result


def _partitions(args: tuple[Any, ...]) -> list[TopicPartition]:
    """Accept f(tp, tp) and f([tp, tp]) alike."""
    if len(args) == 1 and not isinstance(args[0], TopicPartition) and \
            isinstance(args[0], Iterable):
        args = tuple(args[0])
    return [tp if isinstance(tp, TopicPartition) else TopicPartition(*tp) for tp in args]


class AsyncConsumer:
    """Kafka consumer for asyncio.

    `config` uses Kafka's setting names (`{"bootstrap.servers": "host:9092",
    "group.id": "g"}`); keyword arguments with underscores are merged in. Keys and values
    are deserialized by `key_deserializer` / `value_deserializer` ("bytes" (default), "str",
    "json" or a callable taking bytes or None).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 key_deserializer: str | Deserializer | None = None,
                 value_deserializer: str | Deserializer | None = None,
                 **settings: Any) -> None:
        cfg = parse_consumer_config(config, settings)
        self.config = cfg
        self.client_id: str = cfg["client.id"]
        self.group_id: str | None = cfg["group.id"]
        self.default_timeout = cfg["default.api.timeout.ms"] / 1000
        assignors = resolve_assignors(cfg["partition.assignment.strategy"])
        self.metadata = Metadata(cfg["bootstrap.servers"], max_age_ms=cfg["metadata.max.age.ms"],
                                 retry_backoff_ms=cfg["retry.backoff.ms"],
                                 retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
                                 allow_auto_topic_creation=cfg["allow.auto.create.topics"])
        self.network = NetworkClient.from_config(cfg, self.metadata)
        self.subscriptions = SubscriptionState(OffsetResetStrategy(cfg["auto.offset.reset"]))
        self.fetcher = Fetcher(
            self.network, self.metadata, self.subscriptions, cfg,
            key_deserializer=resolve_deserializer(key_deserializer, "key deserializer"),
            value_deserializer=resolve_deserializer(value_deserializer, "value deserializer"))
        self.coordinator = ConsumerCoordinator(
            self.network, self.metadata, self.subscriptions, cfg, assignors,
            self._invoke_listener, self.fetcher.notify) if self.group_id is not None else None
        self._listener: Any = None
        self.listener_runner: ListenerRunner = _run_here
        self._metadata_task: asyncio.Task[None] | None = None
        self._positions_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup = threading.Event()
        self._started = False
        self.closed = False

    # -------------------------------------------------------------------------- life cycle

    async def start(self) -> None:
        if self._started:
            return
        self._ensure_open()
        self._loop = asyncio.get_running_loop()
        self._metadata_task = self._loop.create_task(self.metadata.run(self.network),
                                                     name=f"moldau-metadata-{self.client_id}")
        self._started = True

    async def close(self, timeout: float | None = None) -> None:
        """Commit (with auto commit), leave the group, and release every connection."""
        if self.closed:
            return
        deadline = time.monotonic() + (30.0 if timeout is None else timeout)
        try:
            if self.coordinator is not None and self._started:
                await self.coordinator.close(deadline)
        finally:
            self.closed = True
            await self.fetcher.close()
            self.metadata.close()
            for task in (self._metadata_task, self._positions_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await self.network.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _ensure_open(self) -> None:
        if self.closed:
            raise ClientClosedError("This consumer has already been closed.")

    def _require_group(self) -> ConsumerCoordinator:
        if self.coordinator is None:
            raise InvalidGroupIdError(_NO_GROUP)
        return self.coordinator

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.default_timeout if timeout is None else timeout)

    # -------------------------------------------------------------------------- subscribing

    def subscribe(self, topics: Iterable[str] | str | None = None, *,
                  pattern: str | re.Pattern[str] | None = None, listener: Any = None) -> None:
        """Join the group for these topics (or every topic matching `pattern`). `listener`
        is a ConsumerRebalanceListener (or any object with its methods)."""
        self._ensure_open()
        self._require_group()
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes either topics or a pattern")
        if pattern is not None:
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.subscriptions.subscribe_pattern(compiled)
            self.metadata.need_all_topics = True
            self.metadata.request_update()
        else:
            names = [topics] if isinstance(topics, str) else list(topics or ())
            for name in names:
                if not isinstance(name, str) or not name.strip():
                    raise ValueError(f"Topic collection to subscribe to cannot contain null "
                                     f"or empty topic: {name!r}")
            if not names:
                self.unsubscribe_now()
                return
            if self.subscriptions.subscribe(names):
                for name in names:
                    self.metadata.add_topic(name)
                assert self.coordinator is not None
                self.coordinator.request_rejoin("the subscription changed")
        self._listener = listener

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read these partitions, without group management."""
        self._ensure_open()
        wanted = _partitions((partitions,))
        if not wanted:
            self.unsubscribe_now()
            return
        self.subscriptions.assign_from_user(wanted)
        self.fetcher.clear_buffered(wanted)
        for topic in {tp.topic for tp in wanted}:
            self.metadata.add_topic(topic)

    def unsubscribe_now(self) -> None:
        """Drop the subscription or assignment at once; leaving the group happens in the
        background (use `unsubscribe()` to wait for it and run the listener)."""
        self.subscriptions.unsubscribe()
        self.fetcher.clear_buffered()
        self.metadata.need_all_topics = False

    async def unsubscribe(self) -> None:
        self._ensure_open()
        coordinator = self.coordinator
        if coordinator is not None and self.subscriptions.has_auto_assignment:
            owned = self.subscriptions.partitions()
            if owned:
                await self._invoke_listener("on_partitions_revoked", owned)
            await coordinator.maybe_leave_group("the consumer unsubscribed")
        self.unsubscribe_now()

    def assignment(self) -> set[TopicPartition]:
        return set(self.subscriptions.partitions())

    def subscription(self) -> set[str]:
        return set(self.subscriptions.topics) if self.subscriptions.has_auto_assignment \
            else set()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to a transactional producer's
        send_offsets_to_transaction()."""
        self._ensure_open()
        coordinator = self._require_group()
        generation = coordinator.generation
        return ConsumerGroupMetadata(coordinator.group_id, generation.generation_id,
                                     generation.member_id, coordinator.group_instance_id)

    async def _invoke_listener(self, name: str, partitions: list[TopicPartition]) -> None:
        self.fetcher.clear_buffered(self.subscriptions.partitions())
        listener = self._listener
        method = getattr(listener, name, None) if listener is not None else None
        if method is None:
            if name == "on_partitions_lost":
                method = getattr(listener, "on_partitions_revoked", None)
            if method is None:
                return
        try:
            await self.listener_runner(method, sorted(partitions))
        except Exception:
            log.exception("rebalance listener %s failed", name)
            raise

    # -------------------------------------------------------------------------- polling

    def wakeup(self) -> None:
        """Make the current or next blocking call raise WakeupError (any thread)."""
        self._wakeup.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.fetcher.notify)

    def _check_wakeup(self) -> None:
        if self._wakeup.is_set():
            self._wakeup.clear()
            raise WakeupError("The consumer was woken up")

    async def poll(self, timeout: float = 0.0, *, max_records: int | None = None
                   ) -> ConsumerRecords:
        """Records from the assigned partitions: buffered ones at once, else wait up to
        `timeout` seconds for a fetch. At most max.poll.records (or `max_records`)."""
        found = await self._poll(timeout, max_records, self.fetcher.collect)
        return ConsumerRecords(found) if found else ConsumerRecords.EMPTY

    async def poll_batches(self, timeout: float = 0.0, *, max_records: int | None = None
                           ) -> list[FetchedBatch]:
        """As poll(), but whole record batches, undecoded (FetchedBatch): for callers that
        decode records in bulk. Batches holding about max.poll.records (or `max_records`)
        records, at least one; positions move past them as past polled records."""
        found = await self._poll(timeout, max_records, self.fetcher.collect_batches)
        return [batch for batches in found.values() for batch in batches]

    async def _poll(self, timeout: float, max_records: int | None,
                    collect: Callable[[], dict[TopicPartition, list[Any]]]
                    ) -> dict[TopicPartition, list[Any]]:
        self._ensure_open()
        if not self._started:
            await self.start()
        if not self.subscriptions.assignment and not self.subscriptions.has_auto_assignment:
            raise IllegalStateError("Consumer is not subscribed to any topics or assigned "
                                    "any partitions")
        deadline = time.monotonic() + max(timeout, 0.0)
        fetcher = self.fetcher
        limit = fetcher.max_poll_records
        if max_records is not None:
            fetcher.max_poll_records = max_records
        try:
            while True:
                self._check_wakeup()
                if self.coordinator is not None:
                    await self.coordinator.poll(deadline)
                await self._update_positions(deadline)
                found = collect()
                if found:
                    # The next fetch is on its way while the caller handles these.
                    fetcher.send_fetches()
                    return found
                fetcher.send_fetches()
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    return {}
                if self.coordinator is not None:
                    remaining = min(remaining, max(
                        self.coordinator.time_to_next_poll(now), 0.001))
                await fetcher.wait(min(remaining, fetcher.retry_delay))
        finally:
            fetcher.max_poll_records = limit

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """Records one by one, polling as needed, until the consumer is closed."""
        while not self.closed:
            for record in await self.poll(1.0):
                yield record

    async def _update_positions(self, deadline: float) -> None:
        """Positions for partitions that need one: committed offsets, then resets. Runs in
        the background so a short poll never cancels a look-up half way."""
        task = self._positions_task
        if task is None:
            subs = self.subscriptions
            if not subs.missing_positions() and not subs.awaiting_reset():
                return
            task = self._positions_task = asyncio.get_running_loop().create_task(
                self._refresh_positions())
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.wait([task], timeout=remaining)
        if task.done():
            self._positions_task = None
            task.result()

    async def _refresh_positions(self) -> None:
        deadline = time.monotonic() + self.default_timeout
        if self.coordinator is not None:
            await self.coordinator.refresh_committed_offsets(deadline)
        for tp in self.subscriptions.missing_positions():
            self.subscriptions.request_reset(tp)
        try:
            await self.fetcher.reset_offsets(deadline)
        except KafkaTimeoutError as exc:
            log.warning("resetting offsets failed: %s", exc)

    # -------------------------------------------------------------------------- positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        self.subscriptions.seek(partition, offset)

    def seek_to_beginning(self, *partitions: Any) -> None:
        for tp in _partitions(partitions) or self.subscriptions.partitions():
            self.subscriptions.request_reset(tp, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: Any) -> None:
        for tp in _partitions(partitions) or self.subscriptions.partitions():
            self.subscriptions.request_reset(tp, OffsetResetStrategy.LATEST)

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record poll() returns for `partition`."""
        self._ensure_open()
        if not self._started:
            await self.start()
        state = self.subscriptions.state(partition)
        deadline = self._deadline(timeout)
        while not state.has_valid_position:
            self._check_wakeup()
            await self._update_positions(deadline)
            if time.monotonic() >= deadline and not state.has_valid_position:
                waited = self.default_timeout if timeout is None else timeout
                raise KafkaTimeoutError(f"Timeout of {round(waited * 1000)} ms expired before "
                                        f"the position for partition {partition} could be "
                                        f"determined")
        assert state.position is not None
        return state.position

    def pause(self, *partitions: Any) -> None:
        for tp in _partitions(partitions):
            self.subscriptions.pause(tp)

    def resume(self, *partitions: Any) -> None:
        for tp in _partitions(partitions):
            self.subscriptions.resume(tp)
        self.fetcher.notify()

    def paused(self) -> set[TopicPartition]:
        return self.subscriptions.paused()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark seen in the last fetch of `partition`, if any."""
        state = self.subscriptions.assignment.get(partition)
        return None if state is None or state.high_watermark < 0 else state.high_watermark

    # -------------------------------------------------------------------------- commits

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
                     = None, timeout: float | None = None) -> None:
        """Commit `offsets` (default: the positions of everything poll() returned) and wait
        for the coordinator to acknowledge them."""
        self._ensure_open()
        coordinator = self._require_group()
        if not self._started:
            await self.start()
        self._check_wakeup()
        await coordinator.commit_sync(self._offsets(offsets), self._deadline(timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
                     = None, callback: CommitCallback | None = None) -> None:
        """Commit in the background; `callback(offsets, error)` runs when it is answered.
        Must be called on the consumer's event loop."""
        self._ensure_open()
        self._require_group().commit_async(self._offsets(offsets), callback)

    def _offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return {tp: OffsetAndMetadata(offset, "", epoch) for tp, (offset, epoch)
                    in self.subscriptions.all_consumed().items()}
        return {tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                for tp, om in offsets.items()}

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout: float | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        self._ensure_open()
        coordinator = self._require_group()
        if not self._started:
            await self.start()
        return await coordinator.fetch_committed(_partitions((partitions,)),
                                                 self._deadline(timeout))

    # -------------------------------------------------------------------------- offsets

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                                timeout: float | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest offset whose timestamp is at or after the given one
        (None when there is none)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target "
                                 f"time cannot be negative.")
        found = await self._list_offsets(dict(timestamps), timeout)
        return {tp: None if tp not in found or found[tp][0] < 0 else
                OffsetAndTimestamp(*found[tp]) for tp in timestamps}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout: float | None = None) -> dict[TopicPartition, int]:
        wanted = _partitions((partitions,))
        found = await self._list_offsets(dict.fromkeys(wanted, EARLIEST_TIMESTAMP), timeout)
        return {tp: found[tp][0] for tp in wanted}

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        """The offsets after the last records (the high watermark; the last stable offset
        with read_committed)."""
        wanted = _partitions((partitions,))
        found = await self._list_offsets(dict.fromkeys(wanted, LATEST_TIMESTAMP), timeout)
        return {tp: found[tp][0] for tp in wanted}

    async def _list_offsets(self, specs: dict[TopicPartition, int], timeout: float | None
                            ) -> dict[TopicPartition, tuple[int, int, int | None]]:
        self._ensure_open()
        if not self._started:
            await self.start()
        deadline = self._deadline(timeout)
        for topic in {tp.topic for tp in specs}:
            await self.metadata.fetch_topic(topic, max(deadline - time.monotonic(), 0.001))
        return await self.fetcher.list_offsets(specs, deadline)

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        self._ensure_open()
        if not self._started:
            await self.start()
        cluster = await self.metadata.fetch_topic(topic, self.default_timeout
                                                  if timeout is None else timeout)
        return list(range(cluster.partition_count(topic) or 0))

    async def topics(self, timeout: float | None = None) -> set[str]:
        """Every topic name in the cluster."""
        self._ensure_open()
        if not self._started:
            await self.start()
        previous = self.metadata.need_all_topics
        self.metadata.need_all_topics = True
        try:
            deadline = self._deadline(timeout)
            # An update already in flight lists only the subscribed topics: wait for one
            # asked for after need_all_topics was set.
            asked = self.metadata.request_update()
            while not self.metadata.answers(asked):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    error = self.metadata.last_error
                    raise KafkaTimeoutError(
                        "Timeout expired while fetching topic metadata"
                        + (f" ({error})" if error is not None else ""))
                self.metadata.request_update()
                await self.metadata.wait_for_change(remaining)
            return set(self.metadata.cluster.topics)
        finally:
            self.metadata.need_all_topics = previous or self.subscriptions.pattern is not None
