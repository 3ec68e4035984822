"""What a running cluster says about itself, asked over the Kafka protocol with Moldau's client.

`fetch_metadata` sends one Metadata request for every topic to the first address that answers
and returns the brokers it lists (in KRaft only registered, unfenced brokers), the controller
id and every partition's leader, replicas and ISR. `describe_quorum` sends DescribeQuorum to a
controller listener, which reports the Raft leader of the metadata quorum.

Each call opens its own connection and closes it before returning; the synchronous wrappers
run the call on a private event loop (in a worker thread when the caller already runs one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from moldau.client.errors import DisconnectedError, KafkaError
from moldau.client.metadata import Metadata
from moldau.client.network import ConnectionState, NetworkClient
from moldau.client.versions import ApiKey

__all__ = [
    "BrokerInfo", "ClusterView", "PartitionState", "ProbeError", "QuorumView",
    "describe_quorum", "describe_quorum_async", "fetch_metadata", "fetch_metadata_async",
]

CLIENT_ID = "moldau-cluster"
DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"
T = TypeVar("T")


class ProbeError(Exception):
    """No address answered; the message names each address and what went wrong there."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # -1: offline
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One Metadata answer."""

    answered_by: str  # host:port
    cluster_id: str | None
    controller_id: int  # -1 when the answering broker knows of none
    brokers: tuple[BrokerInfo, ...]
    partitions: tuple[PartitionState, ...]

    @property
    def broker_ids(self) -> frozenset[int]:
        return frozenset(broker.node_id for broker in self.brokers)

    @property
    def under_replicated(self) -> tuple[PartitionState, ...]:
        return tuple(p for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> tuple[PartitionState, ...]:
        return tuple(p for p in self.partitions if p.offline)


@dataclass(frozen=True, slots=True)
class QuorumView:
    """One DescribeQuorum answer about the metadata partition."""

    answered_by: str
    leader_id: int  # -1 while there is no leader
    leader_epoch: int
    high_watermark: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]
    error: str | None = None  # set when the answering node is not the leader


async def _connected(network: NetworkClient, node_id: int) -> None:
    """Open the connection (TCP and ApiVersions) to `node_id`, or raise why it failed."""
    attempted = False
    while not network.is_connected(node_id):
        if network.connection_state(node_id) is ConnectionState.DISCONNECTED:
            if attempted:
                raise network.last_error(node_id) or DisconnectedError(
                    f"Cannot reach node {node_id}")
            network.connect(node_id)
            attempted = True
        await network.wait_for_event(0.5)


async def _request(address: str, api_key: int, body: Any, timeout: float) -> Any:
    """Send one request to `address` and return the decoded response."""
    metadata = Metadata([address])
    millis = max(int(timeout * 1000), 1)
    network = NetworkClient(metadata, client_id=CLIENT_ID, request_timeout_ms=millis,
                            connection_setup_timeout_ms=millis)
    node_id = metadata.cluster.nodes[0].node_id
    try:
        async with asyncio.timeout(timeout):
            await _connected(network, node_id)
            if network.api_version(node_id, api_key) is None:
                raise ProbeError(f"{address} does not answer API key {api_key}")
            return await network.request(node_id, api_key, body)
    except TimeoutError:
        raise ProbeError(f"{address}: no answer within {timeout:g} s") from None
    finally:
        await network.close()


def _error_text(address: str, exc: BaseException) -> str:
    if isinstance(exc, ProbeError):
        return str(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if address in text else f"{address}: {text}"


async def _first_answer(addresses: Iterable[str], api_key: int, body: Any, timeout: float,
                        what: str) -> tuple[str, Any]:
    errors = []
    for address in addresses:
        try:
            return address, await _request(address, api_key, body, timeout)
        except (ProbeError, KafkaError, OSError) as exc:
            errors.append(_error_text(address, exc))
    if not errors:
        raise ProbeError(f"{what}: no address to ask")
    raise ProbeError(f"{what}: no answer ({'; '.join(errors)})")


async def fetch_metadata_async(addresses: Iterable[str], timeout: float = 5.0) -> ClusterView:
    """Metadata of every topic from the first of `addresses` (host:port) that answers."""
    body = {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
    address, response = await _first_answer(addresses, ApiKey.METADATA, body, timeout,
                                            "Metadata")
    brokers = tuple(sorted((BrokerInfo(b.node_id, b.host, b.port) for b in response.brokers),
                           key=lambda b: b.node_id))
    partitions = []
    for topic in response.topics:
        if topic.name is None or topic.error_code:
            continue
        for part in topic.partitions:
            partitions.append(PartitionState(topic.name, part.partition_index, part.leader_id,
                                             tuple(part.replica_nodes), tuple(part.isr_nodes)))
    partitions.sort(key=lambda p: (p.topic, p.partition))
    return ClusterView(address, getattr(response, "cluster_id", None),
                       getattr(response, "controller_id", -1), brokers, tuple(partitions))


def _describe_quorum_body(version: int) -> Any:
    from moldau.broker.raft.wire import describe_quorum_request

    return describe_quorum_request(version)


async def describe_quorum_async(addresses: Iterable[str], timeout: float = 5.0) -> QuorumView:
    """The metadata quorum as the first controller listener (host:port) that answers sees it.
    A voter that is not the leader still names the leader it follows."""
    address, response = await _first_answer(addresses, DESCRIBE_QUORUM, _describe_quorum_body,
                                            timeout, "DescribeQuorum")
    if response.error_code:
        raise ProbeError(f"DescribeQuorum: {address} answered error code {response.error_code}")
    for topic in response.topics:
        if topic.topic_name != METADATA_TOPIC:
            continue
        for part in topic.partitions:
            error = None if not part.error_code else f"error code {part.error_code}"
            return QuorumView(address, part.leader_id, part.leader_epoch, part.high_watermark,
                              tuple(v.replica_id for v in part.current_voters),
                              tuple(o.replica_id for o in part.observers), error)
    raise ProbeError(f"DescribeQuorum: {address} did not describe {METADATA_TOPIC}")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from synchronous code, also when an event loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def fetch_metadata(addresses: Iterable[str], timeout: float = 5.0) -> ClusterView:
    return run_sync(fetch_metadata_async(list(addresses), timeout))


def describe_quorum(addresses: Iterable[str], timeout: float = 5.0) -> QuorumView:
    return run_sync(describe_quorum_async(list(addresses), timeout))
