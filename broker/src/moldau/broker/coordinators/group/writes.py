"""The coordinator's appends to `__consumer_offsets`.

An append starts when the state it records changes: a coroutine is wrapped in a task at
once, and tasks start in the order they are created, so the log keeps that order even
when some writes are waited for and others are not.

A write returns (or its awaitable gives) the log offset of its first record, which orders
regular and transactional offset commits (see offsets.py); None when the log does not say.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from typing import Protocol

from moldau.broker.coordinators.group.write_errors import store_error
from moldau.broker.coordinators.topic import Record, TxnProducer
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.groups")

Written = int | None  # the log offset of the first record written, when known


class Write(Protocol):
    """Appends records to the group's partition, in a transactional batch of `producer` when
    given: done on return, or when the awaitable is."""

    def __call__(self, group_id: str, records: list[Record], producer: TxnProducer | None = ...,
                 /) -> Awaitable[Written] | Written: ...


class GroupWriter:
    def __init__(self, write: Write) -> None:
        self._write = write
        self._unawaited: set[asyncio.Future[Written]] = set()

    def _begin(self, group_id: str, records: list[Record], producer: TxnProducer | None = None
               ) -> asyncio.Future[Written] | Written:
        """Start the append; what it wrote when it is done already. Raises its KafkaError."""
        # Only transactional writes pass the producer, so simple writers take two arguments.
        pending = self._write(group_id, records) if producer is None else \
            self._write(group_id, records, producer)
        return asyncio.ensure_future(pending) if inspect.isawaitable(pending) else pending

    async def store(self, group_id: str, records: list[Record], *, offsets: bool,
                    producer: TxnProducer | None = None) -> tuple[ErrorCode, int]:
        """Append and wait until acknowledged: the error the client is to be given, and the
        log offset of the first record (-1 when not known)."""
        try:
            pending = self._begin(group_id, records, producer)
            written = await pending if isinstance(pending, asyncio.Future) else pending
        except KafkaError as exc:
            error = store_error(exc.code, offsets=offsets)
            log.warning("Cannot store %s of group %s: %s (answered %s)",
                        "offsets" if offsets else "metadata", group_id, exc, error.name)
            return error, -1
        return ErrorCode.none, -1 if written is None else written

    def store_later(self, group_id: str, records: list[Record]) -> None:
        """Append with no one waiting (tombstones, an emptied group), as Kafka does."""
        try:
            pending = self._begin(group_id, records)
        except KafkaError as exc:
            log.warning("Cannot store records of group %s: %s", group_id, exc)
            return
        if isinstance(pending, asyncio.Future):
            self._unawaited.add(pending)
            pending.add_done_callback(lambda done: self._done(group_id, done))

    def _done(self, group_id: str, done: asyncio.Future[Written]) -> None:
        self._unawaited.discard(done)
        if done.cancelled():
            return
        exc = done.exception()
        if isinstance(exc, KafkaError):
            log.warning("Cannot store records of group %s: %s", group_id, exc)
        elif exc is not None:
            log.error("Storing records of group %s failed", group_id, exc_info=exc)
