"""All partition logs of the broker, spread over one or more log directories.

Each log directory holds:

    .lock                               flock'ed, with the holder's pid, while in use
    .kafka_cleanshutdown                present only after a clean shutdown
    recovery-point-offset-checkpoint    offsets below which each log is known to be flushed
    log-start-offset-checkpoint         each log's start offset (moved by DeleteRecords)
    cleaner-offset-checkpoint           offsets below which compacted logs are clean
    <topic>-<partition>/                one PartitionLog
    <topic>-<partition>.<hex>-delete/   a deleted partition awaiting removal
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from .checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    atomic_write,
    fsync_dir,
    read_offsets,
    write_offsets,
)
from .cleaner import CleanerConfig, LogCleaner
from .config import LogConfig
from .dir_lock import DirLocks
from .log import PartitionLog, parse_partition_dir, partition_dir_name
from .segment import DeletionScheduler

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
CHECKPOINT_INTERVAL_MS = 60000

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(self, log_dirs: list[str], *, default_config: LogConfig,
                 recovery_threads: int = 2, producer_id_expiration_ms: int = 86400000,
                 retention_check_interval_ms: int = 300000,
                 reserved_dirs: frozenset[str] = frozenset(),
                 cleaner_config: CleanerConfig | None = None,
                 dir_locks: DirLocks | None = None) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.recovery_threads = max(1, recovery_threads)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.reserved_dirs = reserved_dirs  # directory names in a log dir that are not ours
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._log_dir_of: dict[TopicPartition, str] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self._lock = threading.RLock()
        # The broker locks its directories before anything else touches them and passes
        # the locks in; a manager used on its own takes (and releases) its own.
        self._owns_locks = dir_locks is None
        self._dir_locks = dir_locks or DirLocks()
        self._scheduler = DeletionScheduler()
        # When retention and checkpoints last ran, on the monotonic clock (None: not yet).
        self._last_retention_at: float | None = None
        self._last_checkpoint_at: float | None = None
        # Compaction of cleanup.policy=compact logs, on its own threads (started by load()).
        self.cleaner = LogCleaner(self.all_logs, cleaner_config)

    # -- start-up ----------------------------------------------------------------------------

    def load(self, topic_configs: Mapping[str, LogConfig] | None = None) -> list[PartitionLog]:
        """Lock the log dirs and open every partition log in them (recovering after a crash).

        `topic_configs` gives per-topic settings known at start-up; others get the default.
        """
        if topic_configs:
            self._topic_configs.update(topic_configs)
        jobs: list[tuple[str, str, str, int, bool, int, int]] = []
        clean_dirs: list[str] = []
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            self._dir_locks.acquire(d)
            clean = os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
            if clean:
                clean_dirs.append(d)
            else:
                log.info("%s: no clean shutdown marker; unflushed log tails will be recovered",
                         d)
            recovery_points = self._read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    log.info("%s: removing partition directory left from a deletion", path)
                    self._remove_dir_later(path, 0)
                    continue
                if name in self.reserved_dirs:
                    continue  # owned by another part of the broker (the metadata log)
                tp = parse_partition_dir(name)
                if tp is None:
                    log.warning("%s: not a partition directory; ignored", path)
                    continue
                jobs.append((d, path, tp[0], tp[1], clean, recovery_points.get(tp, 0),
                             start_offsets.get(tp, 0)))
        started = time.monotonic()
        with ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="log-recovery") as ex:
            opened = list(ex.map(lambda job: (job, self._open_log(*job)), jobs))
        loaded: list[PartitionLog] = []
        with self._lock:
            for (d, _path, topic, partition, *_), plog in opened:
                tp = (topic, partition)
                if tp in self._logs:
                    raise RuntimeError(f"{topic}-{partition} exists in both "
                                       f"{self._log_dir_of[tp]} and {d}")
                self._logs[tp] = plog
                self._log_dir_of[tp] = d
                loaded.append(plog)
        # The marker goes once the logs are open, so that a crash from now on is noticed.
        for d in clean_dirs:
            os.remove(os.path.join(d, CLEAN_SHUTDOWN_FILE))
            fsync_dir(d)
        self.checkpoint()
        log.info("Loaded %d partition log(s) from %d log dir(s) in %.2fs", len(loaded),
                 len(self.log_dirs), time.monotonic() - started)
        self.cleaner.start()
        return loaded

    def _open_log(self, d: str, path: str, topic: str, partition: int, clean: bool,
                  recovery_point: int, log_start_offset: int) -> PartitionLog:
        try:
            plog = PartitionLog.open(
                path, topic, partition, self.config_for(topic), recovery_point=recovery_point,
                log_start_offset=log_start_offset, clean_shutdown=clean,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                scheduler=self._scheduler)
        except Exception:
            log.exception("%s: failed to load the partition log", path)
            raise
        plog.truncation_listener = self.cleaner.note_truncation
        return plog

    def _unlock_dirs(self) -> None:
        if self._owns_locks:
            self._dir_locks.release()

    @staticmethod
    def _read_checkpoint(d: str, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offsets(os.path.join(d, name))
        except CheckpointError as e:
            log.warning("%s; ignoring it (logs will be recovered in full)", e)
            return {}

    # -- lookup and lifecycle of partitions --------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def create(self, topic: str, partition: int, topic_id: uuid.UUID,
               config: LogConfig) -> PartitionLog:
        """The partition's log, created in the least loaded log dir if it does not exist."""
        with self._lock:
            tp = (topic, partition)
            self._topic_configs[topic] = config
            existing = self._logs.get(tp)
            if existing is not None:
                existing.set_topic_id(topic_id)
                existing.update_config(config)
                return existing
            counts = {d: 0 for d in self.log_dirs}
            for d in self._log_dir_of.values():
                counts[d] += 1
            d = min(self.log_dirs, key=lambda x: counts[x])
            os.makedirs(d, exist_ok=True)
            self._dir_locks.acquire(d)
            plog = PartitionLog.open(
                os.path.join(d, partition_dir_name(topic, partition)), topic, partition, config,
                recovery_point=0, log_start_offset=0, clean_shutdown=True,
                producer_id_expiration_ms=self.producer_id_expiration_ms, topic_id=topic_id,
                scheduler=self._scheduler)
            plog.truncation_listener = self.cleaner.note_truncation
            fsync_dir(d)
            self._logs[tp] = plog
            self._log_dir_of[tp] = d
            log.info("Created log %s in %s", plog.name, d)
            return plog

    def delete(self, topic: str, partition: int) -> bool:
        """Stop the log, rename its directory to `...-delete` and remove it in the background."""
        with self._lock:
            tp = (topic, partition)
            plog = self._logs.pop(tp, None)
            d = self._log_dir_of.pop(tp, None)
        if plog is None or d is None:
            return False
        target = os.path.join(d, f"{plog.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        plog.rename_for_deletion(target)
        fsync_dir(d)
        # After the log is closed, so a cleaning in flight cannot record it again.
        self.cleaner.forget(d, topic, partition)
        log.info("Deleted log %s (directory renamed to %s for removal)", plog.name,
                 os.path.basename(target))
        self._remove_dir_later(target, plog.config.file_delete_delay_ms)
        return True

    def _remove_dir_later(self, path: str, delay_ms: int) -> None:
        # At least 1 ms so that the removal always runs on the scheduler's thread.
        self._scheduler.schedule(max(delay_ms, 1),
                                 lambda: shutil.rmtree(path, ignore_errors=True))

    def update_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            self._topic_configs[topic] = config
            for (t, _), plog in self._logs.items():
                if t == topic:
                    plog.update_config(config)

    # -- periodic work -----------------------------------------------------------------------

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log and expire idle producers; returns segments deleted."""
        total = 0
        for plog in self.all_logs():
            try:
                n = plog.apply_retention(now_ms)
                plog.expire_producers(now_ms)
            except Exception:
                log.exception("%s: retention failed", plog.name)
                continue
            if n:
                log.info("%s: retention deleted %d segment(s); log start offset is now %d",
                         plog.name, n, plog.log_start_offset)
            total += n
        return total

    def flush_logs(self, now_ms: int) -> None:
        """Flush logs whose flush.ms interval has passed."""
        for plog in self.all_logs():
            try:
                plog.maybe_flush(now_ms)
            except Exception:
                log.exception("%s: flush failed", plog.name)

    def checkpoint(self) -> None:
        """Write recovery points (flushed offsets) and log start offsets of every log dir."""
        with self._lock:
            by_dir: dict[str, list[PartitionLog]] = {d: [] for d in self.log_dirs}
            for tp, plog in self._logs.items():
                by_dir[self._log_dir_of[tp]].append(plog)
        for d, logs in by_dir.items():
            if not os.path.isdir(d):
                continue
            write_offsets(os.path.join(d, RECOVERY_POINT_CHECKPOINT),
                          {(p.topic, p.partition): p.recovery_point for p in logs})
            write_offsets(os.path.join(d, LOG_START_OFFSET_CHECKPOINT),
                          {(p.topic, p.partition): p.log_start_offset for p in logs})

    def tick(self, now_ms: int | None = None, monotonic_ms: float | None = None) -> None:
        """One round of background work: retention, flush.ms, checkpoints, when due.

        Retention compares record timestamps with the wall clock (`now_ms`), as Kafka's does;
        when the work is due is measured on the monotonic clock, as Kafka's scheduler
        measures it, so a wall clock stepped back does not hold retention and checkpoints
        off until it has caught up again."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        at = time.monotonic() * 1000 if monotonic_ms is None else monotonic_ms
        if self._last_retention_at is None or \
                at - self._last_retention_at >= self.retention_check_interval_ms:
            self.run_retention(now_ms)
            self._last_retention_at = at
        self.flush_logs(now_ms)
        if self._last_checkpoint_at is None or \
                at - self._last_checkpoint_at >= CHECKPOINT_INTERVAL_MS:
            self.checkpoint()
            self._last_checkpoint_at = at

    # -- shutdown ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean shutdown markers."""
        failed_dirs: set[str] = set()
        self.cleaner.shutdown()  # before the logs close under it
        with self._lock:
            items = list(self._logs.items())
        for tp, plog in items:
            try:
                plog.close()
            except Exception:
                log.exception("%s: close failed; its log dir will be recovered at start-up",
                              plog.name)
                failed_dirs.add(self._log_dir_of[tp])
        self._scheduler.run_pending()
        self.checkpoint()
        for d in self.log_dirs:
            if d in self._dir_locks.held() and d not in failed_dirs:
                atomic_write(os.path.join(d, CLEAN_SHUTDOWN_FILE), b"")
        self._unlock_dirs()
        log.info("Log manager shut down (%d log(s) closed)", len(items))

    # -- introspection -----------------------------------------------------------------------

    def describe_dirs(self) -> list[tuple[str, list[tuple[str, int, int, int]]]]:
        """Per log dir: (topic, partition, size in bytes, offset lag = 0) of each log."""
        with self._lock:
            out: dict[str, list[tuple[str, int, int, int]]] = {d: [] for d in self.log_dirs}
            for tp, plog in sorted(self._logs.items()):
                out[self._log_dir_of[tp]].append((tp[0], tp[1], plog.size_in_bytes, 0))
        return list(out.items())

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._log_dir_of.get((topic, partition))
