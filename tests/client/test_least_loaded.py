"""Least-loaded node selection, rule by rule, on connection states set up by hand."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from moldau.client.errors import NoBrokersAvailableError
from moldau.client.metadata import Cluster, Metadata
from moldau.client.network import ConnectionState, NetworkClient
from moldau.client.types import Node


class StubConnection:
    def __init__(self, in_flight: int, max_in_flight: int = 5) -> None:
        self.in_flight = [object()] * in_flight
        self.max_in_flight = max_in_flight
        self.sending = False
        self.closed = False

    def can_send(self) -> bool:
        return not self.sending and len(self.in_flight) < self.max_in_flight

    def close(self, error: object = None) -> None:
        self.closed = True


def network_with(node_ids: list[int]) -> NetworkClient:
    metadata = Metadata(["127.0.0.1:1"])
    metadata.cluster = Cluster([Node(i, "127.0.0.1", 9000 + i) for i in node_ids])
    return NetworkClient(metadata, client_id="test")


def ready(network: NetworkClient, node: int, in_flight: int = 0) -> None:
    state = network._state(node)
    state.state = ConnectionState.READY
    state.conn = StubConnection(in_flight)  # type: ignore[assignment]


def connecting(network: NetworkClient, node: int) -> None:
    network._state(node).state = ConnectionState.CONNECTING


def backing_off(network: NetworkClient, node: int) -> None:
    state = network._state(node)
    state.state = ConnectionState.DISCONNECTED
    state.last_attempt = time.monotonic()
    state.backoff_until = time.monotonic() + 60


def attempted(network: NetworkClient, node: int, seconds_ago: float) -> None:
    state = network._state(node)
    state.state = ConnectionState.DISCONNECTED
    state.last_attempt = time.monotonic() - seconds_ago
    state.backoff_until = 0.0


def picks(network: NetworkClient, times: int = 200) -> Counter[int | None]:
    return Counter(network.least_loaded_node() for _ in range(times))


def test_no_nodes_at_all_is_an_error():
    with pytest.raises(NoBrokersAvailableError):
        network_with([]).least_loaded_node()


def test_scan_starts_at_a_random_node():
    network = network_with([1, 2, 3, 4])
    for node in (1, 2, 3, 4):
        ready(network, node)
    chosen = picks(network, 400)
    assert set(chosen) == {1, 2, 3, 4}, "every idle ready node gets picked sometimes"


def test_ready_node_with_nothing_in_flight_wins():
    network = network_with([1, 2, 3])
    ready(network, 1, in_flight=1)
    ready(network, 2, in_flight=0)
    connecting(network, 3)
    assert picks(network) == Counter({2: 200})


def test_otherwise_the_ready_node_with_fewest_in_flight():
    network = network_with([1, 2, 3, 4])
    ready(network, 1, in_flight=3)
    ready(network, 2, in_flight=1)
    ready(network, 3, in_flight=2)
    attempted(network, 4, 10)  # connectable, but a ready node comes first
    assert picks(network) == Counter({2: 200})


def test_node_at_its_in_flight_cap_is_not_ready():
    network = network_with([1, 2])
    ready(network, 1, in_flight=5)
    connecting(network, 2)
    assert picks(network) == Counter({2: 200})


def test_then_a_connecting_node():
    network = network_with([1, 2, 3])
    backing_off(network, 1)
    connecting(network, 2)
    attempted(network, 3, 5)
    assert picks(network) == Counter({2: 200})


def test_then_the_connectable_node_with_the_oldest_attempt():
    network = network_with([1, 2, 3, 4])
    attempted(network, 1, 5)
    attempted(network, 2, 30)
    attempted(network, 3, 1)
    backing_off(network, 4)
    assert picks(network) == Counter({2: 200})


def test_never_tried_nodes_count_as_oldest():
    network = network_with([1, 2])
    attempted(network, 1, 100)
    assert picks(network) == Counter({2: 200})


def test_nodes_in_backoff_or_throttled_are_skipped():
    network = network_with([1, 2, 3])
    backing_off(network, 1)
    backing_off(network, 2)
    ready(network, 3)
    network._states[3].throttle_until = time.monotonic() + 60
    assert picks(network) == Counter({None: 200})
