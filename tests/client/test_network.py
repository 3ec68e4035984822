"""NetworkClient and BrokerConnection against a small real TCP server: the in-flight cap,
one write at a time, first-in first-out completion, correlation id checks, request
timeouts, requests without responses, ApiVersions negotiation and reconnect backoff."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from fake_broker import FakeBroker, metadata_response

from moldau.client.errors import (
    DisconnectedError,
    ProtocolError,
    UnsupportedVersionError,  # type: ignore[attr-defined]
)
from moldau.client.metadata import Metadata
from moldau.client.network import ConnectionState, ExponentialBackoff, NetworkClient
from moldau.client.producer.sender import encode_produce
from moldau.client.versions import ApiKey

pytestmark = pytest.mark.timeout(30)

NODE = -1  # the bootstrap address
METADATA_BODY = {"topics": [], "allow_auto_topic_creation": False}


def run(coro):
    return asyncio.run(coro)


def client_for(address: str, **options) -> NetworkClient:
    metadata = Metadata([address])
    return NetworkClient(metadata, client_id="test", **options)


async def connected(network: NetworkClient, node: int = NODE) -> None:
    network.connect(node)
    deadline = time.monotonic() + 5
    while not network.is_ready(node):
        assert time.monotonic() < deadline, "no connection"
        await network.wait_for_event(0.1)


def test_in_flight_cap_and_first_in_first_out_completion():
    async def main():
        async with FakeBroker() as broker:
            network = client_for(broker.address, max_in_flight=5)
            await connected(network)
            futures = []
            while network.is_ready(NODE):
                futures.append(network.send(NODE, ApiKey.METADATA, METADATA_BODY))
            assert len(futures) == 5
            assert network.in_flight_count(NODE) == 5
            with pytest.raises(DisconnectedError):
                network.send(NODE, ApiKey.METADATA, METADATA_BODY)
            completed: list[int] = []
            for index, future in enumerate(futures):
                future.add_done_callback(lambda _f, index=index: completed.append(index))
            requests = [await broker.requests.get() for _ in range(5)]
            await requests[0].reply(metadata_response("first", broker.port))
            await asyncio.wait_for(futures[0], 2)
            # A slot is free again.
            assert network.is_ready(NODE) and network.in_flight_count(NODE) == 4
            for request in requests[1:]:
                await request.reply(metadata_response(f"c{request.correlation_id}",
                                                      broker.port))
            results = await asyncio.gather(*futures)
            assert completed == [0, 1, 2, 3, 4]
            assert [r.cluster_id for r in results[1:]] == [
                f"c{r.correlation_id}" for r in requests[1:]]
            await network.close()
    run(main())


def test_next_send_waits_until_the_previous_one_is_fully_written():
    async def main():
        async with FakeBroker() as broker:
            network = client_for(broker.address, max_in_flight=5)
            await connected(network)
            broker.reading.clear()  # the server stops reading: the socket fills up
            records = b"\0" * (16 * 1024 * 1024)
            future = network.send(
                NODE, ApiKey.PRODUCE,
                lambda version: encode_produce(version, 1, 1000, None, [("t", 0, records)]))
            conn = network._states[NODE].conn
            assert conn is not None and conn.sending
            assert network.in_flight_count(NODE) == 1
            assert not network.is_ready(NODE), "a send is still being written"
            broker.reading.set()
            deadline = time.monotonic() + 5
            while not network.is_ready(NODE):
                assert time.monotonic() < deadline
                await network.wait_for_event(0.1)
            assert not conn.sending
            request = await broker.requests.get()
            assert request.api_key == ApiKey.PRODUCE and request.size > len(records)
            future.cancel()
            await network.close()
    run(main())


def test_mismatched_correlation_id_is_a_protocol_error_that_closes_the_connection():
    async def main():
        async with FakeBroker() as broker:
            network = client_for(broker.address)
            await connected(network)
            futures = [network.send(NODE, ApiKey.METADATA, METADATA_BODY) for _ in range(3)]
            requests = [await broker.requests.get() for _ in range(3)]
            network.metadata._need_update = False
            # Answer the second request first: the client expects the oldest one.
            await requests[1].reply(metadata_response("x", broker.port))
            for future in futures:
                with pytest.raises(ProtocolError, match="Correlation id"):
                    await asyncio.wait_for(future, 2)
            assert network.connection_state(NODE) is ConnectionState.DISCONNECTED
            assert network.metadata._need_update, "a disconnect asks for fresh metadata"
            await asyncio.wait_for(requests[0].conn.closed.wait(), 2)
            await network.close()
    run(main())


def test_request_timeout_disconnects_and_fails_everything_in_flight():
    async def main():
        async with FakeBroker() as broker:
            network = client_for(broker.address, request_timeout_ms=300)
            await connected(network)
            started = time.monotonic()
            futures = [network.send(NODE, ApiKey.METADATA, METADATA_BODY) for _ in range(3)]
            requests = [await broker.requests.get() for _ in range(3)]
            for future in futures:
                with pytest.raises(DisconnectedError, match="request timeout") as info:
                    await asyncio.wait_for(future, 3)
                assert info.value.timed_out and info.value.retriable
            elapsed = time.monotonic() - started
            assert 0.25 <= elapsed < 1.5, elapsed
            assert network.connection_state(NODE) is ConnectionState.DISCONNECTED
            assert network.in_flight_count(NODE) == 0
            await asyncio.wait_for(requests[0].conn.closed.wait(), 2)
            await network.close()
    run(main())


def test_a_request_without_response_completes_when_sent():
    async def main():
        async with FakeBroker() as broker:
            network = client_for(broker.address)
            await connected(network)
            future = network.send(
                NODE, ApiKey.PRODUCE,
                lambda version: encode_produce(version, 0, 1000, None, [("t", 0, b"x" * 100)]),
                expect_response=False)
            assert await asyncio.wait_for(future, 1) is None
            assert network.in_flight_count(NODE) == 0
            request = await broker.requests.get()
            assert request.body.acks == 0
            # The connection stays usable for requests with responses.
            follow = network.send(NODE, ApiKey.METADATA, METADATA_BODY)
            request = await broker.requests.get()
            await request.reply(metadata_response("after", broker.port))
            assert (await asyncio.wait_for(follow, 2)).cluster_id == "after"
            await network.close()
    run(main())


def test_api_versions_negotiation_picks_the_highest_common_version():
    async def main():
        async with FakeBroker({3: (0, 5), 0: (3, 20), 18: (0, 4)}) as broker:
            network = client_for(broker.address)
            await connected(network)
            assert network.api_version(NODE, ApiKey.METADATA) == 5
            assert network.api_version(NODE, ApiKey.PRODUCE) == 12  # the client's highest
            assert network.api_version(NODE, ApiKey.FETCH) is None
            with pytest.raises(UnsupportedVersionError):
                network.send(NODE, ApiKey.FETCH, {})
            future = network.send(NODE, ApiKey.METADATA, METADATA_BODY)
            request = await broker.requests.get()
            assert request.version == 5
            await request.reply(metadata_response("v5", broker.port))
            await future
            await network.close()
    run(main())


def test_api_versions_retries_with_the_version_the_broker_knows():
    async def main():
        async with FakeBroker({3: (0, 12), 18: (0, 2)}, api_versions_max=2) as broker:
            network = client_for(broker.address)
            await connected(network)
            assert broker.api_versions_seen == [4, 2]
            assert network.api_version(NODE, ApiKey.METADATA) == 12
            await network.close()
    run(main())


def test_exponential_backoff_with_jitter():
    backoff = ExponentialBackoff(0.05, 1.0)
    for attempts, base in [(0, 0.05), (1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0),
                           (9, 1.0)]:
        values = [backoff.backoff(attempts) for _ in range(200)]
        assert all(base * 0.8 - 1e-9 <= v <= base * 1.2 + 1e-9 for v in values), attempts
        assert max(values) - min(values) > base * 0.1, "jitter spreads the values"


def test_failed_connections_back_off_exponentially():
    async def main():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound but not listening: connections are refused
            network = client_for(f"127.0.0.1:{port}", reconnect_backoff_ms=50,
                                 reconnect_backoff_max_ms=1000)
            waits = []
            for _ in range(6):
                network.connect(NODE)
                while network.is_connecting(NODE):
                    await network.wait_for_event(0.5)
                state = network._states[NODE]
                assert state.state is ConnectionState.DISCONNECTED
                assert not network.can_connect(NODE)
                assert network.least_loaded_node() is None, "nodes in backoff are skipped"
                waits.append(state.backoff_until - state.last_attempt)
                state.backoff_until = 0.0  # skip the wait
            for wait, base in zip(waits, [0.05, 0.1, 0.2, 0.4, 0.8, 1.0], strict=True):
                assert base * 0.8 - 1e-6 <= wait <= base * 1.2 + 1e-6, waits
            assert "failed" in str(network.last_error(NODE))
            await network.close()
    run(main())


def test_request_raises_when_the_node_cannot_be_reached():
    async def main():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            network = client_for(f"127.0.0.1:{sock.getsockname()[1]}")
            with pytest.raises(DisconnectedError, match="Cannot reach node -1"):
                await network.request(NODE, ApiKey.METADATA, METADATA_BODY)
            await network.close()
    run(main())
