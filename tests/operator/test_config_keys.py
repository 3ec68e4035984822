"""The operator's idea of the broker's settings matches the broker's own (the operator may
not import the broker; tests may)."""

from __future__ import annotations

from moldau.broker.config import BROKER_CONFIG
from moldau.config import kafka_broker_keys
from moldau.operator.config_keys import MOLDAU_ONLY_KEYS, OPERATOR_KEYS, known_keys


def test_moldau_only_keys_are_the_brokers_keys_kafka_lacks() -> None:
    assert set(MOLDAU_ONLY_KEYS) == set(BROKER_CONFIG.keys) - kafka_broker_keys()


def test_every_key_the_broker_accepts_is_known() -> None:
    assert set(BROKER_CONFIG.keys) <= known_keys()


def test_the_operators_keys_are_real_settings() -> None:
    assert known_keys() >= OPERATOR_KEYS
