"""`moldau broker --container`'s settings: Kafka's image convention for KAFKA_* variables and
the defaults that make a broker in a pod reachable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from moldau.broker.container import (
    NODE_ID_OFFSET_ENV,
    container_defaults,
    container_settings,
    node_id_offset,
    ordinal,
    properties_from_env,
)


def test_kafka_variables_become_properties_as_in_kafkas_image() -> None:
    env = {"KAFKA_NODE_ID": "3", "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://b-3.b:9092",
           "KAFKA_ABC__DEF": "x", "KAFKA_ABC___DEF": "y", "PATH": "/bin"}
    assert properties_from_env(env) == {"node.id": "3",
                                        "advertised.listeners": "PLAINTEXT://b-3.b:9092",
                                        "abc_def": "x", "abc-def": "y"}


def test_the_jvm_variables_of_kafkas_scripts_are_no_properties() -> None:
    assert properties_from_env({"KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_OPTS": "", "KAFKA_": ""}) == {}


def test_node_id_comes_from_the_statefulset_ordinal() -> None:
    assert ordinal("moldau-2") == 2
    assert ordinal("moldau-12.moldau.kafka.svc.cluster.local") == 12
    assert ordinal("moldau") is None
    assert container_defaults("moldau-2", "moldau-2.moldau")["node.id"] == "2"
    assert "node.id" not in container_defaults("3f2a9c1d0b7e", "3f2a9c1d0b7e")


def test_defaults_listen_everywhere_and_advertise_the_dns_name() -> None:
    defaults = container_defaults("moldau-0", "moldau-0.moldau.kafka.svc.cluster.local")
    assert defaults["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert defaults["advertised.listeners"] == (
        "PLAINTEXT://moldau-0.moldau.kafka.svc.cluster.local:9092")
    assert defaults["http.listener"] == "http://0.0.0.0:9404"
    assert defaults["log.dirs"] == "/var/lib/moldau"


def test_a_node_pool_offset_is_added_to_the_ordinal() -> None:
    assert container_defaults("kc-brokers-2", "x", node_id_offset=100)["node.id"] == "102"
    assert node_id_offset({NODE_ID_OFFSET_ENV: "200"}) == 200
    assert node_id_offset({}) == 0
    with pytest.raises(ValueError, match="MOLDAU_NODE_ID_OFFSET must be a whole number"):
        node_id_offset({NODE_ID_OFFSET_ENV: "-1"})


def test_the_config_file_wins_over_the_defaults_and_kafka_variables_over_both() -> None:
    settings = container_settings(
        {"KAFKA_NUM_PARTITIONS": "3", NODE_ID_OFFSET_ENV: "0"},
        configured=["listeners", "num.partitions"])
    assert "listeners" not in settings
    assert settings["num.partitions"] == "3"
    assert settings["log.dirs"] == "/var/lib/moldau"


def test_the_broker_command_names_a_bad_offset_in_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "moldau.cli", "broker", "--container"],
        env={**os.environ, NODE_ID_OFFSET_ENV: "x"}, capture_output=True, text=True,
        timeout=60, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip() == ("moldau broker: MOLDAU_NODE_ID_OFFSET must be a whole "
                                   "number, not 'x'")


def test_external_listeners_advertise_the_address_of_their_pod(tmp_path) -> None:
    """The operator's file maps each pod ordinal to its external addresses; an empty host is
    the node's address (a NodePort), a full one a load balancer's."""
    from moldau.broker.container import external_addresses, with_external_addresses

    path = tmp_path / "external-addresses.properties"
    path.write_text("0.EXTERNAL=:31001\n1.EXTERNAL=:31002\n1.PUBLIC=lb-1.example.com:9094\n")
    env = {"MOLDAU_EXTERNAL_ADDRESSES": str(path), "MOLDAU_NODE_ADDRESS": "10.250.0.1"}
    assert external_addresses(env, 1) == {"EXTERNAL": "10.250.0.1:31002",
                                          "PUBLIC": "lb-1.example.com:9094"}
    assert external_addresses(env, 2) == {}
    assert external_addresses({}, 1) == {}
    advertised = "PLAIN://b-1.h:9092,EXTERNAL://b-1.h:9094,REPLICATION://b-1.h:9091"
    assert with_external_addresses(advertised, external_addresses(env, 1)) == (
        "PLAIN://b-1.h:9092,EXTERNAL://10.250.0.1:31002,REPLICATION://b-1.h:9091")
    with pytest.raises(ValueError, match="MOLDAU_NODE_ADDRESS is not set"):
        external_addresses({"MOLDAU_EXTERNAL_ADDRESSES": str(path)}, 0)
    path.write_text("0.EXTERNAL=no-port\n")
    with pytest.raises(ValueError, match="0.EXTERNAL=no-port is not host:port"):
        external_addresses(env, 0)
