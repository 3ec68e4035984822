"""Broker settings: Kafka names, defaults, derived values and errors that name the key."""

import re
from pathlib import Path

import pytest

from moldau.broker.config import BrokerConfig, parse_overrides
from moldau.config import ConfigError
from moldau.properties import load_properties


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


def test_settings_only_kafka_defines_are_kept_as_text_not_applied():
    config = BrokerConfig({"controller.quorum.bootstrap.servers": "localhost:9093",
                           "share.coordinator.state.topic.min.isr": "not a number",
                           "num.partitions": "3"})
    assert config.not_applied == {"controller.quorum.bootstrap.servers": "localhost:9093",
                                  "share.coordinator.state.topic.min.isr": "not a number"}
    assert config["num.partitions"] == 3
    # Moldau's own settings keep their validation.
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig({"share.coordinator.state.topic.min.isr": "2", "num.partitions": "x"})


@pytest.mark.parametrize(("name", "message"), [
    ("log.retention.hour", "Unknown broker configuration 'log.retention.hour'; "
                           "did you mean 'log.retention.hours'?"),
    ("share.coordinator.state.topic.min.isrs", "did you mean "
                                               "'share.coordinator.state.topic.min.isr'?"),
    ("completely.different", "Unknown broker configuration 'completely.different'$"),
])
def test_unknown_setting_suggests_a_close_known_one(name, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        BrokerConfig({name: "1"})


def test_kafka_key_list_comes_from_the_pinned_release():
    from importlib import resources

    from moldau.broker.config import KAFKA_BROKER_KEYS_FILE, kafka_broker_keys

    pom = (Path(__file__).parents[2] / "java" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)<", pom).group(1)
    header = resources.files("moldau.broker").joinpath(KAFKA_BROKER_KEYS_FILE).read_text()
    assert header.startswith(f"# Every setting Apache Kafka {version}'s broker defines")
    # Every Moldau setting Kafka also has is in the list, under the same name.
    assert {"log.dirs", "node.id", "metadata.log.dir"} <= kafka_broker_keys()


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
