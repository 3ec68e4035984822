"""The coordinator's appends to `__consumer_offsets`.

An append starts when the state it records changes: a coroutine is wrapped in a task at
once, and tasks start in the order they are created, so the log keeps that order even
when some writes are waited for and others are not.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable

from moldau.broker.coordinators.group.write_errors import store_error
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.groups")

Record = tuple[bytes, bytes | None]
# Appends records to the group's partition: done on return, or when the awaitable is.
Write = Callable[[str, list[Record]], Awaitable[None] | None]


class GroupWriter:
    def __init__(self, write: Write) -> None:
        self._write = write
        self._unawaited: set[asyncio.Future[None]] = set()

    def _begin(self, group_id: str, records: list[Record]) -> asyncio.Future[None] | None:
        """Start the append; None when it is done already. Raises its KafkaError."""
        pending = self._write(group_id, records)
        return asyncio.ensure_future(pending) if inspect.isawaitable(pending) else None

    async def store(self, group_id: str, records: list[Record], *, offsets: bool
                    ) -> ErrorCode:
        """Append and wait until acknowledged; the error the client is to be given."""
        try:
            pending = self._begin(group_id, records)
            if pending is not None:
                await pending
        except KafkaError as exc:
            error = store_error(exc.code, offsets=offsets)
            log.warning("Cannot store %s of group %s: %s (answered %s)",
                        "offsets" if offsets else "metadata", group_id, exc, error.name)
            return error
        return ErrorCode.none

    def store_later(self, group_id: str, records: list[Record]) -> None:
        """Append with no one waiting (tombstones, an emptied group), as Kafka does."""
        try:
            pending = self._begin(group_id, records)
        except KafkaError as exc:
            log.warning("Cannot store records of group %s: %s", group_id, exc)
            return
        if pending is not None:
            self._unawaited.add(pending)
            pending.add_done_callback(lambda done: self._done(group_id, done))

    def _done(self, group_id: str, done: asyncio.Future[None]) -> None:
        self._unawaited.discard(done)
        if done.cancelled():
            return
        exc = done.exception()
        if isinstance(exc, KafkaError):
            log.warning("Cannot store records of group %s: %s", group_id, exc)
        elif exc is not None:
            log.error("Storing records of group %s failed", group_id, exc_info=exc)
