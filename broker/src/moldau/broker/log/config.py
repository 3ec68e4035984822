"""Per-topic log settings (Kafka's LogConfig): names, defaults and their broker-level synonyms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moldau.config import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    one_of,
    one_of_bool,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

T = ConfigType


def throttled_replicas(name: str, value: list[str]) -> None:
    """Kafka's ThrottledReplicaListValidator: `*` alone, or `partition:broker` entries."""
    if value == ["*"]:
        return
    for entry in value:
        partition, sep, broker = entry.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise ConfigError(
                f"Invalid value {','.join(value)} for configuration {name}: "
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")

# Topic config name -> (key definition, broker property that supplies its default).
# The broker property's *value* is the default; the key's own default applies only when
# the broker property is absent (e.g. derived hour/minute forms).
_TOPIC_KEYS: list[tuple[ConfigKey, str | None]] = [
    (ConfigKey("cleanup.policy", T.LIST, ["delete"], "delete and/or compact",
               one_of("delete", "compact")), "log.cleanup.policy"),
    (ConfigKey("compression.type", T.STRING, "producer", "Final compression of the topic",
               one_of(*COMPRESSION_TYPES)), "compression.type"),
    (ConfigKey("delete.retention.ms", T.LONG, 86400000, "Tombstone retention for compacted "
               "topics", at_least(0)), "log.cleaner.delete.retention.ms"),
    (ConfigKey("file.delete.delay.ms", T.LONG, 60000, "Delay before deleting a file",
               at_least(0)), "log.segment.delete.delay.ms"),
    (ConfigKey("flush.messages", T.LONG, LONG_MAX, "Force fsync after this many messages",
               at_least(1)), "log.flush.interval.messages"),
    (ConfigKey("flush.ms", T.LONG, LONG_MAX, "Force fsync after this much time",
               at_least(0)), "log.flush.interval.ms"),
    (ConfigKey("index.interval.bytes", T.INT, 4096, "Bytes between offset index entries",
               at_least(0)), "log.index.interval.bytes"),
    (ConfigKey("max.compaction.lag.ms", T.LONG, LONG_MAX, "Longest time a message stays "
               "uncompacted", at_least(1)), "log.cleaner.max.compaction.lag.ms"),
    (ConfigKey("max.message.bytes", T.INT, 1048588, "Largest record batch size allowed",
               at_least(0)), "message.max.bytes"),
    (ConfigKey("message.timestamp.after.max.ms", T.LONG, 3600000, "Largest allowed future "
               "timestamp distance", at_least(0)), "log.message.timestamp.after.max.ms"),
    (ConfigKey("message.timestamp.before.max.ms", T.LONG, LONG_MAX, "Largest allowed past "
               "timestamp distance", at_least(0)), "log.message.timestamp.before.max.ms"),
    (ConfigKey("message.timestamp.type", T.STRING, "CreateTime", "CreateTime or "
               "LogAppendTime", one_of(*TIMESTAMP_TYPES)), "log.message.timestamp.type"),
    (ConfigKey("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, "Dirty ratio that triggers "
               "cleaning", between(0, 1)), "log.cleaner.min.cleanable.ratio"),
    (ConfigKey("min.compaction.lag.ms", T.LONG, 0, "Shortest time a message stays "
               "uncompacted", at_least(0)), "log.cleaner.min.compaction.lag.ms"),
    (ConfigKey("min.insync.replicas", T.INT, 1, "Replicas that must acknowledge acks=all",
               at_least(1)), "min.insync.replicas"),
    (ConfigKey("preallocate", T.BOOLEAN, False, "Preallocate segment files"),
     "log.preallocate"),
    (ConfigKey("retention.bytes", T.LONG, -1, "Largest partition size before old segments "
               "are deleted; -1 for no limit"), "log.retention.bytes"),
    (ConfigKey("retention.ms", T.LONG, 604800000, "Longest time a segment is kept; -1 for no "
               "limit", at_least(-1)), "log.retention.ms"),
    (ConfigKey("segment.bytes", T.INT, 1073741824, "Segment file size",
               at_least(14)), "log.segment.bytes"),
    (ConfigKey("segment.index.bytes", T.INT, 10485760, "Offset index size",
               at_least(4)), "log.index.size.max.bytes"),
    (ConfigKey("segment.jitter.ms", T.LONG, 0, "Random jitter on segment.ms",
               at_least(0)), "log.roll.jitter.ms"),
    (ConfigKey("segment.ms", T.LONG, 604800000, "Time after which a segment is rolled",
               at_least(1)), "log.roll.ms"),
    (ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, "Allow out-of-sync "
               "replicas to become leader"), "unclean.leader.election.enable"),
    # The compression levels and tiered storage settings are kept and shown as Kafka does;
    # they take effect with recompression and tiered storage, which Moldau does not do yet.
    (ConfigKey("compression.gzip.level", T.INT, -1, "gzip level when the broker compresses "
               "(stored; the broker keeps producer batches as they are)", between(-1, 9)),
     "compression.gzip.level"),
    (ConfigKey("compression.lz4.level", T.INT, 9, "lz4 level when the broker compresses "
               "(stored; the broker keeps producer batches as they are)", between(1, 17)),
     "compression.lz4.level"),
    (ConfigKey("compression.zstd.level", T.INT, 3, "zstd level when the broker compresses "
               "(stored; the broker keeps producer batches as they are)", between(-131072, 22)),
     "compression.zstd.level"),
    (ConfigKey("follower.replication.throttled.replicas", T.LIST, [], "Replicas whose "
               "fetching is limited by follower.replication.throttled.rate on the follower: "
               "partition:broker entries or *", throttled_replicas), None),
    (ConfigKey("leader.replication.throttled.replicas", T.LIST, [], "Replicas whose "
               "serving is limited by leader.replication.throttled.rate on the leader: "
               "partition:broker entries or *", throttled_replicas), None),
    (ConfigKey("local.retention.bytes", T.LONG, -2, "Local retention size with tiered "
               "storage; -2 follows retention.bytes", at_least(-2)), "log.local.retention.bytes"),
    (ConfigKey("local.retention.ms", T.LONG, -2, "Local retention time with tiered storage; "
               "-2 follows retention.ms", at_least(-2)), "log.local.retention.ms"),
    (ConfigKey("remote.log.copy.disable", T.BOOLEAN, False, "Stop copying to tiered storage"),
     None),
    (ConfigKey("remote.log.delete.on.disable", T.BOOLEAN, False, "Delete remote data when "
               "tiered storage is disabled"), None),
    (ConfigKey("remote.storage.enable", T.BOOLEAN, False, "Tiered storage (not available: "
               "only false is accepted)", one_of_bool(False)), None),
]

TOPIC_CONFIG = ConfigDef(key for key, _ in _TOPIC_KEYS)
BROKER_SYNONYM: dict[str, str | None] = {key.name: prop for key, prop in _TOPIC_KEYS}
# Every broker property that can set a topic default, most specific first (Kafka's synonyms).
BROKER_SYNONYMS: dict[str, list[str]] = {
    name: [prop] if prop else [] for name, prop in BROKER_SYNONYM.items()}
BROKER_SYNONYMS["retention.ms"] += ["log.retention.minutes", "log.retention.hours"]
BROKER_SYNONYMS["segment.ms"] += ["log.roll.hours"]
BROKER_SYNONYMS["segment.jitter.ms"] += ["log.roll.jitter.hours"]


@dataclass(frozen=True)
class LogConfig:
    """Typed, complete settings of one topic's log. Built from broker defaults + overrides."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_after_max_ms: int = 3600000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604800000
    segment_bytes: int = 1073741824
    segment_index_bytes: int = 10485760
    segment_jitter_ms: int = 0
    segment_ms: int = 604800000
    unclean_leader_election_enable: bool = False
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> LogConfig:
        """Build from a complete mapping of topic config names to typed values."""
        fields: dict[str, Any] = {}
        for name, value in values.items():
            attr = name.replace(".", "_")
            fields[attr] = tuple(value) if isinstance(value, list) else value
        return cls(**fields)


def topic_defaults(broker_values: Mapping[str, Any]) -> dict[str, Any]:
    """Topic-level defaults taken from the broker's effective settings."""
    defaults: dict[str, Any] = {}
    for name, key in TOPIC_CONFIG.keys.items():
        prop = BROKER_SYNONYM[name]
        value = broker_values.get(prop) if prop else None
        defaults[name] = key.default if value is None else value
    return defaults


def effective_log_config(broker_values: Mapping[str, Any],
                         overrides: Mapping[str, Any]) -> LogConfig:
    values = topic_defaults(broker_values)
    values.update(overrides)
    return LogConfig.from_values(values)

