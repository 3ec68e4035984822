"""Which fetcher follows which partition (Kafka's AbstractFetcherManager).

Partitions are spread over num.replica.fetchers fetchers per source broker by a stable hash
of topic and partition. A fetcher left without partitions is stopped. Fetchers only run
between start() and stop(); partitions added before start() wait for it.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib

from moldau.broker.replication.fetcher import (
    FetchSettings,
    FetchState,
    FollowerHost,
    ReplicaFetcher,
    TopicPartition,
)

FetcherKey = tuple[int, int]  # (source broker, fetcher id)


class FetcherManager:
    def __init__(self, host: FollowerHost, settings: FetchSettings) -> None:
        self.host = host
        self.settings = settings
        self.fetchers: dict[FetcherKey, ReplicaFetcher] = {}
        self._assigned: dict[TopicPartition, FetcherKey] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._running = False

    def fetcher_id(self, key: TopicPartition) -> int:
        topic, partition = key
        return (31 * zlib.crc32(topic.encode()) + partition) % self.settings.num_fetchers

    def add(self, key: TopicPartition, topic_id: uuid.UUID, leader_id: int, leader_epoch: int,
            generation: int) -> None:
        """Follow `key` from `leader_id`, starting with truncation."""
        self.remove(key)
        where = (leader_id, self.fetcher_id(key))
        fetcher = self.fetchers.get(where)
        if fetcher is None:
            fetcher = ReplicaFetcher(self.host, self.settings, *where)
            self.fetchers[where] = fetcher
            if self._running:
                fetcher.start()
        fetcher.add(FetchState(key[0], key[1], topic_id, leader_epoch, generation))
        self._assigned[key] = where

    def remove(self, key: TopicPartition) -> None:
        where = self._assigned.pop(key, None)
        if where is None:
            return
        fetcher = self.fetchers.get(where)
        if fetcher is None:
            return
        fetcher.remove(key)
        if not fetcher.partitions:
            del self.fetchers[where]
            self._forget(fetcher.cancel())

    def leader_of(self, key: TopicPartition) -> int | None:
        where = self._assigned.get(key)
        return where[0] if where is not None else None

    def broker_changed(self, broker_id: int) -> None:
        for (leader_id, _), fetcher in self.fetchers.items():
            if leader_id == broker_id:
                fetcher.reconnect()

    def _forget(self, task: asyncio.Task[None] | None) -> None:
        if task is not None and not task.done():
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def start(self) -> None:
        self._running = True
        for fetcher in self.fetchers.values():
            fetcher.start()

    async def stop(self) -> None:
        self._running = False
        for fetcher in self.fetchers.values():
            self._forget(fetcher.cancel())
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
