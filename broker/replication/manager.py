"""The partitions this broker hosts, kept in step with the metadata image.

It creates and deletes logs as metadata records arrive, answers "am I the leader", appends
validated produce data and wakes long-polling fetches when data arrives. On one node every
partition's leader and only in-sync replica is this node, so the high watermark follows the
log end; the replication issue adds followers, ISR changes and a purgatory for acks=all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from moldau.broker.config import BrokerConfig
from moldau.broker.log.config import TOPIC_CONFIG, LogConfig
from moldau.broker.log.log import AppendInfo, PartitionLog
from moldau.broker.log.manager import LogManager
from moldau.broker.log.validation import RecordValidationError, validate_records
from moldau.broker.metadata.controller import INTERNAL_TOPICS
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from moldau.config import LONG_MAX
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.replication")

TopicPartition = tuple[str, int]


@dataclass
class Partition:
    topic: str
    index: int
    record: PartitionRecord
    log: PartitionLog

    @property
    def leader_epoch(self) -> int:
        return self.record.leader_epoch


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)


# Produce requests up to this size are appended on the event loop thread.
INLINE_APPEND_BYTES = 16384


class ReplicaManager:
    def __init__(self, node_id: int, config: BrokerConfig, logs: LogManager,
                 image: MetadataImage, io_threads: int) -> None:
        self.node_id = node_id
        self.config = config
        self.logs = logs
        self.image = image
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters: defaultdict[TopicPartition, set[asyncio.Future[None]]] = \
            defaultdict(set)
        self.executor = ThreadPoolExecutor(io_threads, thread_name_prefix="io")

    # --- keeping up with metadata ----------------------------------------------------------

    def sync_with_image(self) -> None:
        """At start-up: host what the image says, remove logs of topics that are gone."""
        wanted: set[TopicPartition] = set()
        for topic in self.image.topics.values():
            for record in topic.partitions.values():
                if self.node_id in record.replicas:
                    wanted.add((topic.name, record.partition))
                    self._host(topic.name, record)
        for stray_log in list(self.logs.all_logs()):
            key = (stray_log.topic, stray_log.partition)
            if key not in wanted:
                log.warning("Deleting log %s-%d: its topic is no longer in the metadata",
                            *key)
                self.logs.delete(*key)

    def on_metadata(self, records: Sequence[MetadataRecord]) -> None:
        for record in records:
            match record:
                case PartitionRecord() if self.node_id in record.replicas:
                    topic = self.image.topics_by_id[record.topic_id]
                    self._host(topic.name, record)
                case RemoveTopicRecord():
                    self._remove_topic(record)
                case ConfigRecord(resource_type=kind, resource_name=name) \
                        if kind == TOPIC_RESOURCE:
                    self._reconfigure(name)
                case TopicRecord():
                    pass

    def log_config_for(self, topic: str) -> LogConfig:
        overrides = {name: TOPIC_CONFIG[name].parse(value)
                     for name, value in self.image.topic_configs(topic).items()}
        return self.config.log_config(overrides)

    def _host(self, topic: str, record: PartitionRecord) -> None:
        key = (topic, record.partition)
        existing = self.partitions.get(key)
        if existing is not None:
            existing.record = record
            return
        partition_log = self.logs.create(topic, record.partition, record.topic_id,
                                         self.log_config_for(topic))
        self.partitions[key] = Partition(topic, record.partition, record, partition_log)

    def _remove_topic(self, record: RemoveTopicRecord) -> None:
        for key, partition in list(self.partitions.items()):
            if partition.record.topic_id == record.topic_id:
                del self.partitions[key]
                self.logs.delete(*key)
                self._wake(key)

    def _reconfigure(self, topic: str) -> None:
        if topic in self.image.topics:
            self.logs.update_config(topic, self.log_config_for(topic))

    # --- leadership ---------------------------------------------------------------------

    def leader(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             "This server does not host this topic-partition.")
        if partition.record.leader != self.node_id:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             "This server is not the leader for that topic-partition.")
        return partition

    # --- produce ------------------------------------------------------------------------

    async def append(self, entries: Sequence[tuple[str, int, bytes | None]], *, acks: int,
                     produce_version: int) -> list[ProduceResult]:
        """Validate and append one produce request's partitions. Small requests append on
        the event loop (a page-cache write of a few KiB costs less than the hand-off to a
        thread and back); larger ones go to the I/O pool so the loop keeps serving."""
        if self._inline(entries):
            results = self._append_all(entries, acks, produce_version, inline=True)
        else:
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self.executor, self._append_all, entries,
                                                 acks, produce_version)
        for (topic, index, _), result in zip(entries, results, strict=True):
            if result.error is ErrorCode.none:
                self._wake((topic, index))
        return results

    def _inline(self, entries: Sequence[tuple[str, int, bytes | None]]) -> bool:
        """Small enough, and no partition forces an fsync per append (flush.messages,
        flush.ms): then the append never waits for the disk, only for the page cache."""
        if sum(len(records) for _, _, records in entries if records) > INLINE_APPEND_BYTES:
            return False
        for topic, index, _ in entries:
            partition = self.partitions.get((topic, index))
            if partition is not None:
                config = partition.log.config
                if config.flush_messages != LONG_MAX or config.flush_ms != LONG_MAX:
                    return False
        return True

    def _append_all(self, entries: Sequence[tuple[str, int, bytes | None]], acks: int,
                    produce_version: int, inline: bool = False) -> list[ProduceResult]:
        return [self._append_one(topic, index, records, acks, produce_version, inline)
                for topic, index, records in entries]

    def _append_one(self, topic: str, index: int, records: bytes | None, acks: int,
                    produce_version: int, inline: bool = False) -> ProduceResult:
        try:
            if topic in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.invalid_topic_exception,
                                 f"Cannot append to internal topic {topic}")
            partition = self.leader(topic, index)
            partition_log = partition.log
            config = partition_log.config
            if acks == -1 and config.min_insync_replicas > 1:
                # One node: the ISR is this node alone.
                raise KafkaError(ErrorCode.not_enough_replicas,
                                 f"The size of the current ISR {{{self.node_id}}} is "
                                 f"insufficient to satisfy the min.isr requirement of "
                                 f"{config.min_insync_replicas} for partition {topic}-{index}")
            if not records:
                raise KafkaError(ErrorCode.corrupt_message, "Produce request with no records")
            now = int(time.time() * 1000)
            buf = bytearray(records)
            batches = validate_records(buf, config, now_ms=now,
                                       produce_version=produce_version)
            if any(batch.is_transactional for batch in batches):
                raise KafkaError(ErrorCode.invalid_txn_state,
                                 "Transactional produce is not supported yet")
            info: AppendInfo = partition_log.append_as_leader(
                buf, batches, leader_epoch=partition.leader_epoch,
                log_append_time_ms=now if config.log_append_time else None,
                background=self.executor.submit if inline else None)
            partition_log.high_watermark = partition_log.log_end_offset
            return ProduceResult(base_offset=info.first_offset,
                                 log_append_time=info.log_append_time_ms,
                                 log_start_offset=info.log_start_offset)
        except RecordValidationError as exc:
            log.info("Produce to %s-%d rejected: %s %s", topic, index, exc.code.name,
                     exc.message or "")
            return ProduceResult(error=exc.code, message=exc.message,
                                 record_errors=exc.record_errors)
        except KafkaError as exc:
            if exc.code not in (ErrorCode.unknown_topic_or_partition,
                                ErrorCode.not_leader_or_follower):
                log.info("Produce to %s-%d rejected: %s %s", topic, index, exc.code.name,
                         exc.message or "")
            return ProduceResult(error=exc.code, message=exc.message)
        except OSError as exc:
            log.error("Write to %s-%d failed: %s", topic, index, exc)
            return ProduceResult(error=ErrorCode.kafka_storage_error, message=str(exc))

    # --- waiting for data ---------------------------------------------------------------

    def _wake(self, key: TopicPartition) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_data(self, keys: Sequence[TopicPartition], timeout_s: float) -> None:
        """Return when any of `keys` gets new data, or after `timeout_s`."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters[key].add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(waiter)
                    if not waiting:
                        del self._waiters[key]

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)
