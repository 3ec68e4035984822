"""Group membership with Kafka's classic protocol (Kafka's ConsumerCoordinator).

The consumer's poll() drives rebalances: it finds the coordinator, joins (JoinGroup, then
SyncGroup, the leader running the assignor), and runs the rebalance listener, so listener
callbacks only ever run inside poll() (or close()). A background task sends heartbeats every
`heartbeat.interval.ms` while the member is stable; it notices rebalances, fencing and an
expired `max.poll.interval.ms` (then a dynamic member leaves the group, as Kafka's does).
Group requests use a connection of their own to the coordinator, so a JoinGroup held by the
broker never blocks fetches and fetches never delay heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.consumer.assignors import (
    MemberSubscription,
    PartitionAssignor,
    RebalanceProtocol,
)
from moldau.client.consumer.subscription_state import SubscriptionState
from moldau.client.consumer_protocol import Assignment, Subscription
from moldau.client.coordinator import (
    COORDINATOR_ERRORS,
    CoordinatorType,
    coordinator_address,
    find_coordinator_request,
    parse_find_coordinator,
)
from moldau.client.errors import (
    CommitFailedError,
    DisconnectedError,
    KafkaError,
    KafkaTimeoutError,
    error_for,
)
from moldau.client.metadata import Cluster, Metadata
from moldau.client.network import NetworkClient
from moldau.client.types import Node, TopicPartition
from moldau.client.versions import ApiKey
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.consumer")

# Invokes one rebalance-listener method ("on_partitions_revoked", ...) with partitions.
ListenerInvoker = Callable[[str, list[TopicPartition]], Awaitable[None]]

# Join/sync errors after which the member simply joins again.
_REJOIN_ERRORS = frozenset({
    ErrorCode.rebalance_in_progress, ErrorCode.member_id_required,
    ErrorCode.unknown_member_id, ErrorCode.illegal_generation,
})
_COMMIT_FAILED = ("Commit cannot be completed since the group has already rebalanced and "
                  "assigned the partitions to another member. This means that the time "
                  "between subsequent calls to poll() was longer than the configured "
                  "max.poll.interval.ms, which typically implies that the poll loop is "
                  "spending too much time processing messages. You can address this either "
                  "by increasing max.poll.interval.ms or by reducing the maximum size of "
                  "batches returned in poll() with max.poll.records.")


class MemberState(Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing-rebalance"
    COMPLETING_REBALANCE = "completing-rebalance"
    STABLE = "stable"


@dataclass(frozen=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol: str | None = None


NO_GENERATION = Generation()


class _Rejoin(Exception):
    """The join round ended without an assignment; join again (after `backoff`)."""

    def __init__(self, reason: str, backoff: bool = True) -> None:
        super().__init__(reason)
        self.backoff = backoff


class ConsumerCoordinator:
    def __init__(self, network: NetworkClient, metadata: Metadata,
                 subscriptions: SubscriptionState, config: Mapping[str, Any],
                 assignors: list[PartitionAssignor], invoke_listener: ListenerInvoker,
                 on_wakeup: Callable[[], None]) -> None:
        self.network = network
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config["group.instance.id"]
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        self.heartbeat_interval = config["heartbeat.interval.ms"] / 1000
        self.max_poll_interval = config["max.poll.interval.ms"] / 1000
        self.session_timeout = self.session_timeout_ms / 1000
        self.auto_commit = config["enable.auto.commit"]
        self.auto_commit_interval = config["auto.commit.interval.ms"] / 1000
        self.retry_backoff = config["retry.backoff.ms"] / 1000
        self.request_timeout = config["request.timeout.ms"] / 1000
        self.leave_on_close = config["internal.leave.group.on.close"]
        self.rack = config["client.rack"] or None
        self.exclude_internal = config["exclude.internal.topics"]
        self.assignors = assignors
        # Cooperative only when every configured assignor supports it (as in Kafka).
        self.protocol = (RebalanceProtocol.COOPERATIVE if all(
            RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in assignors)
            else RebalanceProtocol.EAGER)
        self._invoke_listener = invoke_listener
        self._on_wakeup = on_wakeup
        self.coordinator: Node | None = None
        self._coordinator_id: int | None = None  # the alias id of its connection
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self._join_task: asyncio.Task[tuple[Generation, Assignment]] | None = None
        self._prepared = False
        self._lost_pending = False
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._lookup_task: asyncio.Task[None] | None = None
        self._last_poll = time.monotonic()
        self._last_heartbeat_ok = time.monotonic()
        self._next_heartbeat = 0.0
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._assignment_snapshot: dict[str, int] = {}
        self._async_commits: set[asyncio.Task[None]] = set()
        self.fatal_error: KafkaError | None = None
        self.closed = False
        metadata.add_listener(self._on_metadata)

    # -------------------------------------------------------------------------- coordinator

    def mark_coordinator_unknown(self, reason: str) -> None:
        if self._coordinator_id is not None:
            log.info("group %s: coordinator %s is unavailable (%s); looking it up again",
                     self.group_id, self.coordinator, reason)
            self.network.disconnect(self._coordinator_id)
        self._coordinator_id = None
        self.coordinator = None

    async def ensure_coordinator(self, deadline: float) -> bool:
        """Find the group coordinator; False when `deadline` passes first (the lookup goes
        on in the background, so a later call picks up its answer)."""
        if self._coordinator_id is not None:
            return True
        task = self._lookup_task
        if task is None or task.done():
            task = self._lookup_task = asyncio.get_running_loop().create_task(
                self._lookup(), name=f"moldau-find-coordinator-{self.group_id}")
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.wait([task], timeout=remaining)
        if not task.done():
            return False
        self._lookup_task = None
        task.result()  # a fatal lookup error (e.g. GROUP_AUTHORIZATION_FAILED)
        return self._coordinator_id is not None

    async def _lookup(self) -> None:
        attempts = 0
        while self._coordinator_id is None and not self.closed:
            if attempts:
                await asyncio.sleep(self.retry_backoff * min(2 ** (attempts - 1), 10))
            attempts += 1
            try:
                node = self.network.least_loaded_node()
            except KafkaError:
                node = None
            if node is None:
                await self.network.wait_for_event(0.1)
                continue
            try:
                response = await asyncio.wait_for(self.network.request(
                    node, ApiKey.FIND_COORDINATOR,
                    find_coordinator_request(self.group_id, CoordinatorType.GROUP)),
                    self.request_timeout)
            except (KafkaError, TimeoutError) as exc:
                log.debug("group %s: FindCoordinator via node %d failed: %s",
                          self.group_id, node, exc)
                continue
            code, node_id, message = parse_find_coordinator(response, self.group_id)
            if code is ErrorCode.none:
                address = coordinator_address(response, self.group_id)
                if address is None:
                    continue
                self.coordinator = Node(node_id, *address)
                self._coordinator_id = self.network.alias(self.coordinator)
                log.info("group %s: coordinator is node %d (%s:%d)", self.group_id, node_id,
                         *address)
                self._last_heartbeat_ok = time.monotonic()
            elif code in COORDINATOR_ERRORS or code.retriable:
                log.debug("group %s: FindCoordinator: %s", self.group_id, code.name)
            else:
                raise error_for(code, message or f"FindCoordinator for group {self.group_id}")

    async def _send(self, api_key: int, body: Mapping[str, Any],
                    timeout: float | None = None) -> Any:
        node = self._coordinator_id
        if node is None:
            raise error_for(ErrorCode.coordinator_not_available, "coordinator unknown")
        try:
            return await self.network.request(node, api_key, body, timeout=timeout)
        except DisconnectedError as exc:
            if self._coordinator_id == node:
                self.mark_coordinator_unknown(str(exc))
            raise error_for(ErrorCode.coordinator_not_available, str(exc)) from None

    def _check_coordinator_error(self, code: ErrorCode) -> None:
        if code in COORDINATOR_ERRORS and code is not ErrorCode.coordinator_load_in_progress:
            self.mark_coordinator_unknown(code.name)

    # -------------------------------------------------------------------------- poll

    def record_poll(self) -> None:
        self._last_poll = time.monotonic()

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s: rejoining: %s", self.group_id, reason)
        self.rejoin_needed = True
        self._on_wakeup()

    def _reset_generation(self, reason: str) -> None:
        """Forget the member id and generation (the partitions are lost, not revoked)."""
        log.info("group %s: resetting generation (%s)", self.group_id, reason)
        if self.subscriptions.assignment and self.subscriptions.has_auto_assignment:
            self._lost_pending = True
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self.request_rejoin(reason)

    def _raise_fatal(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error

    async def poll(self, deadline: float) -> bool:
        """Keep the membership up; False when `deadline` passed before it was stable."""
        self.record_poll()
        self._raise_fatal()
        if self.subscriptions.has_auto_assignment:
            self._ensure_heartbeat_task()
            if not await self.ensure_coordinator(deadline):
                return False
            if (self.rejoin_needed or self._join_task is not None or
                    self.state is not MemberState.STABLE) and \
                    not await self._ensure_active_group(deadline):
                return False
        elif self.auto_commit and self._coordinator_id is None and \
                time.monotonic() >= self._next_auto_commit:
            await self.ensure_coordinator(deadline)
        self.maybe_auto_commit()
        return True

    def time_to_next_poll(self, now: float) -> float:
        """Seconds the consumer may wait before coordinator work is due again."""
        if not self.auto_commit:
            return float("inf")
        return max(self._next_auto_commit - now, 0.0)

    # -------------------------------------------------------------------------- joining

    async def _ensure_active_group(self, deadline: float) -> bool:
        while self.rejoin_needed or self._join_task is not None or \
                self.state is not MemberState.STABLE:
            self._raise_fatal()
            if not await self.ensure_coordinator(deadline):
                return False
            if self._join_task is None:
                if not self._prepared:
                    await self._on_join_prepare()
                    self._prepared = True
                self.rejoin_needed = False
                self._join_task = asyncio.get_running_loop().create_task(
                    self._join_and_sync(), name=f"moldau-join-{self.group_id}")
            task = self._join_task
            remaining = deadline - time.monotonic()
            if remaining > 0:
                await asyncio.wait([task], timeout=remaining)
            if not task.done():
                return False
            self._join_task = None
            try:
                generation, assignment = task.result()
            except _Rejoin as retry:
                self.rejoin_needed = True
                if retry.backoff:
                    await asyncio.sleep(min(self.retry_backoff,
                                            max(deadline - time.monotonic(), 0)))
                continue
            except KafkaError as exc:
                if exc.code in (ErrorCode.fenced_instance_id,
                                ErrorCode.group_max_size_reached,
                                ErrorCode.inconsistent_group_protocol,
                                ErrorCode.group_authorization_failed,
                                ErrorCode.invalid_session_timeout,
                                ErrorCode.unsupported_version,
                                ErrorCode.invalid_group_id):
                    if exc.code is ErrorCode.fenced_instance_id:
                        self.fatal_error = exc
                    raise
                log.info("group %s: join failed: %s", self.group_id, exc)
                self.rejoin_needed = True
                await asyncio.sleep(min(self.retry_backoff,
                                        max(deadline - time.monotonic(), 0)))
                continue
            self._prepared = False
            await self._on_join_complete(generation, assignment)
        return True

    async def _on_join_prepare(self) -> None:
        """Before (re)joining: commit what was consumed, then give up partitions."""
        if self.auto_commit and self.generation is not NO_GENERATION:
            try:
                # Given its own time: the partitions are about to be handed over.
                await self.commit_sync(self._consumed(),
                                       time.monotonic() + self.request_timeout)
            except KafkaError as exc:
                log.warning("group %s: offset commit before rebalance failed: %s",
                            self.group_id, exc)
        owned = self.subscriptions.partitions()
        if self._lost_pending or self.generation is NO_GENERATION:
            self._lost_pending = False
            if owned:
                self.subscriptions.assign_from_subscribed([])
                await self._invoke_listener("on_partitions_lost", owned)
        elif self.protocol is RebalanceProtocol.EAGER:
            # As in Kafka, the listener runs while the partitions are still assigned, so
            # that it can commit their positions; they go afterwards.
            try:
                await self._invoke_listener("on_partitions_revoked", owned)
            finally:
                self.subscriptions.assign_from_subscribed([])
        else:
            # Cooperative: only partitions of topics no longer subscribed go now.
            gone = [tp for tp in owned if tp.topic not in self.subscriptions.topics]
            if gone:
                try:
                    await self._invoke_listener("on_partitions_revoked", gone)
                finally:
                    self.subscriptions.assign_from_subscribed(
                        [tp for tp in owned if tp not in gone])

    def _subscription_metadata(self, assignor: PartitionAssignor) -> bytes:
        topics = sorted(self.subscriptions.topics)
        owned = self.subscriptions.partitions()
        return Subscription(topics, assignor.subscription_user_data(set(topics)), owned,
                            self.generation.generation_id, self.rack).encode()

    async def _join_and_sync(self) -> tuple[Generation, Assignment]:
        self.state = MemberState.PREPARING_REBALANCE
        body = {
            "group_id": self.group_id, "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms,
            "member_id": self.generation.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": "consumer",
            "protocols": [{"name": a.name, "metadata": self._subscription_metadata(a)}
                          for a in self.assignors],
            "reason": None}
        timeout = max(self.request_timeout, self.rebalance_timeout_ms / 1000 + 5)
        response = await self._send(ApiKey.JOIN_GROUP, body, timeout)
        code = ErrorCode(response.error_code)
        if code is ErrorCode.member_id_required:
            # KIP-394: join again at once with the id the coordinator gave us.
            self.generation = Generation(-1, response.member_id, None)
            raise _Rejoin("member id required", backoff=False)
        if code is not ErrorCode.none:
            self._join_failed(code, "JoinGroup")
        generation = Generation(response.generation_id, response.member_id,
                                response.protocol_name)
        self.generation = generation
        self.state = MemberState.COMPLETING_REBALANCE
        assignments: list[dict[str, Any]] = []
        if response.leader == response.member_id:
            log.info("group %s: elected leader of generation %d with %d members",
                     self.group_id, generation.generation_id, len(response.members))
            result = await self._assign(response, generation.protocol or "")
            assignments = [{"member_id": member, "assignment": assignment.encode()}
                           for member, assignment in result.items()]
        sync = {"group_id": self.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id,
                "group_instance_id": self.group_instance_id, "protocol_type": "consumer",
                "protocol_name": generation.protocol, "assignments": assignments}
        response = await self._send(ApiKey.SYNC_GROUP, sync, timeout)
        code = ErrorCode(response.error_code)
        if code is not ErrorCode.none:
            self._join_failed(code, "SyncGroup")
        return generation, Assignment.decode(response.assignment)

    def _join_failed(self, code: ErrorCode, api: str) -> None:
        """Raise _Rejoin for errors another round can cure, else the error itself."""
        self.state = MemberState.UNJOINED
        self._check_coordinator_error(code)
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self.generation = NO_GENERATION
        if code in _REJOIN_ERRORS or code in COORDINATOR_ERRORS or code.retriable:
            raise _Rejoin(code.name)
        raise error_for(code, f"{api} for group {self.group_id} failed")

    async def _assign(self, response: Any, protocol: str) -> dict[str, Assignment]:
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:
            raise error_for(ErrorCode.inconsistent_group_protocol,
                            f"The coordinator chose assignor {protocol!r}, which this "
                            f"consumer does not have")
        members = [MemberSubscription(m.member_id, m.group_instance_id,
                                      Subscription.decode(m.metadata))
                   for m in response.members]
        topics = {t for m in members for t in m.subscription.topics}
        self.subscriptions.group_topics = topics | self.subscriptions.topics
        if getattr(response, "skip_assignment", False):
            # KIP-814: a static leader rejoining unchanged keeps the current assignment.
            return {}
        cluster = await self._metadata_for(topics)
        counts = {t: n for t in topics if (n := cluster.partition_count(t) or 0) > 0}
        self._assignment_snapshot = counts
        return assignor.assign(counts, members)

    async def _metadata_for(self, topics: Iterable[str]) -> Cluster:
        missing = [t for t in topics if self.metadata.cluster.partition_count(t) is None]
        for topic in missing:
            self.metadata.add_topic(topic)
        if missing:
            deadline = time.monotonic() + self.request_timeout
            while any(self.metadata.cluster.partition_count(t) is None and
                      t not in self.metadata.cluster.topic_errors for t in missing):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.metadata.request_update()
                await self.metadata.wait_for_change(remaining)
        return self.metadata.cluster

    async def _on_join_complete(self, generation: Generation, assignment: Assignment) -> None:
        assignor = next((a for a in self.assignors if a.name == generation.protocol), None)
        if assignor is not None:
            assignor.on_assignment(assignment, generation.generation_id)
        subscribed = self.subscriptions.topics
        new = [tp for tp in dict.fromkeys(assignment.partitions) if tp.topic in subscribed]
        if len(new) != len(assignment.partitions):
            log.warning("group %s: the assignment names topics this member is not "
                        "subscribed to; rejoining", self.group_id)
            self.request_rejoin("assignment for unsubscribed topics")
        owned = self.subscriptions.partitions()
        self.state = MemberState.STABLE
        self._last_heartbeat_ok = time.monotonic()
        self._next_heartbeat = 0.0
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        log.info("group %s: generation %d, member %s, assigned %s", self.group_id,
                 generation.generation_id, generation.member_id,
                 ", ".join(str(tp) for tp in new) or "nothing")
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            kept = set(new)
            revoked = [tp for tp in owned if tp not in kept]
            added = [tp for tp in new if tp not in set(owned)]
            try:
                if revoked:
                    # Still assigned while the listener runs, so it can commit them.
                    await self._invoke_listener("on_partitions_revoked", revoked)
            finally:
                self.subscriptions.assign_from_subscribed(new)
                if revoked:
                    # The revoked partitions go to their new owners in a follow-up round.
                    self.request_rejoin("partitions were revoked")
            await self._invoke_listener("on_partitions_assigned", added)
        else:
            self.subscriptions.assign_from_subscribed(new)
            await self._invoke_listener("on_partitions_assigned", new)
        self._check_snapshot(self.metadata.cluster)

    # -------------------------------------------------------------------------- metadata

    def _on_metadata(self, cluster: Cluster) -> None:
        if self.subscriptions.pattern is not None:
            pattern = self.subscriptions.pattern
            matched = {name for name, topic in cluster.topics.items()
                       if pattern.fullmatch(name) and
                       not (self.exclude_internal and topic.is_internal)}
            if self.subscriptions.matched_topics(matched):
                for topic in matched:
                    self.metadata.add_topic(topic)
                self.request_rejoin("the topics matching the subscribed pattern changed")
        self._check_snapshot(cluster)

    def _check_snapshot(self, cluster: Cluster) -> None:
        """Rejoin when a subscribed topic's partition count differs from the one the last
        assignment was computed with (the leader watches every member's topics)."""
        if self.state is not MemberState.STABLE or not self.subscriptions.has_auto_assignment:
            return
        snapshot = self._assignment_snapshot
        if not snapshot:
            return
        for topic in self.subscriptions.group_topics:
            count = cluster.partition_count(topic)
            if count is not None and count != snapshot.get(topic, 0):
                self._assignment_snapshot = {}
                self.request_rejoin(f"topic {topic} now has {count} partitions")
                return

    # -------------------------------------------------------------------------- heartbeats

    def _ensure_heartbeat_task(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"moldau-heartbeat-{self.group_id}")

    async def _heartbeat_loop(self) -> None:
        while not self.closed:
            now = time.monotonic()
            if self.state is not MemberState.STABLE or self._coordinator_id is None or \
                    self._join_task is not None:
                await asyncio.sleep(min(self.heartbeat_interval, 0.1))
                continue
            if now - self._last_poll > self.max_poll_interval:
                log.warning(
                    "group %s: consumer poll timeout has expired: poll() was not called for "
                    "longer than max.poll.interval.ms (%d ms); leaving the group so its "
                    "partitions can go to another member", self.group_id,
                    self.rebalance_timeout_ms)
                await self.maybe_leave_group("consumer poll timeout has expired")
                continue
            if now - self._last_heartbeat_ok > self.session_timeout:
                self.mark_coordinator_unknown("no successful heartbeat within the session "
                                              "timeout")
                continue
            if now < self._next_heartbeat:
                poll_expiry = self._last_poll + self.max_poll_interval - now
                await asyncio.sleep(max(min(self._next_heartbeat - now, poll_expiry), 0.001))
                continue
            self._next_heartbeat = now + self.heartbeat_interval
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        generation = self.generation
        body = {"group_id": self.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id,
                "group_instance_id": self.group_instance_id}
        try:
            response = await asyncio.wait_for(self._send(ApiKey.HEARTBEAT, body),
                                              self.request_timeout)
        except (KafkaError, TimeoutError) as exc:
            log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            self._next_heartbeat = time.monotonic() + self.retry_backoff
            return
        code = ErrorCode(response.error_code)
        if self.generation is not generation:
            return  # a rebalance finished meanwhile; this answer is about the old one
        if code is ErrorCode.none:
            self._last_heartbeat_ok = time.monotonic()
        elif code is ErrorCode.rebalance_in_progress:
            self._last_heartbeat_ok = time.monotonic()
            self.request_rejoin("the group is rebalancing")
        elif code in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id):
            self._reset_generation(f"heartbeat: {code.name}")
        elif code is ErrorCode.fenced_instance_id:
            log.error("group %s: this member was fenced by another with group.instance.id "
                      "%s", self.group_id, self.group_instance_id)
            self.fatal_error = error_for(code, f"group.instance.id {self.group_instance_id} "
                                               f"is used by another consumer")
            self._on_wakeup()
        elif code in COORDINATOR_ERRORS:
            self._check_coordinator_error(code)
            self._next_heartbeat = time.monotonic() + self.retry_backoff
        else:
            log.warning("group %s: heartbeat failed: %s", self.group_id, code.name)

    async def maybe_leave_group(self, reason: str) -> None:
        """Dynamic members tell the coordinator they are leaving; static ones just stop."""
        generation = self.generation
        if self.group_instance_id is None and generation.member_id and \
                self._coordinator_id is not None:
            log.info("group %s: member %s leaving the group: %s", self.group_id,
                     generation.member_id, reason)
            body = {"group_id": self.group_id, "member_id": generation.member_id,
                    "members": [{"member_id": generation.member_id,
                                 "group_instance_id": None, "reason": reason}]}
            with contextlib.suppress(KafkaError, TimeoutError):
                await asyncio.wait_for(self._send(ApiKey.LEAVE_GROUP, body),
                                       self.request_timeout)
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        if self.subscriptions.assignment and self.subscriptions.has_auto_assignment:
            self._lost_pending = True
        self.rejoin_needed = True

    # -------------------------------------------------------------------------- offsets

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(offset, "", epoch)
                for tp, (offset, epoch) in self.subscriptions.all_consumed().items()}

    def _commit_generation(self) -> Generation:
        if not self.subscriptions.has_auto_assignment:
            return NO_GENERATION  # manual assignment: commits outside any generation
        if self.state is MemberState.STABLE or self._join_task is None and \
                self.generation is not NO_GENERATION:
            return self.generation
        if self._join_task is not None:
            raise error_for(ErrorCode.rebalance_in_progress,
                            "Offset commit cannot be completed since the consumer is "
                            "undergoing a rebalance for auto partition assignment. You can "
                            "try completing the rebalance by calling poll() and then retry "
                            "the operation.")
        raise CommitFailedError(_COMMIT_FAILED)

    async def _commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                      timeout: float) -> None:
        generation = self._commit_generation()
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                "committed_metadata": om.metadata or "", "commit_timestamp": -1})
        body = {"group_id": self.group_id,
                "generation_id_or_member_epoch": generation.generation_id,
                "member_id": generation.member_id, "group_instance_id": self.group_instance_id,
                "retention_time": -1,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
        response = await asyncio.wait_for(self._send(ApiKey.OFFSET_COMMIT, body), timeout)
        for topic in response.topics:
            for p in topic.partitions:
                code = ErrorCode(p.error_code)
                if code is ErrorCode.none:
                    continue
                tp = TopicPartition(topic.name, p.partition_index)
                self._check_coordinator_error(code)
                if code is ErrorCode.rebalance_in_progress:
                    self.request_rejoin("the group is rebalancing")
                    raise error_for(code, "Offset commit cannot be completed since the "
                                          "group is rebalancing; poll() completes the "
                                          "rebalance, then retry")
                if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                    if self.generation == generation:
                        self._reset_generation(f"offset commit: {code.name}")
                    raise CommitFailedError(_COMMIT_FAILED)
                if code is ErrorCode.fenced_instance_id:
                    self.fatal_error = error_for(code)
                    raise self.fatal_error
                raise error_for(code, f"Offset commit for partition {tp} failed")

    async def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                          deadline: float) -> None:
        """Commit, retrying coordinator moves and retriable errors until `deadline`."""
        if not offsets:
            return
        self._raise_fatal()
        while True:
            if not await self.ensure_coordinator(deadline):
                raise KafkaTimeoutError("Timeout expired before the offset commit could be "
                                        "sent (the group coordinator was not found)")
            try:
                await self._commit(offsets, max(deadline - time.monotonic(), 0.001))
                return
            except TimeoutError:
                raise KafkaTimeoutError("Timeout expired before the offset commit was "
                                        "acknowledged") from None
            except KafkaError as exc:
                if not exc.retriable or exc.code is ErrorCode.rebalance_in_progress:
                    raise
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"Offset commit timed out; last error: {exc}") \
                        from exc
                await asyncio.sleep(min(self.retry_backoff,
                                        max(deadline - time.monotonic(), 0)))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: Callable[[Mapping[TopicPartition, OffsetAndMetadata],
                                         KafkaError | None], Any] | None = None) -> None:
        offsets = dict(offsets)

        async def run() -> None:
            error: KafkaError | None = None
            try:
                deadline = time.monotonic() + self.request_timeout
                if not await self.ensure_coordinator(deadline):
                    raise error_for(ErrorCode.coordinator_not_available,
                                    "the group coordinator is unknown")
                if offsets:
                    await self._commit(offsets, self.request_timeout)
            except TimeoutError:
                error = KafkaTimeoutError("The offset commit was not acknowledged in time")
            except KafkaError as exc:
                error = exc
            if error is not None and callback is None:
                log.warning("group %s: asynchronous offset commit failed: %s",
                            self.group_id, error)
            if callback is not None:
                try:
                    callback(offsets, error)
                except Exception:
                    log.exception("offset commit callback failed")

        task = asyncio.get_running_loop().create_task(run())
        self._async_commits.add(task)
        task.add_done_callback(self._async_commits.discard)

    def maybe_auto_commit(self) -> None:
        if not self.auto_commit:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.auto_commit_interval
        if self.subscriptions.has_auto_assignment and self.state is not MemberState.STABLE:
            return
        offsets = self._consumed()
        if offsets:
            self.commit_async(offsets)

    async def flush_async_commits(self, timeout: float) -> None:
        if self._async_commits:
            await asyncio.wait(list(self._async_commits), timeout=timeout)

    async def fetch_committed(self, partitions: Iterable[TopicPartition], deadline: float
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        partitions = list(partitions)
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
        body = {"group_id": self.group_id, "topics": topics, "require_stable": True,
                "groups": [{"group_id": self.group_id, "member_id": None,
                            "member_epoch": -1, "topics": topics}]}
        attempts = 0
        while True:
            self._raise_fatal()
            if not await self.ensure_coordinator(deadline):
                raise KafkaTimeoutError("Timeout expired while fetching committed offsets "
                                        "(the group coordinator was not found)")
            try:
                response = await asyncio.wait_for(
                    self._send(ApiKey.OFFSET_FETCH, body),
                    max(deadline - time.monotonic(), 0.001))
                return self._parse_offset_fetch(response, partitions)
            except TimeoutError:
                raise KafkaTimeoutError("Timeout expired while fetching committed "
                                        "offsets") from None
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                attempts += 1
                await asyncio.sleep(min(self.retry_backoff * min(attempts, 10),
                                        max(deadline - time.monotonic(), 0)))

    def _parse_offset_fetch(self, response: Any, partitions: list[TopicPartition]
                            ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        groups = getattr(response, "groups", None)
        if groups is not None and not hasattr(response, "topics"):
            code = ErrorCode(groups[0].error_code)
            topic_list = groups[0].topics
        else:
            code = ErrorCode(response.error_code)
            topic_list = response.topics
        if code is not ErrorCode.none:
            self._check_coordinator_error(code)
            raise error_for(code, f"OffsetFetch for group {self.group_id} failed")
        out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(partitions)
        for topic in topic_list:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                pcode = ErrorCode(p.error_code)
                if pcode is not ErrorCode.none:
                    raise error_for(pcode, f"OffsetFetch for partition {tp} failed")
                if p.committed_offset >= 0:
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "",
                                                None if epoch < 0 else epoch)
        return out

    async def refresh_committed_offsets(self, deadline: float) -> bool:
        """Positions for assigned partitions that have none: the committed offset, else
        the reset policy. False when the deadline passed first."""
        missing = self.subscriptions.missing_positions()
        if not missing:
            return True
        try:
            committed = await self.fetch_committed(missing, deadline)
        except KafkaTimeoutError:
            return False
        for tp, om in committed.items():
            state = self.subscriptions.assignment.get(tp)
            if state is None or state.position is not None or state.reset is not None:
                continue
            if om is None:
                self.subscriptions.request_reset(tp)
            else:
                log.info("group %s: %s starts at committed offset %d", self.group_id, tp,
                         om.offset)
                self.subscriptions.seek(tp, om.offset, om.leader_epoch)
        return True

    # -------------------------------------------------------------------------- closing

    async def close(self, deadline: float) -> None:
        try:
            if self.subscriptions.has_auto_assignment and self.state is MemberState.STABLE:
                if self.auto_commit:
                    try:
                        await self.commit_sync(self._consumed(), deadline)
                    except KafkaError as exc:
                        log.warning("group %s: offset commit on close failed: %s",
                                    self.group_id, exc)
                owned = self.subscriptions.partitions()
                if owned:
                    await self._invoke_listener("on_partitions_revoked", owned)
            elif self.auto_commit and not self.subscriptions.has_auto_assignment:
                with contextlib.suppress(KafkaError):
                    await self.commit_sync(self._consumed(), deadline)
            await self.flush_async_commits(max(deadline - time.monotonic(), 0))
            if self.leave_on_close and self.subscriptions.has_auto_assignment:
                await self.maybe_leave_group("the consumer is being closed")
        finally:
            self.closed = True
            for task in (self._heartbeat_task, self._join_task, self._lookup_task):
                if task is not None:
                    task.cancel()
            for task in list(self._async_commits):
                task.cancel()

