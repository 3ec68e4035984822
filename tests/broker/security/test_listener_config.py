"""Listener security settings: Kafka's protocol map, per-listener overrides and the errors
that name the key."""

import pytest

from moldau.broker.config import BrokerConfig
from moldau.config import ConfigError

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


def test_kafka_default_map_covers_the_four_protocols():
    config = BrokerConfig({"listeners": "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2",
                           "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    assert config.protocol_of("PLAINTEXT") == "PLAINTEXT"
    assert config.protocol_of("SASL_PLAINTEXT") == "SASL_PLAINTEXT"
    assert config.inter_broker_listener == "PLAINTEXT"


def test_unmapped_controller_listener_is_plaintext_with_the_default_map():
    config = BrokerConfig({"listeners": "PLAINTEXT://h:1,CONTROLLER://h:2",
                           "controller.quorum.voters": "1@h:2"})
    assert config.protocol_of("CONTROLLER") == "PLAINTEXT"


def test_per_listener_overrides_win():
    config = BrokerConfig({
        "listeners": "PLAINTEXT://h:1,EXTERNAL://h:2",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.external.plain.sasl.jaas.config": PLAIN_JAAS})
    assert config.listener_setting("EXTERNAL", "sasl.enabled.mechanisms") == [
        "PLAIN", "SCRAM-SHA-512"]
    assert config.listener_setting("PLAINTEXT", "sasl.enabled.mechanisms") == ["GSSAPI"]
    assert config.jaas_config("EXTERNAL", "PLAIN") == PLAIN_JAAS
    assert config.jaas_config("EXTERNAL", "SCRAM-SHA-512") is None


def test_security_inter_broker_protocol_picks_the_listener_of_that_name():
    config = BrokerConfig({"listeners": "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2",
                           "security.inter.broker.protocol": "SASL_PLAINTEXT",
                           "sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert config.inter_broker_listener == "SASL_PLAINTEXT"


@pytest.mark.parametrize(("raw", "named"), [
    ({"listeners": "PLAINTEXT://h:1,INTERNAL://h:2"}, "listeners"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT:SSL,plaintext:SSL"},
     "listener.security.protocol.map"),
    ({"inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "inter.broker.listener.name"),
    ({"inter.broker.listener.name": "SSL"}, "inter.broker.listener.name"),
    ({"security.inter.broker.protocol": "SASL_SSL"}, "security.inter.broker.protocol"),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol"),
    ({"listeners": "SASL_PLAINTEXT://h:1"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN"},
     "plain.sasl.jaas.config"),
    ({"listeners": "SASL_PLAINTEXT://h:1",
      "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"},
     "listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
    ({"listeners": "SSL://h:1", "ssl.keystore.type": "PEM"}, "ssl.keystore.location"),
    ({"listeners": "SSL://h:1", "listener.name.ssl.ssl.keystore.type": "JKS"},
     "listener.name.ssl.ssl.keystore.type"),
    ({"listener.name.ssl.ssl.client.auth": "always"}, "listener.name.ssl.ssl.client.auth"),
    ({"listener.name.ssl.log.dirs": "/x"}, "listener.name.ssl.log.dirs"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"listeners": "PLAINTEXT://h:1,CONTROLLER://h:2", "controller.quorum.voters": "1@h:2",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS},
     "listener.security.protocol.map"),
])
def test_bad_security_settings_name_the_key(raw, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")) as error:
        BrokerConfig(raw)
    assert "\n" not in str(error.value)
