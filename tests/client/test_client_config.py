"""Client settings, serializers and the typed errors."""

from __future__ import annotations

import pytest

from moldau.client import errors
from moldau.client.config import parse_admin_config, parse_producer_config
from moldau.client.serialization import resolve_serializer
from moldau.config import ConfigError
from moldau.errors import ErrorCode

BOOT = {"bootstrap.servers": "localhost:9092"}


def test_producer_defaults_are_kafkas():
    config = parse_producer_config(BOOT, {})
    assert config["acks"] == -1 and config["enable.idempotence"] is True
    assert config["linger.ms"] == 5 and config["batch.size"] == 16384
    assert config["buffer.memory"] == 33554432 and config["max.block.ms"] == 60000
    assert config["delivery.timeout.ms"] == 120000
    assert config["max.in.flight.requests.per.connection"] == 5
    assert config["request.timeout.ms"] == 30000
    assert config["reconnect.backoff.ms"] == 50 and config["reconnect.backoff.max.ms"] == 1000
    assert config["retry.backoff.ms"] == 100 and config["metadata.max.age.ms"] == 300000
    assert config["client.id"].startswith("moldau-producer-")


def test_keyword_settings_use_underscores():
    config = parse_producer_config(BOOT, {"linger_ms": 20, "compression_type": "zstd"})
    assert config["linger.ms"] == 20 and config["compression.type"] == "zstd"


def test_unknown_and_invalid_settings_are_named():
    with pytest.raises(ConfigError, match="lingr.ms"):
        parse_producer_config({**BOOT, "lingr.ms": 1}, {})
    with pytest.raises(ConfigError, match="compression.type"):
        parse_producer_config({**BOOT, "compression.type": "brotli"}, {})
    with pytest.raises(ConfigError, match="batch.size"):
        parse_producer_config({**BOOT, "batch.size": "big"}, {})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        parse_producer_config({}, {})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        parse_admin_config({"bootstrap.servers": "nohostport"}, {})


def test_idempotence_gives_way_to_conflicting_settings_unless_asked_for():
    assert parse_producer_config({**BOOT, "acks": "1"}, {})["enable.idempotence"] is False
    assert parse_producer_config({**BOOT, "acks": 0}, {})["acks"] == 0
    with pytest.raises(ConfigError, match="enable.idempotence"):
        parse_producer_config({**BOOT, "acks": "1", "enable.idempotence": True}, {})


def test_a_transactional_id_needs_idempotence_as_in_kafka():
    config = parse_producer_config(BOOT, {"transactional_id": "tx",
                                          "transaction_timeout_ms": 5000})
    assert (config["transactional.id"], config["transaction.timeout.ms"]) == ("tx", 5000)
    assert config["enable.idempotence"] is True and config["acks"] == -1
    for conflict in ({"acks": "1"}, {"enable.idempotence": False}):
        with pytest.raises(ConfigError) as raised:
            parse_producer_config({**BOOT, "transactional.id": "tx", **conflict}, {})
        assert str(raised.value) == ("Cannot set a transactional.id without also enabling "
                                     "idempotence.")


def test_delivery_timeout_must_cover_linger_and_request_timeout():
    config = parse_producer_config({**BOOT, "request.timeout.ms": 200000}, {})
    assert config["delivery.timeout.ms"] == 200005
    with pytest.raises(ConfigError, match="delivery.timeout.ms"):
        parse_producer_config({**BOOT, "delivery.timeout.ms": 1000}, {})


def test_serializers():
    assert resolve_serializer(None)("text") == b"text"
    assert resolve_serializer(None)(bytearray(b"ab")) == b"ab"
    assert resolve_serializer("json")({"a": [1, 2]}) == b'{"a":[1,2]}'
    assert resolve_serializer("str")("é") == "é".encode()
    assert resolve_serializer(lambda v: str(v * 2).encode())(21) == b"42"
    with pytest.raises(errors.SerializationError):
        resolve_serializer(None)(12)
    with pytest.raises(errors.SerializationError):
        resolve_serializer(lambda v: 5)("x")
    with pytest.raises(ValueError):
        resolve_serializer("avro")


def test_errors_are_typed_after_kafka_codes():
    error = errors.error_for(3, "no such topic")
    assert type(error).__name__ == "UnknownTopicOrPartitionError"
    assert isinstance(error, errors.KafkaError) and error.retriable
    assert error.code is ErrorCode.unknown_topic_or_partition
    assert str(error) == "no such topic"
    assert not errors.TopicAlreadyExistsError().retriable  # type: ignore[attr-defined]
    assert errors.error_class(17).__name__ == "InvalidTopicError"
    assert errors.error_class(9999) is errors.UnknownServerError
    assert issubclass(errors.DisconnectedError, errors.NetworkError)
    assert isinstance(errors.KafkaTimeoutError("x"), TimeoutError)
    assert errors.RecordTooLargeError is errors.MessageTooLargeError
