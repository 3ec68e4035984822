"""Follower side of replication (Kafka's ReplicaFetcherThread): one task per source broker
fetches the partitions this node follows from it and appends what it gets.

A partition starts (again) in the truncating state whenever it starts following a leader:
the fetcher asks the leader where the follower's latest epoch ends (OffsetForLeaderEpoch,
KIP-101/279) and cuts the log there, so a tail written under an older leader that the new
leader does not have is removed; only then does it fetch from its log end. Fetches carry
the last fetched epoch (Fetch v12), and a diverging epoch in a response truncates the same
way. Writes go to the I/O pool and are guarded: if the partition changed role meanwhile,
the write is abandoned under the log lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from moldau.broker.config import BrokerConfig
from moldau.broker.replication import truncation
from moldau.broker.replication.partition import Partition
from moldau.broker.replication.quota import ReplicationQuota, is_throttled
from moldau.broker.security.outgoing import inter_broker_security
from moldau.client.connection import BrokerConnection
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import request_class
from moldau.records.batch import BatchHeader, compute_crc
from moldau.records.codec import iter_batches

log = logging.getLogger("moldau.broker.replication.fetcher")

FETCH_KEY = 1
FETCH_VERSION = 12  # topic names and last_fetched_epoch / diverging_epoch
OFFSET_FOR_LEADER_EPOCH_KEY = 23
OFFSET_FOR_LEADER_EPOCH_VERSION = 4

T = TypeVar("T")
TopicPartition = tuple[str, int]


class FetchSettings(NamedTuple):
    node_id: int
    listener: str
    max_wait_ms: int
    min_bytes: int
    partition_max_bytes: int
    response_max_bytes: int
    backoff_ms: int
    socket_timeout_ms: int
    num_fetchers: int
    security: ClientSecurity = ClientSecurity()  # of the inter-broker listener

    @classmethod
    def from_config(cls, config: BrokerConfig) -> FetchSettings:
        return cls(config.node_id, config.inter_broker_listener,
                   config["replica.fetch.wait.max.ms"], config["replica.fetch.min.bytes"],
                   config["replica.fetch.max.bytes"],
                   config["replica.fetch.response.max.bytes"],
                   config["replica.fetch.backoff.ms"], config["replica.socket.timeout.ms"],
                   config["num.replica.fetchers"], inter_broker_security(config))


class FollowerHost(Protocol):
    """What a fetcher needs from the replica manager."""

    def follower(self, key: TopicPartition, generation: int) -> Partition | None:
        """The partition if this node still follows it in that fetch generation."""

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None: ...

    @property
    def follower_quota(self) -> ReplicationQuota: ...

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T: ...


@dataclass(eq=False)
class FetchState:
    topic: str
    partition: int
    topic_id: uuid.UUID
    leader_epoch: int
    generation: int
    truncating: bool = True
    delayed_until: float = 0.0  # time.monotonic()
    fenced: bool = False  # our leader epoch is stale: wait for new metadata
    # Off once the leader could not place our last epoch, so we do not loop on it.
    send_last_fetched_epoch: bool = True
    # Caught up with the leader's high watermark at the last fetch: never throttled.
    in_sync: bool = False

    @property
    def key(self) -> TopicPartition:
        return self.topic, self.partition

    def guard(self, partition: Partition) -> Callable[[], bool]:
        generation = self.generation
        return lambda: partition.fetch_generation == generation and not partition.is_leader


class ReplicaFetcher:
    """Fetches from one leader broker (one of num.replica.fetchers per broker)."""

    def __init__(self, host: FollowerHost, settings: FetchSettings, leader_id: int,
                 fetcher_id: int) -> None:
        self.host = host
        self.settings = settings
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._changed = asyncio.Event()
        self._connection: BrokerConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._backoff_s = settings.backoff_ms / 1000
        self._unreachable = False

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, id={self.fetcher_id})"

    # --- membership ---------------------------------------------------------------------

    def add(self, state: FetchState) -> None:
        self.partitions[state.key] = state
        self._changed.set()

    def remove(self, key: TopicPartition) -> None:
        self.partitions.pop(key, None)

    def reconnect(self) -> None:
        """The leader registered again (maybe elsewhere): connect afresh."""
        self._close()
        self._changed.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}-{self.fetcher_id}")

    def cancel(self) -> asyncio.Task[None] | None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._close()
        return task

    # --- the loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:  # disconnected, timed out, protocol error
                log.info("%r: %s; retrying in %d ms", self, exc, self.settings.backoff_ms)
                self._close()
                await asyncio.sleep(self._backoff_s)
            except Exception:
                log.exception("%r: fetch round failed", self)
                self._close()
                await asyncio.sleep(self._backoff_s)

    async def _round(self) -> None:
        self._changed.clear()
        now = time.monotonic()
        ready = [s for s in self.partitions.values()
                 if not s.fenced and s.delayed_until <= now]
        if not ready:
            delays = [s.delayed_until - now for s in self.partitions.values() if not s.fenced]
            await self._wait_for_change(min(delays) if delays else None)
            return
        connection = await self._connect()
        if connection is None:
            await self._wait_for_change(self._backoff_s)
            return
        truncating = [s for s in ready if s.truncating]
        if truncating:
            await self._truncate(connection, truncating)
        else:
            await self._fetch(connection, ready)

    async def _wait_for_change(self, timeout: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def _connect(self) -> BrokerConnection | None:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        endpoint = self.host.leader_endpoint(self.leader_id)
        if endpoint is None:
            log.debug("%r: no endpoint known for broker %d", self, self.leader_id)
            return None
        host, port = endpoint
        connection = BrokerConnection(
            self.leader_id, host, port, max_in_flight=1,
            client_id=f"broker-{self.settings.node_id}-fetcher-{self.fetcher_id}",
            request_timeout_ms=self.settings.socket_timeout_ms, security=self.settings.security)
        try:
            await asyncio.wait_for(connection.open(), self.settings.socket_timeout_ms / 1000)
        except (OSError, TimeoutError, KafkaError) as exc:
            # Once per outage: a dead leader is retried every back-off until metadata moves.
            log.log(logging.DEBUG if self._unreachable else logging.INFO,
                    "%r: cannot connect to %s:%d: %s", self, host, port, exc)
            self._unreachable = True
            connection.close()
            return None
        if self._unreachable:
            log.info("%r: connected to %s:%d", self, host, port)
            self._unreachable = False
        self._connection = connection
        return connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _current(self, state: FetchState) -> Partition | None:
        if self.partitions.get(state.key) is not state:
            return None
        return self.host.follower(state.key, state.generation)

    def _delay(self, state: FetchState, reason: str) -> None:
        log.info("%s-%d: fetching from broker %d failed (%s); retrying in %d ms",
                 state.topic, state.partition, self.leader_id, reason, self.settings.backoff_ms)
        state.delayed_until = time.monotonic() + self._backoff_s

    def _partition_error(self, state: FetchState, code: ErrorCode) -> None:
        if code is ErrorCode.fenced_leader_epoch:
            # Our metadata is behind the leader's: new metadata will restart this partition.
            log.info("%s-%d: leader epoch %d is fenced by broker %d; waiting for metadata",
                     state.topic, state.partition, state.leader_epoch, self.leader_id)
            state.fenced = True
        else:
            self._delay(state, code.name)

    # --- truncation ---------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection, states: list[FetchState]) -> None:
        asked: dict[TopicPartition, tuple[FetchState, Partition]] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        for state in states:
            partition = self._current(state)
            if partition is None:
                continue
            epoch = partition.log.latest_epoch
            if epoch is None:
                # No epochs to compare: only the high watermark is known to be committed.
                await self._truncate_to(state, partition, partition.log.high_watermark)
                state.truncating = False
                continue
            asked[state.key] = (state, partition)
            topics.setdefault(state.topic, []).append({
                "partition": state.partition, "current_leader_epoch": state.leader_epoch,
                "leader_epoch": epoch})
        if not asked:
            return
        body = build(request_class(OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION),
                     {"replica_id": self.settings.node_id,
                      "topics": [{"topic": name, "partitions": parts}
                                 for name, parts in topics.items()]})
        response = await connection.send(OFFSET_FOR_LEADER_EPOCH_KEY,
                                          OFFSET_FOR_LEADER_EPOCH_VERSION, body)
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.topic, result.partition)
                entry = asked.get(key)
                if entry is None:
                    continue
                answered.add(key)
                state, partition = entry
                if self._current(state) is not partition:
                    continue
                code = ErrorCode(result.error_code)
                if code is not ErrorCode.none:
                    self._partition_error(state, code)
                    continue
                await self._apply_epoch_end(state, partition, result.leader_epoch,
                                            result.end_offset)
        for key in asked.keys() - answered:
            self._delay(asked[key][0], "no OffsetForLeaderEpoch answer")

    async def _apply_epoch_end(self, state: FetchState, partition: Partition, epoch: int,
                               end_offset: int) -> None:
        plog = partition.log
        decision = truncation.decide(epoch, end_offset, log_end_offset=plog.log_end_offset,
                                     high_watermark=plog.high_watermark,
                                     local_end_for_epoch=plog.end_offset_for_epoch)
        if end_offset == truncation.UNDEFINED:
            state.send_last_fetched_epoch = False
        if decision.offset < plog.log_end_offset:
            log.info("%s-%d: leader %d has epoch %d ending at %d; truncating from %d to %d",
                     state.topic, state.partition, self.leader_id, epoch, end_offset,
                     plog.log_end_offset, decision.offset)
        await self._truncate_to(state, partition, decision.offset)
        state.truncating = not decision.complete

    async def _truncate_to(self, state: FetchState, partition: Partition, offset: int) -> None:
        # Also at or past the log end: the log then drops leader epochs starting there.
        try:
            await self.host.run_io(_truncate, partition, offset, state.guard(partition))
        except KafkaError as exc:
            log.debug("%s-%d: truncation abandoned: %s", state.topic, state.partition, exc)

    # --- fetching -----------------------------------------------------------------------

    def _throttled(self, state: FetchState, partition: Partition) -> bool:
        """Whether the follower quota applies to this replica (Kafka's rule: throttled
        replicas that are not in sync)."""
        return not state.in_sync and is_throttled(
            partition.log.config.follower_replication_throttled_replicas, state.partition,
            self.settings.node_id)

    async def _fetch(self, connection: BrokerConnection, states: list[FetchState]) -> None:
        sent: dict[TopicPartition, tuple[FetchState, Partition, int]] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        exceeded: bool | None = None  # asked once per fetch, only if a replica is throttled
        held_back = False
        for state in states:
            partition = self._current(state)
            if partition is None:
                continue
            if self._throttled(state, partition):
                if exceeded is None:
                    exceeded = self.host.follower_quota.is_exceeded()
                if exceeded:
                    held_back = True
                    continue
            plog = partition.log
            offset = plog.log_end_offset
            epoch = plog.latest_epoch if state.send_last_fetched_epoch else None
            sent[state.key] = (state, partition, offset)
            topics.setdefault(state.topic, []).append({
                "partition": state.partition, "current_leader_epoch": state.leader_epoch,
                "fetch_offset": offset,
                "last_fetched_epoch": -1 if epoch is None else epoch,
                "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": self.settings.partition_max_bytes})
        if not sent:
            if held_back:  # only throttled partitions: wait as Kafka does for an empty fetch
                await self._wait_for_change(self._backoff_s)
            return
        settings = self.settings
        body = build(request_class(FETCH_KEY, FETCH_VERSION), {
            "replica_id": settings.node_id, "max_wait": settings.max_wait_ms,
            "min_bytes": settings.min_bytes, "max_bytes": settings.response_max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""})
        response = await connection.send(
            FETCH_KEY, FETCH_VERSION, body,
            timeout=(settings.socket_timeout_ms + settings.max_wait_ms) / 1000)
        if response.error_code != ErrorCode.none:
            for state, _, _ in sent.values():
                self._delay(state, ErrorCode(response.error_code).name)
            return
        for topic in response.responses:
            for data in topic.partitions:
                entry = sent.get((topic.topic, data.partition_index))
                if entry is not None:
                    await self._process(*entry, data)

    async def _process(self, state: FetchState, partition: Partition, fetch_offset: int,
                       data: Any) -> None:
        plog = partition.log
        if self._current(state) is not partition or plog.log_end_offset != fetch_offset:
            return  # the partition moved on while the fetch was out
        code = ErrorCode(data.error_code)
        if code is ErrorCode.offset_out_of_range:
            await self._out_of_range(state, partition, fetch_offset, data.log_start_offset)
            return
        if code is not ErrorCode.none:
            self._partition_error(state, code)
            return
        diverging = data.diverging_epoch
        if diverging is not None and diverging.epoch >= 0:
            await self._apply_epoch_end(state, partition, diverging.epoch,
                                        diverging.end_offset)
            state.truncating = False  # the next fetch names our new last epoch
            return
        records = data.records
        if records:
            if is_throttled(plog.config.follower_replication_throttled_replicas,
                            state.partition, self.settings.node_id):
                self.host.follower_quota.record(len(records))
            try:
                await self.host.run_io(_append, partition, bytes(records),
                                       state.guard(partition))
            except KafkaError as exc:
                if self._current(state) is partition:
                    self._delay(state, f"{exc.code.name}: {exc.message or ''}")
                return
            except OSError as exc:
                self._delay(state, f"local write failed: {exc}")
                return
        if self._current(state) is not partition:
            return
        # A follower's high watermark: the leader's, as far as this log reaches.
        plog.high_watermark = min(data.high_watermark, plog.log_end_offset)
        state.in_sync = plog.log_end_offset >= data.high_watermark
        leader_start = data.log_start_offset
        if leader_start > plog.log_start_offset:
            target = min(leader_start, plog.high_watermark)
            if target > plog.log_start_offset:
                await self.host.run_io(plog.delete_records, target)

    async def _out_of_range(self, state: FetchState, partition: Partition, fetch_offset: int,
                            leader_start: int) -> None:
        if leader_start >= 0 and fetch_offset < leader_start:
            log.info("%s-%d: fetch offset %d is below broker %d's log start %d; starting the "
                     "log afresh there", state.topic, state.partition, fetch_offset,
                     self.leader_id, leader_start)
            try:
                await self.host.run_io(_restart_at, partition, leader_start,
                                       state.guard(partition))
            except KafkaError as exc:
                log.debug("%s-%d: reset abandoned: %s", state.topic, state.partition, exc)
        else:
            # Past the leader's log end: our tail is not on the leader; find where we agree.
            state.truncating = True


def _truncate(partition: Partition, offset: int, guard: Callable[[], bool]) -> None:
    partition.log.truncate_to(offset, guard=guard)


def _restart_at(partition: Partition, offset: int, guard: Callable[[], bool]) -> None:
    partition.log.truncate_fully_and_start_at(offset, guard=guard)


def _append(partition: Partition, data: bytes, guard: Callable[[], bool]) -> None:
    """Check and append fetched batches (on an I/O thread). Batches below the log end are
    skipped; a trailing partial batch (cut by the fetch size) is left for the next fetch."""
    plog = partition.log
    end = plog.log_end_offset
    start_pos = -1
    stop_pos = 0
    headers: list[BatchHeader] = []
    for pos, header in iter_batches(data):
        if compute_crc(data, pos, header.size) != header.crc:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"batch at offset {header.base_offset} fails its CRC check")
        if header.last_offset < end:
            continue
        if not headers:
            if header.base_offset < end:
                # Our log ends inside a leader batch: only whole batches are ours.
                plog.truncate_to(header.base_offset, guard=guard)
                end = plog.log_end_offset
            start_pos = pos
        headers.append(header)
        stop_pos = pos + header.size
    if headers:
        plog.append_as_follower(memoryview(data)[start_pos:stop_pos], headers, guard=guard)
