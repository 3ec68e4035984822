"""The broker process: wires network, handlers, log, metadata and controller together."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Sequence

from moldau.broker.config import BrokerConfig, Endpoint
from moldau.broker.coordinators.group.coordinator import GroupCoordinator, GroupSettings
from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.group.store import OffsetsTopic
from moldau.broker.coordinators.producer_ids import ProducerIdManager
from moldau.broker.handlers import apis as _apis  # noqa: F401 - registers every handler
from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.pool import RequestHandlerPool
from moldau.broker.handlers.registry import decode_frame, dispatch
from moldau.broker.log.cleaner import CleanerConfig
from moldau.broker.log.manager import LogManager
from moldau.broker.metadata.controller import Controller
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.log import METADATA_DIR, MetadataLog
from moldau.broker.metadata.records import MetadataRecord, RemoveTopicRecord
from moldau.broker.network.channel import Request, RequestChannel
from moldau.broker.network.connection import Connection
from moldau.broker.network.server import SocketServer
from moldau.broker.replication.manager import ReplicaManager
from moldau.broker.storage import ensure_formatted

log = logging.getLogger("moldau.broker")

MAINTENANCE_INTERVAL_S = 1.0


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.endpoints: list[Endpoint] = []
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.channel = RequestChannel(config["queued.max.requests"])
        self.network = SocketServer(config, self.channel, self._decode, self._ready.wait)
        self.handlers = RequestHandlerPool(self.channel, self._dispatch,
                                           config["num.io.threads"])

    def _decode(self, frame: bytes, connection: Connection) -> object:
        return decode_frame(frame, connection, unsupported_version_response)

    async def _dispatch(self, request: Request) -> object:
        return await dispatch(self, request)

    async def start(self) -> None:
        started = time.monotonic()
        # Accept early; requests wait until recovery and metadata loading are done.
        bound = await self.network.start()
        self.endpoints = [self._advertised(endpoint) for endpoint in bound]
        self.cluster_id = await asyncio.to_thread(ensure_formatted, self.config.log_dirs,
                                                  self.node_id)
        self.image = MetadataImage()
        self.metadata_log = MetadataLog(self.config.log_dirs[0])
        self.controller = Controller(
            self.node_id, self.metadata_log, self.image,
            default_partitions=self.config["num.partitions"],
            default_replication_factor=self.config["default.replication.factor"],
            topic_deletion_enabled=self.config["delete.topic.enable"])
        replayed = await asyncio.to_thread(self.controller.replay)
        self.logs = LogManager(
            self.config.log_dirs, default_config=self.config.log_config({}),
            recovery_threads=self.config["num.recovery.threads.per.data.dir"],
            producer_id_expiration_ms=self.config["producer.id.expiration.ms"],
            retention_check_interval_ms=self.config["log.retention.check.interval.ms"],
            reserved_dirs=frozenset({METADATA_DIR}),
            cleaner_config=CleanerConfig.from_values(self.config.values))
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs, self.image,
                                       self.config["num.io.threads"])
        await asyncio.to_thread(self.logs.load, {
            name: self.replicas.log_config_for(name) for name in self.image.topics})
        await asyncio.to_thread(self.replicas.sync_with_image)
        self.controller.subscribe(self.replicas.on_metadata)
        await self.controller.register_broker(
            [(e.listener, e.host, e.port) for e in self.endpoints], self.config["broker.rack"])
        self.producer_ids = ProducerIdManager(self.controller, self.node_id)
        await self._start_group_coordinator()
        self.handlers.start()
        self._tasks = [asyncio.create_task(self._maintenance_loop(), name="log-maintenance"),
                       asyncio.create_task(self._offset_expiry_loop(), name="offset-expiry")]
        self._ready.set()
        log.info("Started in %.0f ms: cluster %s, %d metadata records, %d partitions",
                 (time.monotonic() - started) * 1000, self.cluster_id, replayed,
                 len(self.replicas.partitions))

    async def _start_group_coordinator(self) -> None:
        config = self.config
        partitions = config["offsets.topic.num.partitions"]
        self.offsets_topic = OffsetsTopic(
            self.controller, self.replicas, partitions=partitions,
            replication_factor=config["offsets.topic.replication.factor"],
            segment_bytes=config["offsets.topic.segment.bytes"])
        settings = GroupSettings(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60000)
        self.groups = GroupCoordinator(
            settings,
            write=lambda group_id, records: self.offsets_topic.write(
                partition_for(group_id, partitions), records),
            partition_exists=self._partition_exists,
            coordinates=lambda group_id: self.offsets_topic.leads(
                partition_for(group_id, partitions)))
        if self.offsets_topic.exists:
            await asyncio.to_thread(self.groups.load, self.offsets_topic.read_all())
        self.groups.start_timers()
        self.groups.drop_offsets_of_deleted_topics(self._topic_exists)
        self.controller.subscribe(self._on_group_metadata)

    def _topic_exists(self, topic: str) -> bool:
        return topic in self.image.topics

    def _on_group_metadata(self, records: Sequence[MetadataRecord]) -> None:
        if any(isinstance(record, RemoveTopicRecord) for record in records):
            self.groups.drop_offsets_of_deleted_topics(self._topic_exists)

    def _partition_exists(self, topic: str, partition: int) -> bool:
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
        await self.network.stop()
        await self.handlers.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if hasattr(self, "groups"):
            self.groups.shutdown()
        if hasattr(self, "replicas"):
            self.replicas.shutdown()
        if hasattr(self, "logs"):
            await asyncio.to_thread(self.logs.shutdown)
        if hasattr(self, "metadata_log"):
            self.metadata_log.close()
        log.info("Shut down cleanly")
