"""Dynamic broker configs, as Kafka keeps them in KRaft mode (KIP-226).

They are set with AlterConfigs / IncrementalAlterConfigs on BROKER resources and stored as
ConfigRecords in the metadata log: the resource "" is the cluster-wide default, a broker id
that broker's own layer. Per key, a broker's own value wins over the cluster default, which
wins over server.properties. Only settings Moldau applies without a restart are accepted:
the broker-level defaults of topic settings (log.retention.*, log.segment.bytes, ...) and
the replication throttle rates (leader/follower.replication.throttled.rate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from moldau.broker.config import BROKER_CONFIG, BrokerConfig
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import BROKER_RESOURCE, ConfigRecord, MetadataRecord
from moldau.config import DYNAMIC_BROKER_KEYS, ConfigError, kafka_broker_keys
from moldau.errors import ErrorCode, KafkaError

# DYNAMIC_BROKER_KEYS: every broker property that supplies a topic's default (Kafka's
# DynamicLogConfig set), as far as Moldau applies it: a topic without its own override
# follows the new value at once; and the replication throttle rates, read at each quota
# check. tests/broker/test_dynamic_config.py keeps the list in step with the topic settings.
CLUSTER_DEFAULT = ""


def check_broker_resource(name: str) -> None:
    """The resource name: "" (the cluster default) or a broker id, as Kafka's controller
    checks it."""
    if name == CLUSTER_DEFAULT:
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request,
                         "Unable to parse broker name as a base 10 number.") from None
    if broker_id < 0:
        raise KafkaError(ErrorCode.invalid_request, "Invalid negative broker ID.")


def _kafka_set(names: Sequence[str]) -> str:
    return "Set(" + ", ".join(names) + ")"


def check_broker_configs(configs: Mapping[str, str]) -> None:
    """Every key of a resource's dynamic configs after a change: known, updatable without a
    restart, with a valid value. Kafka answers INVALID_REQUEST for the last two."""
    unknown = sorted(name for name in configs
                     if name not in BROKER_CONFIG and name not in kafka_broker_keys())
    if unknown:
        raise KafkaError(ErrorCode.invalid_config, f"Unknown broker config name: {unknown[0]}")
    fixed = sorted(name for name in configs if name not in DYNAMIC_BROKER_KEYS)
    if fixed:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Cannot update these configs dynamically: {_kafka_set(fixed)}")
    for name, value in configs.items():
        try:
            BROKER_CONFIG[name].parse(value)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from None


def dynamic_layers(image: MetadataImage, node_id: int
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster default and this broker's own dynamic configs, parsed. A stored value
    this version cannot use (written by another) is left out rather than stopping the
    broker."""
    layers = []
    for name in (CLUSTER_DEFAULT, str(node_id)):
        parsed: dict[str, Any] = {}
        for key, value in image.configs.get((BROKER_RESOURCE, name), {}).items():
            if key in DYNAMIC_BROKER_KEYS:
                try:
                    parsed[key] = BROKER_CONFIG[key].parse(value)
                except ConfigError:
                    continue
        layers.append(parsed)
    return layers[0], layers[1]


def touches_broker(records: Sequence[MetadataRecord], node_id: int) -> bool:
    """Whether a metadata batch changes the cluster default or this broker's configs."""
    return any(isinstance(record, ConfigRecord) and record.resource_type == BROKER_RESOURCE
               and record.resource_name in (CLUSTER_DEFAULT, str(node_id))
               for record in records)


def refresh(config: BrokerConfig, image: MetadataImage) -> bool:
    """Apply the image's dynamic configs to `config`; whether anything changed."""
    default, broker = dynamic_layers(image, config.node_id)
    if default == config.dynamic_default and broker == config.dynamic_broker:
        return False
    config.set_dynamic(default, broker)
    return True
