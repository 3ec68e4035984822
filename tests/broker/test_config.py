"""Broker settings: Kafka names, defaults, derived values and errors that name the key."""

import pytest

from moldau.broker.config import BrokerConfig, parse_overrides
from moldau.config import ConfigError, load_properties


def test_defaults_match_kafka():
    config = BrokerConfig({})
    assert config["num.partitions"] == 1
    assert config["socket.request.max.bytes"] == 104857600
    assert config["queued.max.requests"] == 500
    assert config["connections.max.idle.ms"] == 600000
    assert config["message.max.bytes"] == 1048588
    assert config["log.retention.ms"] == 168 * 3600 * 1000
    assert config["auto.create.topics.enable"] is True
    assert [str(e) for e in config.listeners] == ["PLAINTEXT://localhost:9092"]
    assert config.log_dirs == ["data/broker"]


def test_overrides_and_derived_values():
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:19092",
                           "log.dirs": "/a,/b", "log.retention.minutes": "5",
                           "log.roll.hours": "2"})
    assert config.listeners[0].port == 19092
    assert config.log_dirs == ["/a", "/b"]
    assert config["log.retention.ms"] == 300000
    assert config["log.roll.ms"] == 7200000
    log_config = config.log_config({})
    assert log_config.retention_ms == 300000
    assert log_config.segment_ms == 7200000


def test_retention_ms_wins_over_hours():
    config = BrokerConfig({"log.retention.ms": "1000", "log.retention.hours": "1"})
    assert config["log.retention.ms"] == 1000


@pytest.mark.parametrize(("raw", "named"), [
    ({"no.such.setting": "1"}, "no.such.setting"),
    ({"num.partitions": "abc"}, "num.partitions"),
    ({"num.partitions": "0"}, "num.partitions"),
    ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable"),
    ({"listeners": "localhost:9092"}, "listeners"),
    ({"compression.type": "brotli"}, "compression.type"),
    ({"advertised.listeners": "OTHER://h:1"}, "advertised.listeners"),
    ({"process.roles": "broker"}, "process.roles"),
    ({"controller.quorum.voters": "2@a:1,3@b:2"}, "controller.quorum.voters"),
    ({"controller.quorum.voters": "1@a:1,2@b:2"}, "controller.listener.names"),
    ({"controller.quorum.voters": "a:1"}, "controller.quorum.voters"),
    ({"listeners": "SSL://h:1"}, "listeners"),
])
def test_bad_settings_name_the_key(raw, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        BrokerConfig(raw)


def test_properties_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\n! other comment\nnode.id=3\nlog.dirs = /data/x\n"
                    "listeners: PLAINTEXT://h:1\nlong.value=a,\\\n   b\n")
    assert load_properties(str(path)) == {"node.id": "3", "log.dirs": "/data/x",
                                          "listeners": "PLAINTEXT://h:1", "long.value": "a,b"}


def test_parse_overrides():
    assert parse_overrides(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"])


def test_configuration_doc_is_current():
    from pathlib import Path

    from moldau.broker.config_doc import render

    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert doc == render(), "run `make docs` to regenerate docs/configuration.md"


def test_http_listener_default_empty_and_explicit():
    assert BrokerConfig({}).http_listener == ("localhost", 9404)
    assert BrokerConfig({"http.listener": ""}).http_listener is None
    assert BrokerConfig({"http.listener": "http://:9500"}).http_listener == ("", 9500)
    assert BrokerConfig({"http.listener": "http://[::1]:9500/"}).http_listener == ("::1", 9500)


@pytest.mark.parametrize("value", ["localhost:9404", "https://localhost:9404",
                                   "http://localhost", "http://localhost:70000"])
def test_bad_http_listener_is_one_line_error(value):
    with pytest.raises(ConfigError) as error:
        BrokerConfig({"http.listener": value})
    assert str(error.value) == (f"Invalid value {value} for configuration http.listener: "
                                "expected http://host:port, or empty to disable it")
