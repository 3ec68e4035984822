"""The broker process: wires network, handlers, log, metadata and controller together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import Sequence

from moldau.broker.config import BrokerConfig, Endpoint
from moldau.broker.controller_listener import CONTROLLER_PORT, ControllerListener
from moldau.broker.coordinators.group.coordinator import GroupCoordinator, GroupSettings
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.group.store import OffsetsTopic
from moldau.broker.coordinators.producer_ids import ProducerIdManager
from moldau.broker.coordinators.topic import CoordinatorTopic
from moldau.broker.coordinators.transaction.coordinator import (
    STATE_WRITE_TIMEOUT_MS,
    TransactionCoordinator,
    TxnSettings,
)
from moldau.broker.coordinators.transaction.markers import MarkerChannel
from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC
from moldau.broker.dynamic_config import refresh, touches_broker
from moldau.broker.handlers import apis as _apis  # noqa: F401 - registers every handler
from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.pool import RequestHandlerPool
from moldau.broker.handlers.registry import APIS, decode_frame, dispatch
from moldau.broker.log.cleaner import CleanerConfig
from moldau.broker.log.dir_lock import DirLocks
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.broker_lifecycle import BrokerLifecycle
from moldau.broker.metadata.controller import Controller
from moldau.broker.metadata.controller_channel import ControllerChannel
from moldau.broker.metadata.controller_service import FORWARDED_APIS, ControllerService
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.log import METADATA_DIR
from moldau.broker.metadata.quorum import MetadataQuorum
from moldau.broker.metadata.records import MetadataRecord, PartitionRecord, RemoveTopicRecord
from moldau.broker.metadata.scram_users import stored_credential
from moldau.broker.metrics.health import LoopLagMonitor
from moldau.broker.metrics.http import HttpEndpoint
from moldau.broker.metrics.stats import BrokerTopicStats
from moldau.broker.network.channel import Request, RequestChannel
from moldau.broker.network.connection import CloseConnection, Connection
from moldau.broker.network.response import Response
from moldau.broker.network.server import SocketServer
from moldau.broker.raft.tcp_transport import Service
from moldau.broker.replication.manager import ReplicaManager
from moldau.broker.replication.txn_verification import TransactionVerifier
from moldau.broker.security.authorizer import AllowEverything, Authorizer, parse_super_users
from moldau.broker.security.forwarding import address_bytes, principal_bytes
from moldau.broker.security.outgoing import controller_security, inter_broker_security
from moldau.broker.storage import ensure_formatted, quorum_cluster_id
from moldau.errors import KafkaError
from moldau.protocol.messages import encode_request
from moldau.security.scram import ScramCredential

log = logging.getLogger("moldau.broker")

MAINTENANCE_INTERVAL_S = 1.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.endpoints: list[Endpoint] = []
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.dir_locks = DirLocks()
        self.channel = RequestChannel(config["queued.max.requests"])
        self.network = SocketServer(config, self.channel, self._decode, self._ready.wait,
                                    self._scram_credential)
        self.handlers = RequestHandlerPool(self.channel, self._dispatch,
                                           config["num.io.threads"])
        self.topic_stats = BrokerTopicStats()
        self.loop_lag = LoopLagMonitor()
        self.log_recovery_s: float | None = None
        # What start-up is waiting for (/readyz's reason); empty once started.
        self.stage = "starting"
        self.http: HttpEndpoint | None = None
        if config.http_listener is not None:
            self.http = HttpEndpoint(self, *config.http_listener)

    @property
    def started(self) -> bool:
        return not self.stage

    def _authorizer(self) -> Authorizer | AllowEverything:
        config = self.config
        if not config["authorizer.class.name"]:
            return AllowEverything()
        super_users = parse_super_users(config["super.users"])
        log.info("Authorizer %s: super.users=%s, allow.everyone.if.no.acl.found=%s",
                 config["authorizer.class.name"], ";".join(sorted(super_users)) or "(none)",
                 str(config["allow.everyone.if.no.acl.found"]).lower())
        return Authorizer(self.image.acls, super_users, config["allow.everyone.if.no.acl.found"])

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return stored_credential(self.image, user, mechanism)

    def _decode(self, frame: bytes, connection: Connection) -> object:
        return decode_frame(frame, connection, unsupported_version_response)

    async def _dispatch(self, request: Request) -> object:
        header = request.header
        if header.api_key in FORWARDED_APIS and request.listener != CONTROLLER_PORT \
                and not self.quorum.is_active:
            # Admin changes are the active controller's: it gets the request in an Envelope
            # with the client's principal and address, and authorizes the client.
            frame = encode_request(header.api_key, header.api_version, header.correlation_id,
                                   header.client_id, request.body)
            try:
                answer = await self.controller_channel.forward(
                    frame[4:], principal_bytes(request.principal), address_bytes(request.host))
            except KafkaError as exc:
                log.warning("Cannot forward %s to the controller: %s; with an authorizer, "
                            "brokers need CLUSTER_ACTION on the cluster (super.users)",
                            APIS[header.api_key].name, exc.code.name)
                raise CloseConnection(f"{exc.message} ({exc.code.name})") from None
            if answer is not None:
                return Response.framed([answer])
        return await dispatch(self, request)

    async def start(self) -> None:
        started = time.monotonic()
        config = self.config
        # Before anything reads, writes or listens: a second process on the same directories
        # must leave without touching them (the quorum state, meta.properties, the logs).
        await asyncio.to_thread(self.dir_locks.acquire_all, config.data_dirs)
        if config.not_applied:
            log.warning("Kafka settings accepted but not applied (not implemented yet): %s",
                        ", ".join(config.not_applied))
        # Accept early; requests wait until recovery and metadata loading are done.
        bound = await self.network.start()
        self.endpoints = [self._advertised(endpoint) for endpoint in bound]
        self.loop_lag.start()
        if self.http is not None:
            await self.http.start()
        self.stage = "waiting for the controller quorum"
        voters = config["controller.quorum.voters"]
        self.cluster_id = await asyncio.to_thread(
            ensure_formatted, config.data_dirs, self.node_id,
            quorum_cluster_id(",".join(sorted(voters))) if voters else None)
        self.image = MetadataImage()
        self.authorizer = self._authorizer()
        self.quorum = MetadataQuorum(config, self.image, self.cluster_id)
        # On a node without the controller role every change raises NOT_CONTROLLER; handlers
        # reach it only when forwarding to the active controller failed.
        self.controller = Controller(
            self.node_id, self.quorum,
            default_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            topic_deletion_enabled=config["delete.topic.enable"],
            session_timeout_ms=config["broker.session.timeout.ms"],
            unclean_leader_election=config["unclean.leader.election.enable"])
        services: dict[int, Service] = {}
        listener = ControllerListener(self)
        if config.is_controller:
            services = ControllerService(self.controller, listener.api,
                                         listener.cluster_action).services()
        await self.quorum.start(services, identify=listener.identify, gate=listener.gate)
        # Dynamic broker configs: those already in the metadata, then every change.
        self.quorum.subscribe(self._on_broker_configs)
        self._apply_broker_configs()
        if self.http is not None:
            self.http.quorum_started()
        self.controller_channel = ControllerChannel(
            self.node_id, self.quorum, self.controller if config.is_controller else None,
            cluster_id=self.cluster_id, security=controller_security(config))
        if config.is_controller:
            self._tasks.append(asyncio.create_task(self._controller_loop(),
                                                   name="controller-maintenance"))
        if config.is_broker:
            await self._start_broker()
        self.stage = ""
        self._ready.set()
        log.info("Started in %.0f ms: cluster %s, node %d (%s), metadata offset %d, "
                 "%d partitions", (time.monotonic() - started) * 1000, self.cluster_id,
                 self.node_id, ",".join(sorted(config.roles)), self.image.offset,
                 len(self.replicas.partitions) if config.is_broker else 0)

    async def _start_broker(self) -> None:
        config = self.config
        self.lifecycle = BrokerLifecycle(
            self.controller_channel, self.quorum,
            endpoints=[(e.listener, e.host, e.port) for e in self.endpoints],
            rack=config["broker.rack"],
            heartbeat_interval_ms=config["broker.heartbeat.interval.ms"])
        # Unfenced means caught up with the metadata up to this broker's registration: only
        # then does the image say which logs this broker should have.
        self.stage = "registering with the controller and waiting to be unfenced"
        await self.lifecycle.start()
        self.stage = "loading logs"
        self.logs = LogManager(
            config.log_dirs, default_config=config.log_config({}),
            recovery_threads=config["num.recovery.threads.per.data.dir"],
            producer_id_expiration_ms=config["producer.id.expiration.ms"],
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            reserved_dirs=frozenset({METADATA_DIR}),
            cleaner_config=CleanerConfig.from_values(config.values),
            dir_locks=self.dir_locks)
        # The embedded single node (a combined node that is the one voter, with no controller
        # listener) has no followers: its ISR is itself and the high watermark follows the
        # log end, with no AlterPartition. A broker-only node always has peers to replicate
        # with, whatever the number of controllers.
        alone = config.is_controller and config.controller_listener is None
        self.replicas = ReplicaManager(self.node_id, config, self.logs, self.image,
                                       config["num.io.threads"],
                                       None if alone else self._alter_partition)
        held: list[Sequence[MetadataRecord]] = []
        self.quorum.subscribe(held.append)
        loading = time.monotonic()
        await asyncio.to_thread(self.logs.load, {
            name: self.replicas.log_config_for(name) for name in self.image.topics})
        self.log_recovery_s = time.monotonic() - loading
        await asyncio.to_thread(self.replicas.sync_with_image)
        self.replicas.reconfigure_all()  # a dynamic config may have changed while loading
        self.quorum.state_machine.publishers.remove(held.append)
        for records in held:  # applied while the logs were loading
            self.replicas.on_metadata(records)
        self.quorum.subscribe(self.replicas.on_metadata)
        await self.replicas.start()
        self.producer_ids = ProducerIdManager(self.controller_channel, self.node_id)
        self.txn_verifier = TransactionVerifier(
            self.node_id, self.replicas, lambda: getattr(self, "transactions", None),
            security=inter_broker_security(self.config))
        await self._start_group_coordinator()
        await self._start_transaction_coordinator()
        self.handlers.start()
        self._tasks += [asyncio.create_task(self._maintenance_loop(), name="log-maintenance"),
                        asyncio.create_task(self._offset_expiry_loop(), name="offset-expiry")]

    async def _alter_partition(self, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                               partition_epoch: int, new_isr: tuple[int, ...]
                               ) -> PartitionRecord:
        return await self.controller_channel.alter_partition(
            self.lifecycle.epoch, topic_id, partition, leader_epoch, partition_epoch, new_isr)

    async def _controller_loop(self) -> None:
        """Session expiry and, when enabled, preferred-leader rebalancing."""
        check_s = min(self.config["broker.heartbeat.interval.ms"] / 1000, 0.5)
        rebalance_s = self.config["leader.imbalance.check.interval.seconds"]
        next_rebalance = time.monotonic() + rebalance_s
        while True:
            await asyncio.sleep(check_s)
            try:
                await self.controller.expire_sessions()
                if self.config["auto.leader.rebalance.enable"] \
                        and time.monotonic() >= next_rebalance:
                    next_rebalance = time.monotonic() + rebalance_s
                    await self.controller.rebalance_leaders(
                        self.config["leader.imbalance.per.broker.percentage"])
            except KafkaError as exc:
                log.debug("Controller maintenance: %s", exc)
            except Exception:
                log.exception("Controller maintenance failed")

    async def _start_group_coordinator(self) -> None:
        config = self.config
        partitions = config["offsets.topic.num.partitions"]
        self.offsets_topic = OffsetsTopic(
            self.controller_channel, self.replicas, partitions=partitions,
            replication_factor=config["offsets.topic.replication.factor"],
            segment_bytes=config["offsets.topic.segment.bytes"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"])
        settings = GroupSettings(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60000)
        self.groups = GroupCoordinator(
            settings,
            write=lambda group_id, records, producer=None: self.offsets_topic.write(
                partition_for(group_id, partitions), records, producer),
            partition_exists=self.partition_exists,
            partitions=partitions, read=self.offsets_topic.read)
        # The coordinator of a group is the leader of its __consumer_offsets partition: it
        # loads the partition's groups on becoming leader and drops them on losing it.
        # Registered before asking which partitions are led, so no change is missed.
        self.replicas.add_leadership_listener(self.groups.on_leadership_change)
        await self.groups.load_partitions(self.offsets_topic.led_partitions())
        self.groups.drop_offsets_of_deleted_topics(self._topic_exists)
        self.quorum.subscribe(self._on_topic_metadata)

    def _on_broker_configs(self, records: Sequence[MetadataRecord]) -> None:
        if touches_broker(records, self.node_id):
            self._apply_broker_configs()

    def _apply_broker_configs(self) -> None:
        """Take the dynamic broker configs of the image; topics without an override of
        their own follow the new defaults at once."""
        if not refresh(self.config, self.image):
            return
        log.info("Dynamic broker configs: cluster default %s, broker %d %s",
                 self.config.dynamic_default, self.node_id, self.config.dynamic_broker)
        replicas = getattr(self, "replicas", None)  # set once the broker role starts
        if replicas is not None:
            replicas.reconfigure_all()

    def _topic_exists(self, topic: str) -> bool:
        return topic in self.image.topics

    def _on_topic_metadata(self, records: Sequence[MetadataRecord]) -> None:
        """A deleted topic takes its committed offsets and its metrics with it."""
        if any(isinstance(record, RemoveTopicRecord) for record in records):
            self.groups.drop_offsets_of_deleted_topics(self._topic_exists)
            self.topic_stats.retain(self._topic_exists)

    async def _start_transaction_coordinator(self) -> None:
        config = self.config
        topic = CoordinatorTopic(
            TRANSACTION_TOPIC, self.controller_channel, self.replicas,
            partitions=config["transaction.state.log.num.partitions"],
            replication_factor=config["transaction.state.log.replication.factor"],
            segment_bytes=config["transaction.state.log.segment.bytes"],
            min_isr=config["transaction.state.log.min.isr"],
            commit_timeout_ms=STATE_WRITE_TIMEOUT_MS)
        settings = TxnSettings(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            abort_interval_ms=config[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_ms=config["transactional.id.expiration.ms"],
            expiration_interval_ms=config[
                "transaction.remove.expired.transaction.cleanup.interval.ms"])
        self.transactions = TransactionCoordinator(
            settings, topic, self.producer_ids.next_id,
            MarkerChannel(self.node_id, self.replicas, self.groups.markers_written,
                          security=inter_broker_security(self.config)))
        # As for groups: the leader of a __transaction_state partition coordinates its ids.
        self.replicas.add_leadership_listener(self.transactions.on_leadership_change)
        await self.transactions.load_partitions(topic.led_partitions())
        self.transactions.start()

    def partition_exists(self, topic: str, partition: int) -> bool:
        image = self.image.topics.get(topic)
        return image is not None and partition in image.partitions

    async def _offset_expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config["offsets.retention.check.interval.ms"] / 1000)
            try:
                self.groups.expire_offsets()
            except Exception:
                log.exception("Expiring committed offsets failed")

    def _advertised(self, bound: Endpoint) -> Endpoint:
        advertised = self.config.advertised_for(bound.listener)
        if self.config["advertised.listeners"] is None:
            # Advertise the port actually bound (matters when listeners say port 0), and a
            # reachable name when the listener binds every interface, as Kafka does.
            host = advertised.host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            return Endpoint(bound.listener, host, bound.port)
        return advertised

    def endpoint_for(self, listener: str) -> Endpoint:
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return self.endpoints[0]

    async def _maintenance_loop(self) -> None:
        """Retention, time-based flushes and checkpoints, each when due (LogManager.tick)."""
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            try:
                await asyncio.to_thread(self.logs.tick)
            except Exception:
                log.exception("Log maintenance failed")

    async def stop(self) -> None:
        log.info("Shutting down")
        lifecycle = getattr(self, "lifecycle", None)
        if lifecycle is not None:
            if self.config["controlled.shutdown.enable"]:
                await lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
            await lifecycle.stop()
        quorum = getattr(self, "quorum", None)
        if quorum is not None and quorum.is_active and len(quorum.voters) > 1:
            # Hand the controller role over now rather than after an election timeout.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(quorum.driver.resign(), 2)  # type: ignore[union-attr]
        await self.network.stop()
        await self.handlers.stop()
        if self.http is not None:
            await self.http.stop()
        await self.loop_lag.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if hasattr(self, "producer_ids"):
            self.producer_ids.close()
        if hasattr(self, "groups"):
            self.groups.shutdown()
        if hasattr(self, "transactions"):
            self.transactions.shutdown()
        if hasattr(self, "txn_verifier"):
            self.txn_verifier.close()
        if hasattr(self, "replicas"):
            await self.replicas.stop()
            self.replicas.shutdown()
        if hasattr(self, "logs"):
            await asyncio.to_thread(self.logs.shutdown)
        if hasattr(self, "controller_channel"):
            await self.controller_channel.close()
        if quorum is not None:
            await quorum.close()
        self.dir_locks.release()
        log.info("Shut down cleanly")
