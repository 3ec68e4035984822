"""Appends to led partitions for produce requests, and the acks=all wait (Kafka's
appendRecordsToLeader and DelayedProduce). Mixed into ReplicaManager, which provides the
partitions, the I/O pool, the purgatory and the high watermark rule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from moldau.broker.log.log import AppendInfo
from moldau.broker.log.producer_state import VerificationGuard
from moldau.broker.log.validation import RecordValidationError, validate_records
from moldau.broker.metadata.controller import INTERNAL_TOPICS
from moldau.broker.replication.partition import Partition
from moldau.broker.replication.purgatory import ProducePurgatory
from moldau.config import LONG_MAX
from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import parse_header
from moldau.records.control import ControlType, EndTxnMarker, build_end_txn_marker

log = logging.getLogger("moldau.broker.replication")

TopicPartition = tuple[str, int]
Entries = Sequence[tuple[str, int, bytes | None]]  # (topic, partition, record batches)
Guards = dict[TopicPartition, VerificationGuard]  # transaction verifications done

# Produce requests up to this size are appended on the event loop thread.
INLINE_APPEND_BYTES = 16384


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    last_offset: int = -1


def _isr_text(isr: Sequence[int]) -> str:
    return "{" + ", ".join(str(replica) for replica in isr) + "}"


def _check_min_isr(partition: Partition) -> None:
    """Kafka refuses an acks=all append up front when the ISR is below min.insync.replicas."""
    isr, needed = partition.isr, partition.log.config.min_insync_replicas
    if len(isr) < needed:
        raise KafkaError(ErrorCode.not_enough_replicas,
                         f"The size of the current ISR {_isr_text(isr)} is insufficient to "
                         f"satisfy the min.isr requirement of {needed} for partition "
                         f"{partition.topic}-{partition.index}")


class LeaderAppends:
    # Provided by ReplicaManager.
    partitions: dict[TopicPartition, Partition]
    executor: ThreadPoolExecutor
    standalone: bool
    purgatory: ProducePurgatory

    def leader(self, topic: str, index: int) -> Partition:
        raise NotImplementedError

    def _maybe_advance_high_watermark(self, partition: Partition) -> None:
        raise NotImplementedError

    def _wake(self, key: TopicPartition) -> None:
        raise NotImplementedError

    def verification_guard(self, topic: str, index: int, producer_id: int,
                           epoch: int) -> VerificationGuard | None:
        """The guard of a transaction verification for the producer on a led partition;
        None when its transaction is ongoing there, or this node does not lead it (the
        append then fails on its own)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return None
        return partition.log.verification_guard(producer_id, epoch)

    async def append(self, entries: Entries, *, acks: int, produce_version: int,
                     timeout_ms: int = 30000, internal_topics_allowed: bool = False,
                     wait: bool = True, verified: Guards | None = None
                     ) -> list[ProduceResult]:
        """Validate and append one produce request's partitions; with acks=-1 and `wait`,
        also wait until the in-sync replicas have the records (or `timeout_ms` passes). The
        produce handler passes wait=False and waits in a Deferred instead (see
        `replication_pending` and `wait_for_replication`).

        Small requests append on the event loop (a page-cache write of a few KiB costs less
        than the hand-off to a thread and back); larger ones go to the I/O pool so the loop
        keeps serving. `internal_topics_allowed` is for the group coordinator's writes.
        `verified` (transaction verification on): the guards obtained per partition; a
        transactional batch that starts a transaction on a partition without its producer's
        current guard is refused with INVALID_TXN_STATE.
        """
        if self._inline(entries):
            results = self._append_all(entries, acks, produce_version,
                                       internal_topics_allowed, True, verified)
        else:
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self.executor, self._append_all, entries,
                                                 acks, produce_version,
                                                 internal_topics_allowed, False, verified)
        for (topic, index, _), result in zip(entries, results, strict=True):
            if result.error is ErrorCode.none:
                key = (topic, index)
                partition = self.partitions.get(key)
                if partition is not None:
                    self._maybe_advance_high_watermark(partition)
                self._wake(key)  # followers fetch beyond the high watermark
        if acks == -1 and wait:
            await self.wait_for_replication(entries, results, timeout_ms)
        return results

    def _inline(self, entries: Entries) -> bool:
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

    def _append_all(self, entries: Entries, acks: int, produce_version: int,
                    internal: bool = False, inline: bool = False,
                    verified: Guards | None = None) -> list[ProduceResult]:
        return [self._append_one(topic, index, records, acks, produce_version, internal,
                                 inline, verified)
                for topic, index, records in entries]

    def _append_one(self, topic: str, index: int, records: bytes | None, acks: int,
                    produce_version: int, internal: bool = False,
                    inline: bool = False, verified: Guards | None = None) -> ProduceResult:
        def write() -> ProduceResult:
            if topic in INTERNAL_TOPICS and not internal:
                raise KafkaError(ErrorCode.invalid_topic_exception,
                                 f"Cannot append to internal topic {topic}")
            partition = self.leader(topic, index)
            partition_log = partition.log
            config = partition_log.config
            if acks == -1:
                _check_min_isr(partition)
            if not records:
                raise KafkaError(ErrorCode.corrupt_message, "Produce request with no records")
            now = int(time.time() * 1000)
            buf = bytearray(records)
            batches = validate_records(buf, config, now_ms=now,
                                       produce_version=produce_version, sequenced=not internal)
            info: AppendInfo = partition_log.append_as_leader(
                buf, batches, leader_epoch=partition.leader_epoch,
                log_append_time_ms=now if config.log_append_time else None,
                background=self.executor.submit if inline else None,
                verify_txn=verified is not None,
                guard=None if verified is None else verified.get((topic, index)))
            if self.standalone:
                partition_log.high_watermark = partition_log.log_end_offset
            return ProduceResult(base_offset=info.first_offset,
                                 log_append_time=info.log_append_time_ms,
                                 log_start_offset=info.log_start_offset,
                                 last_offset=info.last_offset)

        return self._guarded(topic, index, write)

    def append_txn_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int, commit: bool) -> ProduceResult:
        """Write a COMMIT/ABORT marker ending `producer_id`'s transaction on a led partition
        (Kafka's appendRecords from the WriteTxnMarkers handler). The caller waits for the
        high watermark to pass it, as for acks=all."""
        def write() -> ProduceResult:
            partition = self.leader(topic, index)
            _check_min_isr(partition)  # markers are written with acks=all
            plog = partition.log
            now = int(time.time() * 1000)
            buf = bytearray(build_end_txn_marker(producer_id, producer_epoch,
                                                 coordinator_epoch, commit=commit,
                                                 timestamp_ms=now))
            info = plog.append_as_leader(
                buf, [parse_header(buf)], leader_epoch=partition.leader_epoch,
                log_append_time_ms=now if plog.config.log_append_time else None,
                marker=EndTxnMarker(ControlType.COMMIT if commit else ControlType.ABORT,
                                    coordinator_epoch))
            if self.standalone:
                plog.high_watermark = plog.log_end_offset
            return ProduceResult(base_offset=info.first_offset, last_offset=info.last_offset,
                                 log_start_offset=info.log_start_offset)

        result = self._guarded(topic, index, write)
        if result.error is ErrorCode.none:
            partition = self.partitions.get((topic, index))
            if partition is not None:
                self._maybe_advance_high_watermark(partition)
            self._wake((topic, index))
        return result

    @staticmethod
    def _guarded(topic: str, index: int, write: Callable[[], ProduceResult]) -> ProduceResult:
        """Run one partition's write, turning its failure into the result's error."""
        try:
            return write()
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

    # --- acks=all -------------------------------------------------------------------------

    def _produce_outcome(self, key: TopicPartition, required_offset: int) -> ErrorCode | None:
        """Kafka's DelayedProduce check: done once the high watermark reaches the offset
        after the appended records; the ISR is checked against min.insync.replicas then."""
        partition = self.partitions.get(key)
        if partition is None or not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        if partition.log.high_watermark < required_offset:
            return None
        if len(partition.isr) < partition.log.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def replication_pending(self, entries: Entries,
                            results: Sequence[ProduceResult]) -> bool:
        """Whether an acks=all answer must wait for followers (never on a single node)."""
        return any(result.error is ErrorCode.none
                   and self._produce_outcome((topic, index), result.last_offset + 1) is None
                   for (topic, index, _), result in zip(entries, results, strict=True))

    async def wait_for_replication(self, entries: Entries,
                                   results: list[ProduceResult], timeout_ms: int) -> None:
        """Wait until every appended partition's high watermark passes its records, or the
        timeout; then set each result's error as Kafka answers acks=all. Does not suspend
        when nothing has to wait."""
        watched: list[tuple[TopicPartition, ProduceResult, asyncio.Future[ErrorCode]]] = []
        for (topic, index, _), result in zip(entries, results, strict=True):
            if result.error is not ErrorCode.none:
                continue
            key = (topic, index)
            required = result.last_offset + 1
            outcome = self._produce_outcome(key, required)
            if outcome is None:
                watched.append((key, result, self.purgatory.watch(key, required)))
            else:
                self._settle(key, result, outcome)
        if not watched:
            return
        await asyncio.wait([future for _, _, future in watched],
                           timeout=max(timeout_ms, 0) / 1000)
        for key, result, future in watched:
            if future.done():
                self._settle(key, result, future.result())
            else:
                self.purgatory.forget(key, future)
                future.cancel()
                self._settle(key, result, ErrorCode.request_timed_out)

    def _settle(self, key: TopicPartition, result: ProduceResult, code: ErrorCode) -> None:
        if code is ErrorCode.none:
            return
        result.error = code
        if code is ErrorCode.not_enough_replicas_after_append:
            partition = self.partitions.get(key)
            isr = partition.isr if partition is not None else ()
            result.message = (f"The size of the current ISR {_isr_text(isr)} is insufficient "
                              f"to satisfy the min.isr requirement for partition "
                              f"{key[0]}-{key[1]}; the records were appended to the leader")
