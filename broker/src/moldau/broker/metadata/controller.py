"""The controller: validates cluster changes and commits them as metadata records.

Every change goes through `_commit`, which replicates it through the metadata quorum and
returns once it is committed and applied to the image; the lock keeps decisions one at a
time, so each is made on an image that holds every earlier one. It also keeps the brokers'
sessions: registration, heartbeats, fencing, controlled shutdown, and the partition leader
elections those cause.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from moldau.broker.config import BROKER_CONFIG
from moldau.broker.dynamic_config import (
    CLUSTER_DEFAULT,
    check_broker_configs,
    check_broker_resource,
)
from moldau.broker.log.config import TOPIC_CONFIG
from moldau.broker.metadata.acls import acl_of, plan_creations, plan_deletions
from moldau.broker.metadata.image import BrokerRegistration
from moldau.broker.metadata.partition_change import (
    NO_LEADER,
    changed,
    with_leader_if_offline,
    with_preferred_leader,
    without_broker,
)
from moldau.broker.metadata.placement import place_replicas
from moldau.broker.metadata.quorum import MetadataQuorum
from moldau.broker.metadata.reassignment import (
    PREFERRED_ELECTION,
    UNCLEAN_ELECTION,
    cancel_reassignment,
    check_target,
    elect,
    is_reassigning,
    progressed,
    start_reassignment,
)
from moldau.broker.metadata.records import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from moldau.broker.metadata.scram_users import ScramChange, plan_changes
from moldau.broker.security.acl import Acl, AclFilter
from moldau.config import ConfigDef, ConfigError, ConfigType
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.controller")

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
PRODUCER_ID_BLOCK = 1000
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
METADATA_TOPIC = "__cluster_metadata"

def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't "
                         "be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} "
                         "characters")
    if name == METADATA_TOPIC:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name {METADATA_TOPIC} is reserved for the cluster metadata")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name \"{name}\" is illegal, it contains a character other "
                         "than ASCII alphanumerics, '.', '_' and '-'")


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreatedTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass
class ConfigChange:
    """One alteration: op 0 set, 1 delete, 2 append, 3 subtract (IncrementalAlterConfigs)."""

    name: str
    value: str | None
    op: int = 0


def _apply_change(target: dict[str, str], change: ConfigChange, incremental: bool,
                  definitions: ConfigDef, kind: str) -> None:
    if change.name not in definitions:
        raise KafkaError(ErrorCode.invalid_config,
                         f"Unknown {kind} config name: {change.name}")
    if not incremental or change.op == 0:
        if change.value is None:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Null value not supported for : {change.name}")
        target[change.name] = change.value
    elif change.op == 1:
        target.pop(change.name, None)
    elif change.op in (2, 3):
        key = definitions[change.name]
        if key.type is not ConfigType.LIST:
            raise KafkaError(ErrorCode.invalid_config,
                             f"Config value append is not allowed for config key: "
                             f"{change.name}")
        # With no override, Kafka appends to (or subtracts from) the config's default.
        current = target.get(change.name, key.render(key.default) or "")
        items = [item for item in current.split(",") if item]
        given = [item for item in (change.value or "").split(",") if item]
        if change.op == 2:
            items += [item for item in given if item not in items]
        else:
            items = [item for item in items if item not in given]
        target[change.name] = ",".join(items)
    else:
        raise KafkaError(ErrorCode.invalid_request, f"Unknown operation {change.op}")


class Controller:
    """The controller's decisions. Only the active controller (the quorum leader, caught up)
    commits; elsewhere every change raises NOT_CONTROLLER."""

    def __init__(self, node_id: int, quorum: MetadataQuorum, *,
                 default_partitions: int, default_replication_factor: int,
                 topic_deletion_enabled: bool = True, session_timeout_ms: int = 9000,
                 unclean_leader_election: bool = False) -> None:
        self.node_id = node_id
        self.quorum = quorum
        self.image = quorum.image
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.topic_deletion_enabled = topic_deletion_enabled
        self.session_timeout_s = session_timeout_ms / 1000
        self.unclean_leader_election = unclean_leader_election
        self._lock = asyncio.Lock()
        # Broker sessions, kept by the active controller only: broker id -> last heartbeat.
        self._heartbeats: dict[int, float] = {}
        self._heard: set[int] = set()  # brokers that heartbeated to this controller
        self._session_epoch = -1  # the quorum epoch the sessions were started in
        # Broker id -> metadata offset that moved its leaderships away for its shutdown.
        self._shutdown_offsets: dict[int, int] = {}
        # Leaders this controller elected from outside the ISR (Kafka's
        # UncleanLeaderElectionsPerSec count).
        self.unclean_elections = 0

    async def _commit(self, records: Sequence[MetadataRecord]) -> int:
        if not records:
            return self.image.offset
        unclean = sum(1 for record in records if self._is_unclean_election(record))
        offset = await self.quorum.commit(records)
        self.unclean_elections += unclean
        return offset

    def _is_unclean_election(self, record: MetadataRecord) -> bool:
        if not isinstance(record, PartitionRecord) or record.leader < 0:
            return False
        topic = self.image.topics_by_id.get(record.topic_id)
        before = topic.partitions.get(record.partition) if topic is not None else None
        return before is not None and record.leader != before.leader \
            and record.leader not in before.isr

    # --- brokers -------------------------------------------------------------------------

    def live_brokers(self) -> list[int]:
        return self.image.live_brokers()

    def _usable(self, broker_id: int) -> bool:
        broker = self.image.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _unclean_allowed(self, topic_id: uuid.UUID) -> bool:
        topic = self.image.topics_by_id.get(topic_id)
        # The topic's own setting, else the cluster's dynamic default, else this node's file.
        value = self.image.topic_configs(topic.name).get("unclean.leader.election.enable") \
            if topic is not None else None
        if value is None:
            value = self.image.configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), {}).get(
                "unclean.leader.election.enable")
        return self.unclean_leader_election if value is None else value.lower() == "true"

    def _sessions(self) -> dict[int, float]:
        """Sessions restart whenever this node (again) becomes the active controller: every
        registered broker gets a full session timeout to send its first heartbeat."""
        if self._session_epoch != self.quorum.epoch:
            self._session_epoch = self.quorum.epoch
            now = time.monotonic()
            self._heartbeats = dict.fromkeys(self.image.brokers, now)
            self._heard.clear()
            self._shutdown_offsets.clear()
        return self._heartbeats

    def _partitions(self) -> list[PartitionRecord]:
        return [record for topic in self.image.topics.values()
                for record in topic.partitions.values()]

    def _moving_away(self, broker_id: int) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for record in self._partitions():
            if broker_id in record.isr or record.leader == broker_id:
                change = without_broker(record, broker_id, self._usable,
                                        unclean=self._unclean_allowed(record.topic_id))
                if change is not None:
                    records.append(change)
        return records

    def _coming_back(self, broker_id: int) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for record in self._partitions():
            if record.leader == NO_LEADER and broker_id in record.replicas:
                change = with_leader_if_offline(
                    record, lambda r: r == broker_id or self._usable(r),
                    unclean=self._unclean_allowed(record.topic_id))
                if change is not None:
                    records.append(change)
        return records

    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID,
                              endpoints: Iterable[tuple[str, str, int]],
                              rack: str | None) -> int:
        """Register (fenced until it catches up); returns the broker epoch."""
        async with self._lock:
            sessions = self._sessions()
            current = self.image.brokers.get(broker_id)
            if current is not None and current.incarnation_id == incarnation_id:
                sessions[broker_id] = time.monotonic()
                return current.epoch
            if current is not None and not current.fenced \
                    and not current.in_controlled_shutdown and broker_id in self._heard \
                    and time.monotonic() - sessions.get(broker_id, 0) < self.session_timeout_s:
                raise KafkaError(ErrorCode.duplicate_broker_registration,
                                 f"Another broker is registered with id {broker_id}; its "
                                 "session has not expired yet")
            epoch = self.image.offset + 1
            records: list[MetadataRecord] = [RegisterBrokerRecord(
                broker_id, incarnation_id, tuple(endpoints), rack, True, epoch)]
            await self._commit(records)
            # Its earlier life may still hold leaderships or ISR places: they move now.
            await self._commit(self._moving_away(broker_id))
            sessions[broker_id] = time.monotonic()
            self._heard.discard(broker_id)
            self._shutdown_offsets.pop(broker_id, None)
            log.info("Registered broker %d (epoch %d, incarnation %s)", broker_id, epoch,
                     incarnation_id)
            return epoch

    async def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int, *,
                        want_fence: bool = False, want_shut_down: bool = False
                        ) -> tuple[bool, bool, bool]:
        """A broker's heartbeat: (caught up, fenced, should shut down)."""
        if not self.quorum.is_active:
            raise KafkaError(ErrorCode.not_controller, "This node is not the active controller")
        sessions = self._sessions()
        current = self._registration(broker_id, broker_epoch)
        sessions[broker_id] = time.monotonic()
        self._heard.add(broker_id)
        caught_up = metadata_offset >= current.epoch
        if want_shut_down and broker_id not in self._shutdown_offsets:
            async with self._lock:
                current = self._registration(broker_id, broker_epoch)
                records: list[MetadataRecord] = []
                if not current.in_controlled_shutdown:
                    records.append(BrokerRegistrationChangeRecord(
                        broker_id, broker_epoch, in_controlled_shutdown=True))
                    await self._commit(records)
                moved = self._moving_away(broker_id)
                # Also after a controller change: the offset the broker must reach to know
                # its leaderships are gone is the one of this controller's last change.
                self._shutdown_offsets[broker_id] = await self._commit(moved) if moved \
                    else self.image.offset
                log.info("Broker %d is shutting down: %d partition(s) changed", broker_id,
                         len(moved))
        elif want_fence and not current.fenced:
            await self._fence(broker_id, "it asked to be fenced")
        elif current.fenced and caught_up and not want_fence and not want_shut_down:
            async with self._lock:
                # Re-checked under the lock: a registration may have replaced this one.
                current = self._registration(broker_id, broker_epoch)
                if current.fenced:
                    await self._commit([BrokerRegistrationChangeRecord(
                        broker_id, broker_epoch, fenced=False)])
                    await self._commit(self._coming_back(broker_id))
                    log.info("Unfenced broker %d", broker_id)
        current = self.image.brokers.get(broker_id)
        fenced = current is None or current.fenced
        shutdown_offset = self._shutdown_offsets.get(broker_id)
        should_shut_down = (current is not None and current.in_controlled_shutdown
                            and shutdown_offset is not None
                            and metadata_offset >= shutdown_offset)
        return caught_up, fenced, should_shut_down

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker (KIP-631), as Kafka's controller does it: the broker leaves every
        ISR and leadership it holds, then its registration goes. Its replica assignments
        stay (a removed broker should hold none: drain it first). A broker still running
        finds its epoch stale at its next heartbeat and registers again."""
        async with self._lock:
            self._check_active()
            current = self.image.brokers.get(broker_id)
            if current is None:
                raise KafkaError(ErrorCode.broker_id_not_registered,
                                 f"Broker ID {broker_id} is not currently registered")
            moved = self._moving_away(broker_id)
            await self._commit([*moved, UnregisterBrokerRecord(broker_id, current.epoch)])
            self._heartbeats.pop(broker_id, None)
            self._heard.discard(broker_id)
            self._shutdown_offsets.pop(broker_id, None)
            log.info("Unregistered broker %d (epoch %d); %d partition(s) changed", broker_id,
                     current.epoch, len(moved))

    def _registration(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        current = self.image.brokers.get(broker_id)
        if current is None or current.epoch != broker_epoch:
            raise KafkaError(ErrorCode.stale_broker_epoch,
                             f"Broker {broker_id} epoch {broker_epoch} is not registered")
        return current

    async def _fence(self, broker_id: int, why: str) -> None:
        async with self._lock:
            current = self.image.brokers.get(broker_id)
            if current is None or current.fenced:
                return
            await self._commit([BrokerRegistrationChangeRecord(broker_id, current.epoch,
                                                               fenced=True)])
            moved = self._moving_away(broker_id)
            await self._commit(moved)
            log.warning("Fenced broker %d (%s); %d partition(s) changed", broker_id, why,
                        len(moved))

    async def expire_sessions(self) -> None:
        """Fence brokers whose heartbeats stopped (called periodically)."""
        if not self.quorum.is_active:
            return
        sessions = self._sessions()
        now = time.monotonic()
        for broker_id, broker in list(self.image.brokers.items()):
            last = sessions.setdefault(broker_id, now)
            if not broker.fenced and now - last > self.session_timeout_s:
                await self._fence(broker_id, f"no heartbeat for {now - last:.1f} s")

    async def rebalance_leaders(self, imbalance_percentage: int = 0) -> None:
        """auto.leader.rebalance.enable: preferred replicas take their leadership back, for
        each broker whose share of partitions led by someone else exceeds
        leader.imbalance.per.broker.percentage (as Kafka decides it)."""
        if not self.quorum.is_active:
            return
        async with self._lock:
            by_preferred: dict[int, list[PartitionRecord]] = {}
            for record in self._partitions():
                by_preferred.setdefault(record.replicas[0], []).append(record)
            records: list[MetadataRecord] = []
            for partitions in by_preferred.values():
                elsewhere = sum(record.leader != record.replicas[0] for record in partitions)
                if elsewhere * 100 <= imbalance_percentage * len(partitions):
                    continue
                records += [change for record in partitions
                            if (change := with_preferred_leader(record, self._usable))
                            is not None]
            if records:
                await self._commit(records)
                log.info("Moved %d leadership(s) back to preferred replicas", len(records))

    # --- partitions ----------------------------------------------------------------------

    async def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID,
                              partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: Sequence[int]) -> PartitionRecord:
        """A leader's ISR change, checked against the current state as Kafka checks it."""
        async with self._lock:
            current_broker = self.image.brokers.get(broker_id)
            if current_broker is None or current_broker.epoch != broker_epoch:
                raise KafkaError(ErrorCode.stale_broker_epoch)
            topic = self.image.topics_by_id.get(topic_id)
            record = topic.partitions.get(partition) if topic is not None else None
            if record is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition)
            if record.leader != broker_id or leader_epoch > record.leader_epoch:
                raise KafkaError(ErrorCode.not_leader_or_follower)
            if leader_epoch < record.leader_epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch)
            if partition_epoch != record.partition_epoch:
                raise KafkaError(ErrorCode.invalid_update_version)
            if broker_id not in new_isr:
                raise KafkaError(ErrorCode.invalid_request, "The leader must stay in the ISR")
            for replica in new_isr:
                if replica not in record.replicas or (replica not in record.isr
                                                      and not self._usable(replica)):
                    raise KafkaError(ErrorCode.ineligible_replica,
                                     f"Replica {replica} cannot join the ISR")
            change = changed(record, isr=tuple(sorted(set(new_isr),
                                                      key=record.replicas.index)))
            if change is None:
                return record
            change = self._reassignment_progress(record, change)
            records: list[MetadataRecord] = [change]
            await self._commit(records)
            return self.image.topics_by_id[topic_id].partitions[partition]

    # --- topics --------------------------------------------------------------------------

    def _check_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        checked: dict[str, str] = {}
        for name, value in configs.items():
            if name not in TOPIC_CONFIG:
                raise KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            if value is None:
                raise KafkaError(ErrorCode.invalid_config, f"Null value not supported for "
                                 f"topic configs: {name}")
            try:
                TOPIC_CONFIG[name].parse(value)
            except ConfigError as exc:
                raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
            checked[name] = value
        return checked

    def _plan_topic(self, topic: NewTopic) -> tuple[CreatedTopic, list[MetadataRecord]]:
        validate_topic_name(topic.name)
        if topic.name in self.image.topics:
            raise KafkaError(ErrorCode.topic_already_exists,
                             f"Topic '{topic.name}' already exists.")
        collision = topic.name.replace(".", "_")
        for existing in self.image.topics:
            if existing.replace(".", "_") == collision:
                raise KafkaError(ErrorCode.invalid_topic_exception,
                                 f"Topic '{topic.name}' collides with existing topic: "
                                 f"{existing}")
        brokers = self.live_brokers()
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise KafkaError(ErrorCode.invalid_request, "Both numPartitions or "
                                 "replicationFactor and replicasAssignments were set. Both "
                                 "cannot be used at the same time.")
            assignments = self._check_assignments(topic.assignments, brokers)
        else:
            partitions = (self.default_partitions if topic.num_partitions == -1
                          else topic.num_partitions)
            factor = (self.default_replication_factor if topic.replication_factor == -1
                      else topic.replication_factor)
            if partitions <= 0:
                raise KafkaError(ErrorCode.invalid_partitions,
                                 "Number of partitions was set to an invalid non-positive "
                                 "value.")
            if factor <= 0:
                raise KafkaError(ErrorCode.invalid_replication_factor,
                                 "Replication factor must be larger than 0.")
            if factor > len(brokers):
                raise KafkaError(ErrorCode.invalid_replication_factor,
                                 f"Unable to replicate the partition {factor} time(s): The "
                                 f"target replication factor of {factor} cannot be reached "
                                 f"because only {len(brokers)} broker(s) are registered.")
            assignments = self._place_replicas(partitions, factor, brokers)
        configs = self._check_configs(topic.configs)
        topic_id = uuid.uuid4()
        records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
        records += [ConfigRecord(TOPIC_RESOURCE, topic.name, name, value)
                    for name, value in configs.items()]
        records += [PartitionRecord(topic_id, index, tuple(replicas), tuple(replicas),
                                    replicas[0])
                    for index, replicas in sorted(assignments.items())]
        created = CreatedTopic(topic.name, topic_id, len(assignments),
                               len(next(iter(assignments.values()))), configs)
        return created, records

    @staticmethod
    def _check_assignments(assignments: Mapping[int, list[int]],
                           brokers: list[int]) -> dict[int, list[int]]:
        if sorted(assignments) != list(range(len(assignments))):
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             "Partitions should be a consecutive 0-based integer sequence")
        sizes = {len(replicas) for replicas in assignments.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             "All partitions should have the same number of replicas")
        for replicas in assignments.values():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"Duplicate brokers not allowed in replica assignment: "
                                 f"{replicas}")
            unknown = [broker for broker in replicas if broker not in brokers]
            if unknown:
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"Unknown broker(s) {unknown} in replica assignment")
        return dict(assignments)

    def _place_replicas(self, partitions: int, factor: int, brokers: list[int],
                        first_partition: int = 0) -> dict[int, list[int]]:
        """Kafka's placement: leaders spread round-robin from a random start, followers at
        a random shift, across racks when the brokers have `broker.rack`."""
        racks = [(broker, record.rack if (record := self.image.brokers.get(broker))
                  is not None else None) for broker in brokers]
        return place_replicas(partitions, factor, racks, first_partition=first_partition)

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool
                            ) -> list[CreatedTopic | KafkaError]:
        async with self._lock:
            results: list[CreatedTopic | KafkaError] = []
            records: list[MetadataRecord] = []
            seen: set[str] = set()
            for topic in topics:
                if topic.name in seen:
                    results.append(KafkaError(ErrorCode.invalid_request,
                                              f"Duplicate topic name {topic.name}"))
                    continue
                seen.add(topic.name)
                try:
                    created, planned = self._plan_topic(topic)
                except KafkaError as exc:
                    results.append(exc)
                    continue
                results.append(created)
                records += planned
            if not validate_only:
                await self._commit(records)
                for result in results:
                    if isinstance(result, CreatedTopic):
                        log.info("Created topic %s with %d partition(s), id %s", result.name,
                                 result.num_partitions, result.topic_id)
            return results

    async def delete_topics(self, names: Sequence[str]) -> list[KafkaError | uuid.UUID]:
        async with self._lock:
            results: list[KafkaError | uuid.UUID] = []
            records: list[MetadataRecord] = []
            for name in names:
                topic = self.image.topics.get(name)
                if not self.topic_deletion_enabled:
                    results.append(KafkaError(ErrorCode.topic_deletion_disabled))
                elif topic is None:
                    results.append(KafkaError(ErrorCode.unknown_topic_or_partition,
                                              "This server does not host this "
                                              "topic-partition."))
                elif name in INTERNAL_TOPICS:
                    results.append(KafkaError(ErrorCode.topic_authorization_failed,
                                              f"Internal topic {name} cannot be deleted"))
                else:
                    records.append(RemoveTopicRecord(topic.topic_id))
                    results.append(topic.topic_id)
            await self._commit(records)
            for name, result in zip(names, results, strict=True):
                if isinstance(result, uuid.UUID):
                    log.info("Deleted topic %s", name)
            return results

    async def create_partitions(self, name: str, count: int,
                                assignments: list[list[int]] | None, *, validate_only: bool
                                ) -> None:
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                 "This server does not host this topic-partition.")
            current = len(topic.partitions)
            if count < current:
                raise KafkaError(ErrorCode.invalid_partitions,
                                 f"The topic {name} currently has {current} partition(s); "
                                 f"{count} would not be an increase.")
            if count == current:
                raise KafkaError(ErrorCode.invalid_partitions,
                                 f"Topic already has {current} partition(s).")
            factor = len(topic.partitions[0].replicas)
            brokers = self.live_brokers()
            if assignments is not None:
                if len(assignments) != count - current:
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     f"Increasing the number of partitions by "
                                     f"{count - current} but {len(assignments)} assignments "
                                     "provided.")
                planned = self._check_assignments(
                    {current + i: replicas for i, replicas in enumerate(assignments)} |
                    {i: list(topic.partitions[i].replicas) for i in range(current)}, brokers)
                planned = {i: planned[i] for i in range(current, count)}
                if any(len(replicas) != factor for replicas in planned.values()):
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     "Inconsistent replication factor between partitions")
            else:
                planned = self._place_replicas(count - current, factor, brokers, current)
            if validate_only:
                return
            await self._commit([
                PartitionRecord(topic.topic_id, index, tuple(replicas), tuple(replicas),
                                replicas[0])
                for index, replicas in sorted(planned.items())])
            log.info("Increased partitions of %s from %d to %d", name, current, count)

    # --- configs -------------------------------------------------------------------------

    async def alter_configs(self, resource_type: int, resource_name: str,
                            changes: Sequence[ConfigChange], *, incremental: bool,
                            validate_only: bool) -> None:
        async with self._lock:
            if resource_type == BROKER_RESOURCE:
                check_broker_resource(resource_name)
                definitions, kind = BROKER_CONFIG, "broker"
            elif resource_type == TOPIC_RESOURCE:
                if resource_name not in self.image.topics:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                     f"Topic {resource_name} does not exist")
                definitions, kind = TOPIC_CONFIG, "topic"
            else:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Unsupported resource type {resource_type}")
            current = dict(self.image.configs.get((resource_type, resource_name), {}))
            target = dict(current) if incremental else {}
            for change in changes:
                _apply_change(target, change, incremental, definitions, kind)
            if resource_type == BROKER_RESOURCE:
                check_broker_configs(target)
            else:
                self._check_configs(target)
            records: list[MetadataRecord] = [
                ConfigRecord(resource_type, resource_name, name, target.get(name))
                for name in sorted(set(current) | set(target))
                if current.get(name) != target.get(name)]
            if not validate_only:
                await self._commit(records)
                if records:
                    what = (f"topic {resource_name}" if kind == "topic" else
                            f"broker {resource_name}" if resource_name else "the cluster default")
                    log.info("Altered configs of %s: %s", what,
                             {r.name: r.value for r in records if isinstance(r, ConfigRecord)})

    # --- producer ids --------------------------------------------------------------------

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """Hand out the next block of producer ids; durable before it is used."""
        async with self._lock:
            first = self.image.next_producer_id
            await self._commit([ProducerIdsRecord(broker_id, first + PRODUCER_ID_BLOCK)])
            return first, PRODUCER_ID_BLOCK

    # --- SCRAM credentials ----------------------------------------------------------------

    async def alter_user_scram_credentials(self, changes: Sequence[ScramChange]
                                           ) -> dict[str, KafkaError | None]:
        async with self._lock:
            self._check_active()
            outcome, records = plan_changes(self.image, changes)
            await self._commit(records)
            changed_users = sorted(user for user, error in outcome.items() if error is None)
            if changed_users:
                log.info("Altered SCRAM credentials of %s", ", ".join(changed_users))
            return outcome

    # --- ACLs ----------------------------------------------------------------------------

    async def create_acls(self, acls: Sequence[Acl]) -> list[KafkaError | None]:
        async with self._lock:
            self._check_active()
            outcome, records = plan_creations(self.image.acls, acls)
            await self._commit(records)
            for record in records:
                assert isinstance(record, AccessControlEntryRecord)
                log.info("Created ACL %s", acl_of(record))
            return outcome

    async def delete_acls(self, filters: Sequence[AclFilter]
                          ) -> list[KafkaError | list[Acl]]:
        async with self._lock:
            self._check_active()
            outcome, records = plan_deletions(self.image.acls, filters)
            await self._commit(records)
            for result in outcome:
                for acl in result if isinstance(result, list) else ():
                    log.info("Deleted ACL %s", acl)
            return outcome

    # --- reassignments and elections (KIP-455, KIP-460) -----------------------------------

    def _check_active(self) -> None:
        if not self.quorum.is_active:
            raise KafkaError(ErrorCode.not_controller, "This node is not the active controller")

    def _partition_record(self, topic: str, partition: int) -> PartitionRecord:
        image = self.image.topics.get(topic)
        record = image.partitions.get(partition) if image is not None else None
        if record is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"The partition {topic}-{partition} does not exist.")
        return record

    def _reassignment_progress(self, record: PartitionRecord,
                               change: PartitionRecord) -> PartitionRecord:
        """A change of `record` with the reassignment it carries completed when it can be."""
        return progressed(record, change, self._usable)

    async def alter_partition_reassignments(
            self, reassignments: Iterable[tuple[str, int, Sequence[int] | None]]
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Start (target replicas) or cancel (None) reassignments; every change is committed
        at once. Per partition: None, or the error that left it as it was."""
        async with self._lock:
            self._check_active()
            results: dict[tuple[str, int], KafkaError | None] = {}
            pending: dict[tuple[str, int], PartitionRecord] = {}
            for topic, partition, target in reassignments:
                key = (topic, partition)
                try:
                    record = pending.get(key) or self._partition_record(topic, partition)
                    if target is None:
                        change = cancel_reassignment(
                            record, self._usable, name=f"{topic}-{partition}",
                            unclean_allowed=self._unclean_allowed(record.topic_id))
                    else:
                        check_target(target, self.image.brokers)
                        change = start_reassignment(record, target, self._usable)
                except KafkaError as exc:
                    results[key] = exc
                    continue
                results[key] = None
                if change is not None:
                    pending[key] = change
            await self._commit(list(pending.values()))
            for (topic, partition), record in pending.items():
                if is_reassigning(record):
                    log.info("Reassigning %s-%d: replicas %s, adding %s, removing %s", topic,
                             partition, list(record.replicas), list(record.adding_replicas),
                             list(record.removing_replicas))
                else:
                    log.info("Partition %s-%d now has replicas %s (leader %d)", topic,
                             partition, list(record.replicas), record.leader)
            return results

    def list_partition_reassignments(
            self, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], PartitionRecord]:
        """The ongoing reassignments among `partitions` (None: of every partition); unknown
        partitions are left out, as Kafka does."""
        self._check_active()
        if partitions is None:
            wanted = [(topic.name, index) for topic in self.image.topics.values()
                      for index in sorted(topic.partitions)]
        else:
            wanted = list(partitions)
        ongoing: dict[tuple[str, int], PartitionRecord] = {}
        for topic, partition in wanted:
            image = self.image.topics.get(topic)
            record = image.partitions.get(partition) if image is not None else None
            if record is not None and is_reassigning(record):
                ongoing[(topic, partition)] = record
        return ongoing

    async def elect_leaders(self, election_type: int,
                            partitions: Iterable[tuple[str, int]] | None
                            ) -> dict[tuple[str, int], KafkaError | None]:
        """ElectLeaders: 0 preferred, 1 unclean. With partitions None every partition is
        tried and those that needed no election are left out of the result."""
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise KafkaError(ErrorCode.invalid_request,
                             f"Unknown election type {election_type}")
        async with self._lock:
            self._check_active()
            everything = partitions is None
            if partitions is None:
                wanted = [(topic.name, index) for topic in self.image.topics.values()
                          for index in sorted(topic.partitions)]
            else:
                wanted = list(dict.fromkeys(partitions))
            results: dict[tuple[str, int], KafkaError | None] = {}
            records: list[MetadataRecord] = []
            for topic, partition in wanted:
                try:
                    record = self._partition_record(topic, partition)
                except KafkaError as exc:
                    results[(topic, partition)] = exc
                    continue
                outcome = elect(record, election_type, self._usable)
                if isinstance(outcome, KafkaError):
                    if not (everything and outcome.code is ErrorCode.election_not_needed):
                        results[(topic, partition)] = outcome
                    continue
                records.append(outcome)
                results[(topic, partition)] = None
            await self._commit(records)
            if records:
                kind = "preferred" if election_type == PREFERRED_ELECTION else "unclean"
                log.info("Elected %d leader(s) by %s election", len(records), kind)
            return results
