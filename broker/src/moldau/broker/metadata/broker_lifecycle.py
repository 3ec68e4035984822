"""A broker's life as the controller sees it: registration, heartbeats, controlled shutdown.

The broker registers with a fresh incarnation id and is fenced (no leaderships, no new
replicas) until a heartbeat shows it has applied the metadata up to its own registration.
Heartbeats every `broker.heartbeat.interval.ms` keep its session; a broker whose session
lapses is fenced by the controller and unfenced by a later heartbeat. On shutdown it asks the
controller to move its leaderships away and stops once told it may.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence

from moldau.broker.metadata.controller_channel import ControllerChannel
from moldau.broker.metadata.quorum import MetadataQuorum
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.lifecycle")

_RETRY_S = 0.2
NO_CONTROLLER_GRACE_S = 2.0


class BrokerLifecycle:
    def __init__(self, channel: ControllerChannel, quorum: MetadataQuorum, *,
                 endpoints: Sequence[tuple[str, str, int]], rack: str | None,
                 heartbeat_interval_ms: int) -> None:
        self.channel = channel
        self.quorum = quorum
        self.endpoints = list(endpoints)
        self.rack = rack
        self.interval_s = heartbeat_interval_ms / 1000
        self.incarnation_id = uuid.uuid4()
        self.epoch = -1
        self.fenced = True
        self._unfenced = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def metadata_offset(self) -> int:
        return self.quorum.image.offset

    async def start(self) -> None:
        """Register, then heartbeat in the background; returns once unfenced."""
        await self._register()
        self._task = asyncio.create_task(self._heartbeats(), name="broker-heartbeat")
        await self._unfenced.wait()

    async def _register(self) -> None:
        while True:
            try:
                self.epoch = await self.channel.register_broker(
                    self.incarnation_id, self.endpoints, self.rack)
                log.info("Registered with the controller: broker epoch %d", self.epoch)
                return
            except KafkaError as exc:
                if exc.code is ErrorCode.duplicate_broker_registration:
                    log.info("Waiting for this broker's previous session to expire before "
                             "registering again")
                else:
                    log.warning("Registration failed: %s; retrying", exc)
                await asyncio.sleep(_RETRY_S * 5)

    async def _heartbeats(self) -> None:
        while not self._stopping:
            try:
                _caught_up, fenced, _ = await self.channel.heartbeat(
                    self.epoch, self.metadata_offset, timeout_s=max(self.interval_s * 2, 1))
                if fenced != self.fenced:
                    log.info("This broker is now %s", "fenced" if fenced else "unfenced")
                self.fenced = fenced
                if not fenced:
                    self._unfenced.set()
            except KafkaError as exc:
                if exc.code is ErrorCode.stale_broker_epoch:
                    log.warning("The controller no longer knows this broker's registration; "
                                "registering again")
                    self.incarnation_id = uuid.uuid4()
                    await self._register()
                    continue
                log.info("Heartbeat failed: %s", exc)
            # Fenced: heartbeat quickly so the broker is unfenced as soon as it caught up.
            delay = min(self.interval_s, _RETRY_S) if self.fenced else self.interval_s
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away; True once it says the
        broker may stop."""
        self._stopping = True
        await self._stop_task()
        if self.epoch < 0:
            return False
        deadline = time.monotonic() + timeout_s
        leaderless_since: float | None = None
        while time.monotonic() < deadline:
            if self.quorum.leader_id is None:
                # No controller (the quorum has lost its majority): nobody can move the
                # leaderships, so waiting longer only delays the stop.
                now = time.monotonic()
                leaderless_since = leaderless_since or now
                if now - leaderless_since >= NO_CONTROLLER_GRACE_S:
                    log.warning("No controller is reachable; stopping without moving "
                                "leaderships")
                    return False
            else:
                leaderless_since = None
            try:
                _, _, should_shut_down = await self.channel.heartbeat(
                    self.epoch, self.metadata_offset, want_shut_down=True,
                    timeout_s=min(max(deadline - time.monotonic(), 0.1),
                                  NO_CONTROLLER_GRACE_S))
                if should_shut_down:
                    log.info("Controlled shutdown complete: leaderships moved")
                    return True
            except KafkaError as exc:
                log.info("Controlled shutdown heartbeat failed: %s", exc)
            await asyncio.sleep(_RETRY_S / 2)
        log.warning("Controlled shutdown did not complete within %.0f s; stopping anyway",
                    timeout_s)
        return False

    async def _stop_task(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def stop(self) -> None:
        self._stopping = True
        await self._stop_task()
