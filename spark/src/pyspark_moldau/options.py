"""The options of Spark's Kafka connector, parsed and checked with its names and its messages.

Spark passes options case-insensitively; `kafka.*` options (minus the prefix) configure the
Moldau client, except the few the source manages itself, which are refused as Spark refuses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from moldau.client.config import COMMON_KEYS
from pyspark_moldau.offsets import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    TopicOffsets,
    parse_offsets,
)

STRATEGIES = ("subscribe", "subscribepattern", "assign")
DEFAULT_POLL_TIMEOUT_MS = 120_000  # spark.network.timeout, Spark's default for this option
# A Kafka partition's range is split into Spark partitions of at most this many records.
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
# Spark's default maxTriggerDelay, 15m.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
# Spark's time suffixes (JavaUtils.timeStringAsMs), as milliseconds.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}

_REFUSED = {
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays. Use DataFrame operations to explicitly deserialize the keys."),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as "
        "byte arrays. Use DataFrame operations to explicitly deserialize the values."),
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingoffsets' to 'earliest' or 'latest' to specify where to start."),
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}


# Settings every Moldau client takes (bootstrap servers, timeouts, TLS, SASL).
_CONNECTION_KEYS = frozenset(key.name for key in COMMON_KEYS)


class OptionError(ValueError):
    """A source or sink option is missing or invalid; the message names it."""


@dataclass(frozen=True)
class Strategy:
    """Which partitions to read: named topics, a topic pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class SourceOptions:
    client: dict[str, str]
    strategy: Strategy
    starting: str | TopicOffsets
    ending: str | TopicOffsets
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS


def client_settings(options: Mapping[str, str], role: str) -> dict[str, str]:
    """The `kafka.*` options without the prefix; bootstrap servers are required."""
    settings = {key[len("kafka."):]: value for key, value in options.items()
                if key.lower().startswith("kafka.")}
    if not settings.get("bootstrap.servers", "").strip():
        raise OptionError(f"Option 'kafka.bootstrap.servers' must be specified for "
                          f"configuring Kafka {role}")
    return settings


def connection_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The connection and security settings among a consumer's or producer's: what an admin
    client (or a consumer for another job) of the same cluster takes."""
    return {k: v for k, v in settings.items() if k in _CONNECTION_KEYS}


def source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    opts = {key.lower(): value for key, value in options.items()}
    client = client_settings(options, "consumer")
    for name in client:
        if name.lower() in _REFUSED:
            raise OptionError(_REFUSED[name.lower()])
    strategy = _strategy(opts)
    starting = _offsets_option(opts, "startingoffsets", LATEST if streaming else EARLIEST)
    ending = _offsets_option(opts, "endingoffsets", LATEST)
    if streaming and "endingoffsets" in opts:
        raise OptionError("ending offset not valid in streaming queries")
    if not streaming:
        _check_batch_bounds(starting, ending)
    most = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    least = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if most is not None and least is not None and least > most:
        raise OptionError(f"The value of minOffsetPerTrigger({least}) is higher than the "
                          f"maxOffsetsPerTrigger({most}).")
    return SourceOptions(
        client=client, strategy=strategy, starting=starting, ending=ending,
        include_headers=parse_boolean(opts, "includeheaders", "includeHeaders", False),
        fail_on_data_loss=parse_boolean(opts, "failondataloss", "failOnDataLoss", True),
        max_offsets_per_trigger=most, min_offsets_per_trigger=least,
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", "maxTriggerDelay",
                                          DEFAULT_MAX_TRIGGER_DELAY_MS),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition",
                                            "maxRecordsPerPartition")
        or DEFAULT_MAX_RECORDS_PER_PARTITION,
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms",
                                  "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS)


def _strategy(opts: dict[str, str]) -> Strategy:
    given = [name for name in STRATEGIES if name in opts]
    if not given:
        raise OptionError("One of the following options must be specified for Kafka source: "
                          f"{', '.join(STRATEGIES)}. See the docs for more details.")
    if len(given) > 1:
        raise OptionError("Only one of the following options can be specified for Kafka "
                          f"source: {', '.join(STRATEGIES)}. See the docs for more details.")
    value = opts[given[0]]
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{value}'")
        return Strategy(topics=topics)
    if given[0] == "subscribepattern":
        if not value.strip():
            raise OptionError(f"Pattern to subscribe is empty as specified value for option "
                              f"'subscribePattern' is '{value}'")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"Invalid pattern '{value}' for option 'subscribePattern': "
                              f"{exc}") from None
        return Strategy(pattern=value.strip())
    return Strategy(assigned=_assignment(value))


def _assignment(value: str) -> tuple[tuple[str, int], ...]:
    if not value.strip().startswith("{"):
        raise OptionError(f"No topicpartitions to assign as specified value for option "
                          f"'assign' is '{value}'")
    try:
        parsed = json.loads(value)
        pairs = tuple((topic, p) for topic, parts in parsed.items() for p in parts
                      if isinstance(p, int) and not isinstance(p, bool))
        if sum(len(parts) for parts in parsed.values()) != len(pairs):
            raise TypeError
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {value}'
                          ) from None
    if not pairs:
        raise OptionError(f"No topicpartitions to assign as specified value for option "
                          f"'assign' is '{value}'")
    return pairs


def _offsets_option(opts: dict[str, str], key: str, default: str) -> str | TopicOffsets:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() in (EARLIEST, LATEST):
        return value.strip().lower()
    try:
        return parse_offsets(value)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _check_batch_bounds(starting: str | TopicOffsets, ending: str | TopicOffsets) -> None:
    if starting == LATEST:
        raise OptionError("starting offset can't be latest for batch queries on Kafka")
    if ending == EARLIEST:
        raise OptionError("ending offset can't be earliest for batch queries on Kafka")
    for bound, special, word, label in ((starting, LATEST_OFFSET, "latest", "startingOffsets"),
                                        (ending, EARLIEST_OFFSET, "earliest", "ending offset")):
        if isinstance(bound, dict):
            for (topic, partition), offset in bound.items():
                if offset == special:
                    raise OptionError(f"{label} for {topic}-{partition} can't be {word} for "
                                      f"batch queries on Kafka")


def parse_boolean(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"Option '{name}' must be true or false, got '{value}'")
    return value.strip().lower() == "true"


def _positive(opts: dict[str, str], key: str, name: str) -> int | None:
    value = opts.get(key)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f"Option '{name}' must be a positive integer, got '{value}'")
    return number


def _duration_ms(opts: dict[str, str], key: str, name: str, default: int) -> int:
    """Spark's time strings: a number with a unit (us, ms, s, m or min, h, d), or a bare
    number of milliseconds."""
    value = opts.get(key)
    if value is None:
        return default
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", value.strip().lower())
    unit = (match.group(2) or "ms") if match else None
    if match is None or unit not in _TIME_UNITS_MS:
        raise OptionError(f"Option '{name}' must be a time such as 50s, 100ms or 15m (units: "
                          f"us, ms, s, m or min, h, d), got '{value}'")
    return int(int(match.group(1)) * _TIME_UNITS_MS[unit])
