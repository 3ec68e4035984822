"""The partitions this broker hosts, kept in step with the metadata image (Kafka's
ReplicaManager).

Each PartitionRecord naming this node makes it the partition's leader or a follower. A leader
appends produce data (appends.py), tracks what each follower has fetched, moves the high
watermark and asks the controller (AlterPartition) to grow or shrink the ISR; acks=all
produce requests wait in a purgatory until the high watermark passes their records. A
follower fetches from its leader (fetcher.py). Without an `alter_partition` coroutine the
broker runs alone: every partition's leader and only in-sync replica is this node and the
high watermark follows the log end, as before replication existed.

Everything here runs on the event loop, except appends handed to the I/O pool and
`sync_with_image` at start-up (before any request is served or task started).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from moldau.broker.config import BrokerConfig
from moldau.broker.log.config import LogConfig
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
)
from moldau.broker.replication.appends import LeaderAppends, ProduceResult
from moldau.broker.replication.checkpoint import read_high_watermarks, write_high_watermarks
from moldau.broker.replication.fetcher import FetchSettings
from moldau.broker.replication.fetcher_manager import FetcherManager
from moldau.broker.replication.isr import AlterPartition, IsrChanger, Outcome, Proposal
from moldau.broker.replication.partition import Partition
from moldau.broker.replication.purgatory import ProducePurgatory
from moldau.broker.replication.quota import ReplicationQuota
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.replication")

__all__ = ["LeadershipListener", "Partition", "ProduceResult", "ReplicaManager"]

TopicPartition = tuple[str, int]
T = TypeVar("T")
# (topic, partition, is_leader, leader_epoch), on every change of role or leader epoch.
LeadershipListener = Callable[[str, int, bool, int], None]

# A batch bringing at most this many new logs creates them at once (a few ms of fsyncs), so
# that a partition is ready to write once the metadata names its leader. Larger batches (a
# topic with hundreds of partitions) create theirs a slice at a time, letting requests in
# between; in a thread instead, each of a log's many syscalls would wait for the GIL behind a
# busy loop (a convoy that made 1,000 logs take 6 s rather than 1.3 s).
INLINE_NEW_LOGS = 8
NEW_LOGS_SLICE_S = 0.02

# AlterPartition errors after which the controller's view will reach us as metadata; until
# then the proposal stays pending (as Kafka does), so the controller is not asked again.
WAIT_FOR_METADATA = frozenset({ErrorCode.fenced_leader_epoch,
                               ErrorCode.invalid_update_version,
                               ErrorCode.not_leader_or_follower})


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaManager(LeaderAppends):
    def __init__(self, node_id: int, config: BrokerConfig, logs: LogManager,
                 image: MetadataImage, io_threads: int,
                 alter_partition: AlterPartition | None = None, *,
                 clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.node_id = node_id
        self.config = config
        self.logs = logs
        self.image = image
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters: defaultdict[TopicPartition, set[asyncio.Future[None]]] = \
            defaultdict(set)
        self.executor = ThreadPoolExecutor(io_threads, thread_name_prefix="io")
        self.standalone = alter_partition is None
        self._isr = (IsrChanger(alter_partition, self._on_alter_outcome)
                     if alter_partition is not None else None)
        self._clock_ms = clock_ms
        self.lag_max_ms: int = config["replica.lag.time.max.ms"]
        self.fetch_settings = FetchSettings.from_config(config)
        # Read the rate from the config at each check: dynamic changes apply at once.
        self.leader_quota = self._quota("leader.replication.throttled.rate")
        self.follower_quota = self._quota("follower.replication.throttled.rate")
        self.fetchers = FetcherManager(self, self.fetch_settings)
        self.purgatory = ProducePurgatory(self._produce_outcome)
        self._listeners: list[LeadershipListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._checkpointed: dict[TopicPartition, int] = {}
        # Metadata batches waiting for new logs, and the task creating them (see on_metadata).
        self._backlog: deque[Sequence[MetadataRecord]] = deque()
        self._backlog_task: asyncio.Task[None] | None = None

    def _quota(self, rate_key: str) -> ReplicationQuota:
        config = self.config
        return ReplicationQuota(lambda: config[rate_key],
                                config["replication.quota.window.num"],
                                config["replication.quota.window.size.seconds"])

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start fetching for followed partitions and, with replication, the ISR shrink
        and high watermark checkpoint tasks."""
        await self.fetchers.start()
        if not self.standalone:
            self._tasks = [
                asyncio.create_task(self._shrink_loop(), name="isr-shrink"),
                asyncio.create_task(self._checkpoint_loop(), name="high-watermark-checkpoint")]

    async def stop(self) -> None:
        """Stop fetching and ISR changes, then save the high watermarks (before the logs
        close; the I/O pool is shut down later by `shutdown`)."""
        self._backlog.clear()
        if self._backlog_task is not None:
            self._tasks.append(self._backlog_task)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.fetchers.stop()
        if self._isr is not None:
            await self._isr.stop()
        self.purgatory.fail_all(ErrorCode.not_leader_or_follower)
        if not self.standalone:
            try:
                await self.run_io(write_high_watermarks, self._high_watermarks_by_dir())
            except OSError as exc:
                log.error("Could not write the high watermark checkpoint: %s", exc)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)

    def add_leadership_listener(self, callback: LeadershipListener) -> None:
        """`callback(topic, partition, is_leader, leader_epoch)` on every change of this
        node's role or leader epoch for a partition, and when a hosted partition goes
        (is_leader False). Called after the change took effect: on the event loop, except
        for changes made by `sync_with_image` (on its thread), so register after it."""
        self._listeners.append(callback)

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor,
                                                                partial(fn, *args))

    # --- keeping up with metadata ----------------------------------------------------------

    def sync_with_image(self) -> None:
        """At start-up: host what the image says, remove logs of partitions not here."""
        if not self.standalone:
            self._checkpointed = read_high_watermarks(self.logs.log_dirs)
        wanted: set[TopicPartition] = set()
        # Copies: the server may apply records to the image on the loop meanwhile (it
        # replays them to on_metadata afterwards).
        for topic in list(self.image.topics.values()):
            for record in list(topic.partitions.values()):
                if self.node_id in record.replicas:
                    wanted.add((topic.name, record.partition))
                    self._apply_partition(topic.name, record)
        self._checkpointed = {}
        for stray_log in list(self.logs.all_logs()):
            key = (stray_log.topic, stray_log.partition)
            if key not in wanted:
                log.warning("Deleting log %s-%d: this broker no longer hosts it", *key)
                self.logs.delete(*key)

    def on_metadata(self, records: Sequence[MetadataRecord]) -> None:
        """Follow a committed metadata batch.

        A batch that makes this node a replica of more than INLINE_NEW_LOGS new partitions
        takes effect once their logs exist; they are created in slices of the loop's time
        meanwhile, so requests keep being served (Kafka too creates logs away from its
        request threads). Later batches queue behind it, so batches always take effect in
        order. Until then the partitions are not hosted here and requests for them get
        NOT_LEADER_OR_FOLLOWER, which clients retry.
        """
        if not self._backlog and len(self._new_replicas(records)) <= INLINE_NEW_LOGS:
            self._apply(records)
            return
        self._backlog.append(records)
        if self._backlog_task is None or self._backlog_task.done():
            self._backlog_task = asyncio.create_task(self._drain_backlog(),
                                                     name="metadata-new-logs")

    async def metadata_applied(self) -> None:
        """Wait until every batch given to `on_metadata` so far has taken effect."""
        while self._backlog and self._backlog_task is not None:
            await asyncio.shield(self._backlog_task)

    async def _drain_backlog(self) -> None:
        while self._backlog:
            records = self._backlog[0]
            slice_end = time.monotonic() + NEW_LOGS_SLICE_S
            for topic, record in self._new_replicas(records):
                self._create_log(topic, record, self.log_config_for(topic))
                if time.monotonic() >= slice_end:
                    await asyncio.sleep(0)  # requests that arrived meanwhile go first
                    slice_end = time.monotonic() + NEW_LOGS_SLICE_S
            if self._backlog and self._backlog[0] is records:  # not cleared by stop()
                self._backlog.popleft()
                self._apply(records)

    def _new_replicas(self, records: Sequence[MetadataRecord]
                      ) -> list[tuple[str, PartitionRecord]]:
        """The partitions of the batch this node is to host but does not yet, each with its
        first record there."""
        found: dict[TopicPartition, tuple[str, PartitionRecord]] = {}
        for record in records:
            if isinstance(record, PartitionRecord) and self.node_id in record.replicas:
                topic = self.image.topics_by_id.get(record.topic_id)
                if topic is not None and (topic.name, record.partition) not in self.partitions:
                    found.setdefault((topic.name, record.partition), (topic.name, record))
        return list(found.values())

    def _create_log(self, topic: str, record: PartitionRecord, config: LogConfig) -> None:
        """The log `_host` will find, with the leader epoch the first record gives it when
        it makes this node the leader (the checkpoint write is the rest of the cost)."""
        try:
            plog = self.logs.create(topic, record.partition, record.topic_id, config)
            if record.leader == self.node_id:
                plog.assign_leader_epoch(record.leader_epoch)
        except Exception:  # _host tries again and reports the failure where it matters
            log.exception("Creating the log of %s-%d failed", topic, record.partition)

    def _apply(self, records: Sequence[MetadataRecord]) -> None:
        for record in records:
            try:
                self._apply_record(record)
            except Exception:
                log.exception("Applying %s failed", record)

    def _apply_record(self, record: MetadataRecord) -> None:
        match record:
            case PartitionRecord():
                self._on_partition_record(record)
            case RemoveTopicRecord():
                self._remove_topic(record)
            case ConfigRecord(resource_type=kind, resource_name=name) \
                    if kind == TOPIC_RESOURCE:
                self._reconfigure(name)
            case RegisterBrokerRecord(broker_id=broker_id):
                # A leader that registered again may listen elsewhere now.
                self.fetchers.broker_changed(broker_id)

    def log_config_for(self, topic: str) -> LogConfig:
        return self.config.topic_log_config(self.image.topic_configs(topic))

    def _on_partition_record(self, record: PartitionRecord) -> None:
        topic = self.image.topics_by_id.get(record.topic_id)
        if topic is not None:
            self._apply_partition(topic.name, record)
            return
        # The topic went in the same batch: RemoveTopicRecord does the rest.

    def _apply_partition(self, topic: str, record: PartitionRecord) -> None:
        key = (topic, record.partition)
        partition = self.partitions.get(key)
        if self.node_id not in record.replicas:
            if partition is not None:
                log.info("%s-%d: no longer a replica here (replicas %s); deleting the log",
                         topic, record.partition, list(record.replicas))
                self._drop(partition, ErrorCode.not_leader_or_follower, delete_log=True)
            return
        fresh = partition is None
        if partition is None:
            partition = self._host(topic, record)
        elif (record.leader_epoch < partition.leader_epoch
              or (record.leader_epoch == partition.leader_epoch
                  and record.partition_epoch < partition.partition_epoch)):
            log.debug("%s-%d: ignoring stale partition record %s", topic, record.partition,
                      record)
            return
        if record.leader == self.node_id:
            self._become_leader(partition, record, fresh)
        else:
            self._become_follower(partition, record, fresh)

    def _host(self, topic: str, record: PartitionRecord) -> Partition:
        key = (topic, record.partition)
        partition_log = self.logs.create(topic, record.partition, record.topic_id,
                                         self.log_config_for(topic))
        if not self.standalone:
            # A restarted replica knows records up to its checkpointed high watermark were
            # committed; beyond it, only the leader can tell.
            partition_log.high_watermark = self._checkpointed.get(
                key, partition_log.log_start_offset)
        partition = Partition(topic, record.partition, record, partition_log,
                              local_id=self.node_id)
        self.partitions[key] = partition
        return partition

    def _become_leader(self, partition: Partition, record: PartitionRecord,
                       fresh: bool) -> None:
        was_leader = partition.is_leader
        previous = partition.record
        partition.record = record
        if fresh or not was_leader or record.leader_epoch > previous.leader_epoch:
            partition.fetch_generation += 1  # abandons writes of a fetcher still running
            self.fetchers.remove(partition.key)
            partition.is_leader = True
            partition.pending_isr = None
            partition.leader_epoch_start_offset = \
                partition.log.assign_leader_epoch(record.leader_epoch)
            partition.reset_followers(self._clock_ms(), new_leader=not was_leader)
            if not self.standalone:
                log.info("%s-%d: leader in epoch %d from offset %d (ISR %s, high watermark "
                         "%d)", partition.topic, partition.index, record.leader_epoch,
                         partition.leader_epoch_start_offset, list(record.isr),
                         partition.log.high_watermark)
            self._notify(partition, True)
        else:
            partition.sync_assignment()
            if record != previous:
                partition.pending_isr = None  # the committed state replaces any proposal
            if record.isr != previous.isr:
                log.info("%s-%d: ISR is now %s (partition epoch %d)", partition.topic,
                         partition.index, list(record.isr), record.partition_epoch)
        self._maybe_advance_high_watermark(partition)

    def _become_follower(self, partition: Partition, record: PartitionRecord,
                         fresh: bool) -> None:
        was_leader = partition.is_leader
        previous = partition.record
        partition.record = record
        if was_leader:
            partition.resign()
            self.purgatory.fail(partition.key, ErrorCode.not_leader_or_follower)
            self._wake(partition.key)
        if not (fresh or was_leader or record.leader != previous.leader
                or record.leader_epoch > previous.leader_epoch):
            return
        partition.fetch_generation += 1
        self.fetchers.remove(partition.key)
        if record.leader >= 0:
            self.fetchers.add(partition.key, record.topic_id, record.leader,
                              record.leader_epoch, partition.fetch_generation)
        log.info("%s-%d: follower of broker %d in epoch %d (log end %d, high watermark %d)",
                 partition.topic, partition.index, record.leader, record.leader_epoch,
                 partition.log.log_end_offset, partition.log.high_watermark)
        self._notify(partition, False)

    def _drop(self, partition: Partition, code: ErrorCode, *, delete_log: bool) -> None:
        key = partition.key
        partition.fetch_generation += 1
        self.fetchers.remove(key)
        partition.resign()
        del self.partitions[key]
        self.purgatory.fail(key, code)
        self._wake(key)
        if delete_log:
            self.logs.delete(*key)
        self._notify(partition, False)

    def _remove_topic(self, record: RemoveTopicRecord) -> None:
        for partition in list(self.partitions.values()):
            if partition.record.topic_id == record.topic_id:
                self._drop(partition, ErrorCode.unknown_topic_or_partition, delete_log=True)

    def _reconfigure(self, topic: str) -> None:
        if topic in self.image.topics:
            self.logs.update_config(topic, self.log_config_for(topic))

    def reconfigure_all(self) -> None:
        """After a change of the broker's defaults (dynamic broker configs): every topic's
        effective settings again."""
        self.logs.default_config = self.config.log_config({})
        for topic in list(self.image.topics):
            self._reconfigure(topic)

    def _notify(self, partition: Partition, is_leader: bool) -> None:
        for callback in self._listeners:
            try:
                callback(partition.topic, partition.index, is_leader, partition.leader_epoch)
            except Exception:
                log.exception("Leadership listener failed for %s-%d", partition.topic,
                              partition.index)

    # --- leadership ---------------------------------------------------------------------

    def leader(self, topic: str, index: int) -> Partition:
        partition = self.hosted(topic, index)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             "This server is not the leader for that topic-partition.")
        return partition

    def hosted(self, topic: str, index: int) -> Partition:
        """The partition's replica on this node, leader or follower."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            # As Kafka: a partition the metadata knows is led elsewhere, or not hosted here
            # yet (its log is being created).
            known = self.image.topics.get(topic)
            code = (ErrorCode.not_leader_or_follower
                    if known is not None and index in known.partitions
                    else ErrorCode.unknown_topic_or_partition)
            raise KafkaError(code, "This server does not host this topic-partition.")
        return partition

    # --- the leader's view of its followers ---------------------------------------------

    def record_follower_fetch(self, partition: Partition, replica_id: int, fetch_offset: int,
                              log_start_offset: int, leader_end_offset: int) -> None:
        """A follower fetched from `fetch_offset`: that is its log end now."""
        state = partition.followers.get(replica_id)
        if state is None:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"Replica {replica_id} is not in the replica set "
                             f"{list(partition.record.replicas)} of {partition.topic}-"
                             f"{partition.index}")
        state.on_fetch(fetch_offset, log_start_offset, self._clock_ms(), leader_end_offset)
        self._maybe_expand_isr(partition, replica_id)
        self._maybe_advance_high_watermark(partition)

    def _maybe_advance_high_watermark(self, partition: Partition) -> None:
        if self.standalone:
            plog = partition.log
            moved = partition.is_leader and plog.log_end_offset > plog.high_watermark
            if moved:
                plog.high_watermark = plog.log_end_offset
        else:
            moved = partition.maybe_increment_high_watermark()
        if moved:
            # Consumers may now read further; acks=all producers may be done.
            self._wake(partition.key)
            self.purgatory.check(partition.key)

    def _isr_eligible(self, replica: int) -> bool:
        """KIP-841: only registered, unfenced brokers not shutting down join the ISR."""
        broker = self.image.brokers.get(replica)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _maybe_expand_isr(self, partition: Partition, replica: int) -> None:
        if self._isr is None:
            return
        new_isr = partition.expansion_candidate(replica)
        if new_isr is not None and self._isr_eligible(replica):
            self._isr.submit(partition, new_isr)

    def maybe_shrink_isr(self) -> None:
        """Propose removing ISR followers not caught up for replica.lag.time.max.ms."""
        if self._isr is None:
            return
        now = self._clock_ms()
        for partition in list(self.partitions.values()):
            if (not partition.is_leader or partition.alter_in_flight
                    or partition.pending_isr is not None):
                continue
            lagging = partition.out_of_sync_replicas(now, self.lag_max_ms)
            if not lagging:
                continue
            ends = {r: partition.followers[r].log_end_offset
                    for r in lagging if r in partition.followers}
            log.info("%s-%d: replicas %s are out of sync (log ends %s, leader's %d); "
                     "shrinking the ISR", partition.topic, partition.index, lagging, ends,
                     partition.log.log_end_offset)
            self._isr.submit(partition, tuple(r for r in partition.isr if r not in lagging))

    def _on_alter_outcome(self, partition: Partition, proposal: Proposal,
                          outcome: Outcome) -> None:
        if self.partitions.get(partition.key) is not partition or \
                not proposal.still_current(partition):
            return  # the partition moved on; the metadata tells the rest
        if isinstance(outcome, KafkaError):
            if outcome.code in WAIT_FOR_METADATA:
                log.info("%s-%d: ISR change %s rejected (%s); waiting for metadata",
                         partition.topic, partition.index, list(proposal.isr),
                         outcome.code.name)
            else:
                log.info("%s-%d: ISR change %s failed (%s %s)", partition.topic,
                         partition.index, list(proposal.isr), outcome.code.name,
                         outcome.message or "")
                partition.pending_isr = None
            return
        record = outcome
        if (record.leader_epoch != partition.leader_epoch
                or record.partition_epoch < partition.partition_epoch):
            return
        partition.record = record
        partition.pending_isr = None
        partition.sync_assignment()
        log.info("%s-%d: ISR is now %s (partition epoch %d)", partition.topic,
                 partition.index, list(record.isr), record.partition_epoch)
        self._maybe_advance_high_watermark(partition)

    async def _shrink_loop(self) -> None:
        interval = max(self.lag_max_ms / 2, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.maybe_shrink_isr()
            except Exception:
                log.exception("ISR shrink check failed")

    # --- the follower's side (FollowerHost) -----------------------------------------------

    def follower(self, key: TopicPartition, generation: int) -> Partition | None:
        partition = self.partitions.get(key)
        if partition is None or partition.is_leader or \
                partition.fetch_generation != generation:
            return None
        return partition

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.image.brokers.get(broker_id)
        return broker.endpoint(self.fetch_settings.listener) if broker is not None else None

    # --- high watermark checkpoint ----------------------------------------------------------

    def _high_watermarks_by_dir(self) -> dict[str, dict[TopicPartition, int]]:
        by_dir: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.logs.log_dirs}
        for key, partition in self.partitions.items():
            log_dir = self.logs.log_dir_of(*key)
            if log_dir is not None and not partition.log.closed:
                by_dir.setdefault(log_dir, {})[key] = partition.log.high_watermark
        return by_dir

    async def _checkpoint_loop(self) -> None:
        interval = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_io(write_high_watermarks, self._high_watermarks_by_dir())
            except Exception:
                log.exception("Writing the high watermark checkpoint failed")

    # --- waiting for data ---------------------------------------------------------------

    def _wake(self, key: TopicPartition) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_data(self, keys: Sequence[TopicPartition], timeout_s: float) -> None:
        """Return when any of `keys` gets new data (or a higher high watermark), or after
        `timeout_s`."""
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
