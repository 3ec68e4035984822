"""The metadata quorum: `__cluster_metadata` replicated by Raft and folded into the image.

Each committed entry is one controller decision (a JSON array of metadata records), applied
to the image atomically and then handed to the publishers (replica manager, group
coordinator). Snapshots hold the records that rebuild the image.

Voters run the Raft node on the controller listener; with no controller.quorum.voters the
node is the single voter of its own quorum and needs no port. The active controller is the
Raft leader once it has applied its own epoch's first entry, so its image holds everything
any earlier leader committed before it decides anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from moldau.broker.config import BrokerConfig
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.log import LOG_FILE, METADATA_DIR, MetadataLog
from moldau.broker.metadata.records import MetadataRecord, decode_records, encode_records
from moldau.broker.metrics.stats import LatencyStats
from moldau.broker.raft.disk_log import DiskRaftLog
from moldau.broker.raft.driver import NotLeaderError, ProposalFailed, RaftDriver
from moldau.broker.raft.log import OffsetAndEpoch, Snapshot
from moldau.broker.raft.messages import Message
from moldau.broker.raft.quorum_store import QUORUM_STATE_FILE
from moldau.broker.raft.state import LeaderState, RaftConfig, Role
from moldau.broker.raft.tcp_transport import Gate, Identify, Service, TcpTransport
from moldau.broker.raft.wire import QuorumInfo
from moldau.broker.security.outgoing import controller_security, controller_server_context
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.metadata")

Publisher = Callable[[Sequence[MetadataRecord]], None]


class MetadataStateMachine:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.publishers: list[Publisher] = []

    def apply(self, offset: int, payload: bytes) -> None:
        records = decode_records(payload)
        for record in records:
            self.image.apply(offset, record)
        self.image.offset = offset
        self._publish(records)

    def snapshot(self) -> bytes:
        return json.dumps({"offset": self.image.offset,
                           "records": json.loads(encode_records(self.image.to_records()))},
                          separators=(",", ":")).encode()

    def load(self, data: bytes) -> None:
        payload = json.loads(data)
        records = decode_records(json.dumps(payload["records"]).encode())
        self.image.clear()
        for record in records:
            self.image.apply(payload["offset"], record)
        self.image.offset = payload["offset"]
        self._publish(records)

    def _publish(self, records: Sequence[MetadataRecord]) -> None:
        for publish in self.publishers:
            try:
                publish(records)
            except Exception:
                log.exception("Publishing metadata failed")


class _NoPeers:
    """The transport of a single-voter quorum: there is nobody to talk to."""

    def send(self, message: Message) -> None:
        pass


def raft_config(config: BrokerConfig) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=config["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=config["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=config["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=config["controller.quorum.request.timeout.ms"],
        append_linger_ms=config["controller.quorum.append.linger.ms"])


def migrate_legacy_log(directory: str) -> None:
    """Turn a metadata log written before the quorum (one file of records, no
    quorum-state) into a snapshot at its end, so no topic is forgotten. The old file is
    set aside first and removed last: a crash in between is finished at the next start."""
    legacy = os.path.join(directory, LOG_FILE)
    moved = legacy + ".pre-quorum"
    if os.path.exists(os.path.join(directory, QUORUM_STATE_FILE)):
        return
    if not os.path.exists(moved):
        if not os.path.exists(legacy) or os.path.getsize(legacy) == 0:
            return
        os.replace(legacy, moved)
    for name in os.listdir(directory):  # whatever an interrupted conversion left
        if name != os.path.basename(moved):
            os.remove(os.path.join(directory, name))
    old = MetadataLog(directory, file_name=os.path.basename(moved))
    try:
        entries = old.load()
    finally:
        old.close()
    image = MetadataImage()
    for offset, record in entries:
        image.apply(offset, record)
    machine = MetadataStateMachine(image)
    end = image.offset + 1
    with DiskRaftLog(directory) as raft_log:
        if end > 0:
            raft_log.install_snapshot(Snapshot(OffsetAndEpoch(end, 0), machine.snapshot()))
    os.remove(moved)
    log.info("Converted the metadata log (%d records) into a snapshot at offset %d",
             len(entries), end)


class MetadataQuorum:
    def __init__(self, config: BrokerConfig, image: MetadataImage, cluster_id: str) -> None:
        self.config = config
        self.node_id = config.node_id
        self.voters = config.voters
        self.directory = os.path.join(config.metadata_log_dir, METADATA_DIR)
        self.cluster_id = cluster_id
        self.state_machine = MetadataStateMachine(image)
        self.transport: TcpTransport | None = None
        self.driver: RaftDriver | None = None
        self.commit_latency = LatencyStats()  # proposals of this node while it leads

    @property
    def image(self) -> MetadataImage:
        return self.state_machine.image

    def subscribe(self, publisher: Publisher) -> None:
        self.state_machine.publishers.append(publisher)

    async def start(self, services: Mapping[int, Service] | None = None, *,
                    identify: Identify | None = None, gate: Gate | None = None) -> None:
        """Join the quorum; `identify` and `gate` tell who sends on the controller listener
        and whether they may (see TcpTransport)."""
        os.makedirs(self.directory, exist_ok=True)
        await asyncio.to_thread(migrate_legacy_log, self.directory)
        listener = self.config.controller_listener
        peers = {node: address for node, address in self.voters.items()
                 if node != self.node_id and address is not None}
        transport: Any
        if listener is not None or peers:
            # A voter listens on its controller listener; a broker-only node (an observer)
            # only fetches from the voters, who answer on its own connections.
            self.transport = transport = TcpTransport(
                self.node_id, listener.host or "0.0.0.0" if listener else "127.0.0.1",
                listener.port if listener else 0, peers=peers,
                cluster_id=self.cluster_id, describe_quorum=self.describe,
                request_timeout_ms=self.config["controller.quorum.request.timeout.ms"],
                services=services, ssl_server=controller_server_context(self.config),
                ssl_client=controller_security(self.config).context, identify=identify,
                gate=gate)
        else:
            transport = _NoPeers()
        self.driver = RaftDriver(self.node_id, self.voters, self.directory,
                                 self.state_machine, transport,
                                 config=raft_config(self.config))
        await self.driver.start()
        if self.transport is not None:
            if listener is not None:
                await self.transport.start(self.driver.handle)
            else:
                self.transport.handler = self.driver.handle

    async def close(self) -> None:
        if self.transport is not None:
            await self.transport.close()
        if self.driver is not None:
            await self.driver.close()

    # --- who leads --------------------------------------------------------------------------

    @property
    def leader_id(self) -> int | None:
        return self.driver.leader_id if self.driver is not None else None

    @property
    def epoch(self) -> int:
        return self.driver.epoch if self.driver is not None else -1

    @property
    def is_active(self) -> bool:
        """This node leads the quorum and has applied everything committed before it."""
        driver = self.driver
        if driver is None or driver.role is not Role.LEADER:
            return False
        state = driver.node.state
        return isinstance(state, LeaderState) and driver.applied_offset > state.epoch_start_offset

    def describe(self) -> QuorumInfo:
        assert self.driver is not None
        return self.driver.describe_quorum()

    # --- writing ----------------------------------------------------------------------------

    async def commit(self, records: Sequence[MetadataRecord]) -> int:
        """Replicate one controller decision; returns its offset once committed and applied
        here. Raises NOT_CONTROLLER when this node does not lead (or stops leading)."""
        if not self.is_active or self.driver is None:
            raise KafkaError(ErrorCode.not_controller, "This node is not the active controller")
        started = time.monotonic()
        try:
            offset = await self.driver.propose([encode_records(records)])
            self.commit_latency.record((time.monotonic() - started) * 1000)
            return offset
        except (NotLeaderError, ProposalFailed) as exc:
            raise KafkaError(ErrorCode.not_controller,
                             f"Lost the controller role before the change committed: {exc}"
                             ) from None
