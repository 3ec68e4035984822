"""Typed configuration definitions in Kafka's style: named keys, types, defaults, validators.

Both the broker settings (`server.properties`) and per-topic settings are described with
`ConfigKey`s; parsing turns strings from files, command lines or the wire into typed values
and rejects unknown keys and bad values with a message that names the key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Any

# Every setting Kafka's broker defines, generated from Kafka itself (`make kafka-config-names`);
# it ships with the client so that the broker and the operator check keys against one list.
KAFKA_BROKER_KEYS_FILE = "kafka_broker_configs.txt"


@functools.cache
def kafka_broker_keys() -> frozenset[str]:
    text = resources.files("moldau.client").joinpath(KAFKA_BROKER_KEYS_FILE).read_text("ascii")
    return frozenset(line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith("#"))


# The throttle rates `kafka-reassign-partitions` sets (--throttle, KIP-73, and
# --replica-alter-log-dirs-throttle) and clears (--verify). Moldau moves no replica between
# log directories, so the last is stored and shown only.
REPLICATION_THROTTLE_RATES = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second"})

# Broker settings Moldau applies without a restart when set as dynamic broker configs
# (IncrementalAlterConfigs on a BROKER resource): the broker-level defaults of the topic
# settings it implements, the replication throttle rates, and transaction verification
# (cluster-wide in Kafka, read at each produce request). Shared by the broker, which
# accepts only these, and the operator, which applies changes of these without rolling pods.
DYNAMIC_BROKER_KEYS = frozenset({
    "compression.type", "log.cleaner.delete.retention.ms", "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
    "log.cleanup.policy", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.index.interval.bytes", "log.index.size.max.bytes",
    "log.message.timestamp.after.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.type", "log.preallocate", "log.retention.bytes",
    "log.retention.hours", "log.retention.minutes", "log.retention.ms", "log.roll.hours",
    "log.roll.jitter.hours", "log.roll.jitter.ms", "log.roll.ms", "log.segment.bytes",
    "log.segment.delete.delay.ms", "message.max.bytes", "min.insync.replicas",
    "unclean.leader.election.enable", "transaction.partition.verification.enable",
}) | REPLICATION_THROTTLE_RATES


class ConfigError(ValueError):
    """A setting is unknown or has an invalid value. The message names the setting."""


class ConfigType(Enum):
    # Values are the DescribeConfigs v3+ wire codes.
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

Validator = Callable[[str, Any], None]


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value < minimum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be at least {minimum}")
    return check


def between(low: float, high: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and not low <= value <= high:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be between {low} and {high}")
    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Validator:
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            probe = item if case_sensitive else str(item).lower()
            allowed = choices if case_sensitive else [c.lower() for c in choices]
            if probe not in allowed:
                raise ConfigError(f"Invalid value {item} for configuration {name}: "
                                  f"String must be one of: {', '.join(choices)}")
    return check


def one_of_bool(*allowed: bool) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value not in allowed:
            raise ConfigError(f"Invalid value {str(value).lower()} for configuration {name}: "
                              f"only {', '.join(str(a).lower() for a in allowed)} is supported")
    return check


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    doc: str = ""
    validator: Validator | None = None
    sensitive: bool = False

    def parse(self, raw: Any) -> Any:
        """Turn a raw value (usually a string) into this key's type, then validate it."""
        value = _coerce(self, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def render(self, value: Any) -> str | None:
        """The string form Kafka shows in DescribeConfigs."""
        if value is None:
            return None
        if self.type is ConfigType.LIST:
            return ",".join(value)
        if self.type is ConfigType.BOOLEAN:
            return "true" if value else "false"
        return str(value)


def _coerce(key: ConfigKey, raw: Any) -> Any:
    if raw is None:
        return None
    if not isinstance(raw, str):
        if key.type is ConfigType.LIST and isinstance(raw, list | tuple):
            return list(raw)
        return raw
    text = raw.strip()
    kind = key.type
    try:
        if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            value = int(text)
            limit = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 2**15 - 1}.get(kind, LONG_MAX)
            if not -limit - 1 <= value <= limit:
                raise ValueError(text)
            return value
        if kind is ConfigType.DOUBLE:
            return float(text)
        if kind is ConfigType.BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if kind is ConfigType.LIST:
            return [item.strip() for item in text.split(",") if item.strip()]
    except ValueError:
        # Kafka's ConfigDef wording, which tools and users recognise.
        expected = "Expected value to be either true or false" \
            if kind is ConfigType.BOOLEAN else f"Not a number of type {kind.name}"
        raise ConfigError(f"Invalid value {raw} for configuration {key.name}: "
                          f"{expected}") from None
    return text


class ConfigDef:
    """A set of keys; parses a mapping of raw values into a complete typed mapping."""

    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys: dict[str, ConfigKey] = {key.name: key for key in keys}

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self.keys[name]

    def parse(self, raw: Mapping[str, Any], *, what: str = "configuration") -> dict[str, Any]:
        """Parse every given key; unknown keys are an error."""
        unknown = sorted(set(raw) - set(self.keys))
        if unknown:
            raise ConfigError(f"Unknown {what} {unknown[0]!r}")
        return {name: self.keys[name].parse(value) for name, value in raw.items()}

    def with_defaults(self, parsed: Mapping[str, Any]) -> dict[str, Any]:
        values = {name: key.default for name, key in self.keys.items()}
        values.update(parsed)
        return values
