"""The broker-to-controller channel against a controller that never answers (one behind a
network partition): a call fails at its own deadline, not the connection's 30 s request
timeout, and drops the connection so the next call opens a fresh one."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from moldau.broker.metadata.controller_channel import ControllerChannel
from moldau.errors import ErrorCode, KafkaError


async def silent_controller() -> tuple[asyncio.Server, list[asyncio.StreamReader]]:
    """A listener that accepts and reads requests but never answers."""
    accepted: list[asyncio.StreamReader] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(reader)
        while await reader.read(65536):
            pass

    return await asyncio.start_server(serve, "127.0.0.1", 0), accepted


def test_a_heartbeat_to_a_silent_controller_times_out_and_reconnects() -> None:
    async def main() -> None:
        server, accepted = await silent_controller()
        port = server.sockets[0].getsockname()[1]
        quorum = SimpleNamespace(leader_id=2, voters={2: ("127.0.0.1", port)},
                                 is_active=False, image=None)
        channel = ControllerChannel(1, quorum, None, cluster_id="c")  # type: ignore[arg-type]
        for attempt in (1, 2):
            started = time.monotonic()
            with pytest.raises(KafkaError) as caught:
                await asyncio.wait_for(channel.heartbeat(0, 0, timeout_s=1.0), 20)
            assert caught.value.code is ErrorCode.request_timed_out
            assert time.monotonic() - started < 10
            assert len(accepted) == attempt  # a fresh connection for the next call
        await channel.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
