"""kafka-cluster, Apache Kafka's own tool: `unregister` (UnregisterBroker) and
`list-endpoints --include-fenced-brokers` (DescribeCluster v2). Refusals are compared with
Kafka's; the unregistration of a stopped broker runs on a four-node Moldau cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import FAST_FAILOVER
from e2e.java.oracle import BROKER_SETTINGS, Target
from e2e.kafka_dist import kafka_tool
from e2e.support import wait_until
from moldau.cluster import LocalCluster, free_base_port

pytestmark = pytest.mark.timeout(300)
BROKER_OVERRIDES = BROKER_SETTINGS


def endpoints(bootstrap: str) -> dict[int, str]:
    """Broker id -> its STATE column (fenced or unfenced), fenced brokers included."""
    lines = kafka_tool("kafka-cluster", "list-endpoints", "--bootstrap-server", bootstrap,
                       "--include-fenced-brokers").lines
    header = lines[0].split()
    assert header == ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"], lines
    return {int(row.split()[0]): row.split()[4] for row in lines[1:] if row.strip()}


def test_unregistering_an_unknown_id_is_refused_as_kafka_refuses_it(target: Target) -> None:
    result = kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", target.bootstrap,
                        "--id", "77", check=False)
    assert result.returncode == 1, result.describe()
    assert ("org.apache.kafka.common.errors.BrokerIdNotRegisteredException: Broker ID 77 is "
            "not currently registered") in result.stderr, result.describe()


def test_list_endpoints_names_each_broker_and_its_state(target: Target) -> None:
    assert endpoints(target.bootstrap) == {1: "unfenced"}


@pytest.fixture
def four_nodes(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three broker+controller nodes and broker-only node 4."""
    with LocalCluster(tmp_path / "cluster", brokers=4, voters=3,
                      base_port=free_base_port(4), overrides=FAST_FAILOVER) as local:
        yield local


def test_a_stopped_broker_is_listed_fenced_until_unregistered(four_nodes: LocalCluster) -> None:
    bootstrap = four_nodes.node(1).broker_address
    assert endpoints(bootstrap) == {1: "unfenced", 2: "unfenced", 3: "unfenced",
                                    4: "unfenced"}
    four_nodes.stop_node(4)
    wait_until(lambda: endpoints(bootstrap).get(4) == "fenced", 60, "node 4 fenced")

    done = kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", bootstrap,
                      "--id", "4")
    assert done.lines == ["Broker 4 is no longer registered."]
    assert endpoints(bootstrap) == {1: "unfenced", 2: "unfenced", 3: "unfenced"}
    again = kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", bootstrap,
                       "--id", "4", check=False)
    assert again.returncode == 1
    assert "Broker ID 4 is not currently registered" in again.stderr

    # The same id, started again, registers anew.
    four_nodes.start_node(4)
    wait_until(lambda: endpoints(bootstrap).get(4) == "unfenced", 60, "node 4 registered")
