"""Broker settings: Kafka's `server.properties` names, types and defaults."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moldau.broker.log.config import (
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    TOPIC_CONFIG,
    LogConfig,
    effective_log_config,
)
from moldau.broker.security.settings import (
    AUTHORIZATION_KEYS,
    DEFAULT_PROTOCOL_MAP,
    SASL_PROTOCOLS,
    SECURITY_KEYS,
    SUPPORTED_MECHANISMS,
    TLS_PROTOCOLS,
    listener_value,
    parse_listener_overrides,
    parse_protocol_map,
    split_listener_overrides,
)
from moldau.config import (
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    kafka_broker_keys,
    one_of,
)
from moldau.properties import load_properties
from moldau.security.jaas import single_module

T = ConfigType
DEFAULT_LISTENERS = "PLAINTEXT://localhost:9092"
DEFAULT_LOG_DIRS = "data/broker"
# Strimzi's metrics port, so Kubernetes scrape configs written for Kafka find the broker.
DEFAULT_HTTP_LISTENER = "http://localhost:9404"

BROKER_CONFIG = ConfigDef([
    # Identity and roles.
    ConfigKey("node.id", T.INT, 1, "This node's id", at_least(0)),
    ConfigKey("process.roles", T.LIST, ["broker", "controller"], "broker, controller or both",
              one_of("broker", "controller")),
    ConfigKey("controller.quorum.voters", T.LIST, [], "Static voters, id@host:port"),
    ConfigKey("controller.listener.names", T.LIST, ["CONTROLLER"], "Controller listener names"),
    ConfigKey("broker.rack", T.STRING, None, "Rack of this broker"),
    # Network.
    ConfigKey("listeners", T.LIST, [DEFAULT_LISTENERS], "NAME://host:port to listen on"),
    ConfigKey("advertised.listeners", T.LIST, None, "Listeners given to clients; "
              "defaults to listeners"),
    ConfigKey("listener.security.protocol.map", T.LIST, DEFAULT_PROTOCOL_MAP,
              "Listener name to protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); "
              "controller listeners missing from the default map are PLAINTEXT"),
    ConfigKey("inter.broker.listener.name", T.STRING, None, "Listener for broker traffic"),
    ConfigKey("socket.request.max.bytes", T.INT, 104857600, "Largest request accepted",
              at_least(1)),
    ConfigKey("socket.send.buffer.bytes", T.INT, 102400, "SO_SNDBUF; -1 for the OS default"),
    ConfigKey("socket.receive.buffer.bytes", T.INT, 102400, "SO_RCVBUF; -1 for the OS default"),
    ConfigKey("queued.max.requests", T.INT, 500, "Requests queued before reading stops",
              at_least(1)),
    ConfigKey("max.connections.per.ip", T.INT, INT_MAX, "Connections allowed from one address",
              at_least(0)),
    ConfigKey("max.connections.per.ip.overrides", T.STRING, "", "host:count,..."),
    ConfigKey("max.connections", T.INT, INT_MAX, "Connections allowed in all", at_least(0)),
    ConfigKey("connections.max.idle.ms", T.LONG, 600000, "Idle connections are closed after "
              "this"),
    ConfigKey("num.network.threads", T.INT, 3, "Accepted for compatibility; one event loop",
              at_least(1)),
    ConfigKey("num.io.threads", T.INT, 8, "Threads for disk work", at_least(1)),
    ConfigKey("http.listener", T.STRING, DEFAULT_HTTP_LISTENER, "http://host:port serving "
              "/metrics (Prometheus), /livez and /readyz; empty disables it"),
    # Topics.
    ConfigKey("num.partitions", T.INT, 1, "Partitions of auto-created topics", at_least(1)),
    ConfigKey("default.replication.factor", T.INT, 1, "Replication of auto-created topics",
              at_least(1)),
    ConfigKey("auto.create.topics.enable", T.BOOLEAN, True, "Create topics on first use"),
    ConfigKey("delete.topic.enable", T.BOOLEAN, True, "Allow topic deletion"),
    ConfigKey("message.max.bytes", T.INT, 1048588, "Largest record batch", at_least(0)),
    ConfigKey("compression.type", T.STRING, "producer", "Final compression of topics",
              one_of(*COMPRESSION_TYPES)),
    ConfigKey("min.insync.replicas", T.INT, 1, "Replicas for acks=all", at_least(1)),
    ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, "Unclean leader election"),
    # Replication.
    ConfigKey("replica.lag.time.max.ms", T.LONG, 30000, "A follower that has not caught up "
              "for this long leaves the ISR", at_least(0)),
    ConfigKey("replica.fetch.wait.max.ms", T.INT, 500, "Longest wait of a follower's fetch",
              at_least(0)),
    ConfigKey("replica.fetch.min.bytes", T.INT, 1, "Bytes a follower's fetch waits for",
              at_least(1)),
    ConfigKey("replica.fetch.max.bytes", T.INT, 1048576, "Bytes per partition in a follower's "
              "fetch", at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", T.INT, 10485760, "Bytes in a follower's "
              "fetch response", at_least(0)),
    ConfigKey("replica.fetch.backoff.ms", T.INT, 1000, "Follower back-off after a fetch error",
              at_least(0)),
    ConfigKey("replica.socket.timeout.ms", T.INT, 30000, "Follower request timeout"),
    # Replication throttling (KIP-73), for the replicas topics name in
    # leader/follower.replication.throttled.replicas.
    ConfigKey("leader.replication.throttled.rate", T.LONG, LONG_MAX, "Bytes per second this "
              "broker serves to followers of throttled replicas", at_least(0)),
    ConfigKey("follower.replication.throttled.rate", T.LONG, LONG_MAX, "Bytes per second this "
              "broker fetches for throttled replicas it follows", at_least(0)),
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, LONG_MAX, "Bytes "
              "per second of moving replicas between log directories (stored; Moldau moves "
              "no replicas between log directories)", at_least(0)),
    ConfigKey("replication.quota.window.num", T.INT, 11, "Windows the replication rate is "
              "measured over", at_least(1)),
    ConfigKey("replication.quota.window.size.seconds", T.INT, 1, "Length of one replication "
              "rate window", at_least(1)),
    ConfigKey("num.replica.fetchers", T.INT, 1, "Fetcher connections per source broker",
              at_least(1)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", T.LONG, 5000, "High watermark "
              "checkpoint period", at_least(1)),
    ConfigKey("auto.leader.rebalance.enable", T.BOOLEAN, True, "Move leadership back to the "
              "preferred replica"),
    ConfigKey("leader.imbalance.check.interval.seconds", T.LONG, 300, "Preferred leader check "
              "period", at_least(1)),
    ConfigKey("leader.imbalance.per.broker.percentage", T.INT, 10, "Tolerated share of "
              "non-preferred leaders per broker", at_least(0)),
    # Controller quorum and broker lifecycle.
    ConfigKey("broker.heartbeat.interval.ms", T.INT, 2000, "Broker heartbeat period",
              at_least(1)),
    ConfigKey("broker.session.timeout.ms", T.INT, 9000, "A broker without heartbeats for "
              "this long is fenced", at_least(1)),
    ConfigKey("controller.quorum.election.timeout.ms", T.INT, 1000, "Raft election timeout",
              at_least(1)),
    ConfigKey("controller.quorum.fetch.timeout.ms", T.INT, 2000, "Raft leader fetch timeout",
              at_least(1)),
    ConfigKey("controller.quorum.election.backoff.max.ms", T.INT, 1000, "Raft election "
              "back-off", at_least(1)),
    ConfigKey("controller.quorum.request.timeout.ms", T.INT, 2000, "Raft request timeout",
              at_least(1)),
    ConfigKey("controller.quorum.append.linger.ms", T.INT, 25, "Metadata proposals wait this "
              "long to share one fsync", at_least(0)),
    ConfigKey("controlled.shutdown.enable", T.BOOLEAN, True, "Move leaderships away before "
              "stopping"),
    ConfigKey("metadata.log.max.record.bytes.between.snapshots", T.LONG, 20971520,
              "Metadata log bytes between snapshots", at_least(1)),
    # Log.
    ConfigKey("log.dirs", T.LIST, None, "Directories of the log data"),
    ConfigKey("log.dir", T.STRING, DEFAULT_LOG_DIRS, "Log directory, if log.dirs is unset"),
    ConfigKey("metadata.log.dir", T.STRING, None, "Directory of the metadata log; defaults "
              "to the first of log.dirs"),
    ConfigKey("log.segment.bytes", T.INT, 1073741824, "Segment size (Kafka 4: at least 1 MiB)",
              at_least(1048576)),
    ConfigKey("log.roll.ms", T.LONG, None, "Segment roll time; overrides log.roll.hours"),
    ConfigKey("log.roll.hours", T.INT, 168, "Segment roll time", at_least(1)),
    ConfigKey("log.roll.jitter.ms", T.LONG, None, "Roll jitter"),
    ConfigKey("log.roll.jitter.hours", T.INT, 0, "Roll jitter", at_least(0)),
    ConfigKey("log.retention.ms", T.LONG, None, "Retention; overrides minutes and hours"),
    ConfigKey("log.retention.minutes", T.INT, None, "Retention; overrides hours"),
    ConfigKey("log.retention.hours", T.INT, 168, "Retention time"),
    ConfigKey("log.retention.bytes", T.LONG, -1, "Retention size per partition"),
    ConfigKey("log.retention.check.interval.ms", T.LONG, 300000, "Retention check period",
              at_least(1)),
    ConfigKey("log.cleanup.policy", T.LIST, ["delete"], "delete and/or compact",
              one_of("delete", "compact")),
    ConfigKey("log.index.interval.bytes", T.INT, 4096, "Bytes between index entries",
              at_least(0)),
    ConfigKey("log.index.size.max.bytes", T.INT, 10485760, "Index size", at_least(4)),
    ConfigKey("log.flush.interval.messages", T.LONG, LONG_MAX, "fsync after messages",
              at_least(1)),
    ConfigKey("log.flush.interval.ms", T.LONG, None, "fsync after ms"),
    ConfigKey("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, "Flush check period"),
    ConfigKey("log.preallocate", T.BOOLEAN, False, "Preallocate segments"),
    ConfigKey("log.segment.delete.delay.ms", T.LONG, 60000, "Delay before file deletion",
              at_least(0)),
    ConfigKey("log.message.timestamp.type", T.STRING, "CreateTime", "Timestamp type",
              one_of(*TIMESTAMP_TYPES)),
    ConfigKey("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, "Past timestamp limit",
              at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", T.LONG, 3600000, "Future timestamp limit",
              at_least(0)),
    ConfigKey("log.cleaner.delete.retention.ms", T.LONG, 86400000, "Tombstone retention"),
    ConfigKey("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, "Dirty ratio",
              between(0, 1)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", T.LONG, 0, "Compaction lag"),
    ConfigKey("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, "Compaction lag"),
    ConfigKey("log.cleaner.enable", T.BOOLEAN, True, "Run the log cleaner (compaction)"),
    ConfigKey("log.cleaner.threads", T.INT, 1, "Log cleaner threads", at_least(0)),
    ConfigKey("log.cleaner.dedupe.buffer.size", T.LONG, 134217728, "Offset map memory, all "
              "cleaner threads together", at_least(1)),
    ConfigKey("log.cleaner.io.buffer.size", T.INT, 524288, "Cleaner read/write buffer "
              "memory", at_least(0)),
    ConfigKey("log.cleaner.backoff.ms", T.LONG, 15000, "Cleaner sleep when no log needs "
              "cleaning", at_least(0)),
    ConfigKey("log.local.retention.bytes", T.LONG, -2, "Local retention size with tiered "
              "storage; -2 follows log.retention.bytes", at_least(-2)),
    ConfigKey("log.local.retention.ms", T.LONG, -2, "Local retention time with tiered "
              "storage; -2 follows log.retention.ms", at_least(-2)),
    ConfigKey("compression.gzip.level", T.INT, -1, "gzip level when the broker compresses",
              between(-1, 9)),
    ConfigKey("compression.lz4.level", T.INT, 9, "lz4 level when the broker compresses",
              between(1, 17)),
    ConfigKey("compression.zstd.level", T.INT, 3, "zstd level when the broker compresses",
              between(-131072, 22)),
    ConfigKey("num.recovery.threads.per.data.dir", T.INT, 2, "Recovery threads", at_least(1)),
    # Consumer groups.
    ConfigKey("group.initial.rebalance.delay.ms", T.INT, 3000, "Wait for more members before "
              "the first rebalance of an empty group", at_least(0)),
    ConfigKey("group.min.session.timeout.ms", T.INT, 6000, "Smallest session timeout allowed",
              at_least(0)),
    ConfigKey("group.max.session.timeout.ms", T.INT, 1800000, "Largest session timeout "
              "allowed", at_least(0)),
    ConfigKey("group.max.size", T.INT, INT_MAX, "Members allowed in one group", at_least(1)),
    ConfigKey("offsets.topic.num.partitions", T.INT, 50, "Partitions of __consumer_offsets",
              at_least(1)),
    ConfigKey("offsets.topic.replication.factor", T.SHORT, 3, "Replication of "
              "__consumer_offsets (capped by the brokers available)", at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", T.INT, 104857600, "Segment size of "
              "__consumer_offsets", at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", T.INT, 5000, "An offset commit waits this long "
              "for the offsets topic's replicas", at_least(1)),
    ConfigKey("offsets.retention.minutes", T.INT, 10080, "Offsets of empty groups are kept "
              "this long", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", T.LONG, 600000, "Offset expiry check "
              "period", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", T.INT, 4096, "Largest metadata string of a "
              "committed offset"),
    # Producer ids.
    ConfigKey("producer.id.expiration.ms", T.INT, 86400000, "Idle producer state expiry",
              at_least(1)),
    ConfigKey("transactional.id.expiration.ms", T.INT, 604800000, "Transactional id expiry",
              at_least(1)),
    # The transaction coordinator.
    ConfigKey("transaction.state.log.num.partitions", T.INT, 50, "Partitions of "
              "__transaction_state", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", T.SHORT, 3, "Replication of "
              "__transaction_state (capped by the brokers available)", at_least(1)),
    ConfigKey("transaction.state.log.min.isr", T.INT, 2, "min.insync.replicas of "
              "__transaction_state (capped by its replication factor)", at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", T.INT, 104857600, "Segment size of "
              "__transaction_state", at_least(1)),
    ConfigKey("transaction.max.timeout.ms", T.INT, 900000, "Largest transaction.timeout.ms "
              "a producer may ask for", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000,
              "How often transactions past their timeout are looked for and aborted",
              at_least(1)),
    ConfigKey("transaction.partition.verification.enable", T.BOOLEAN, True,
              "Before the first transactional write of a producer to a partition, the leader "
              "checks with the transaction coordinator that the partition is in the "
              "producer's ongoing transaction (KIP-890)"),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000,
              "How often transactional ids idle past transactional.id.expiration.ms are "
              "removed", at_least(1)),
    *SECURITY_KEYS,
    *AUTHORIZATION_KEYS,
])

def split_known(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Moldau's own settings, and those only Kafka defines (accepted, not applied yet).

    A key neither defines is an error, naming a close known key when there is one."""
    own: dict[str, Any] = {}
    kafka_only: dict[str, str] = {}
    for name in sorted(raw):
        if name in BROKER_CONFIG:
            own[name] = raw[name]
        elif name in kafka_broker_keys():
            kafka_only[name] = str(raw[name])
        else:
            known = sorted(kafka_broker_keys() | set(BROKER_CONFIG.keys))
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"Unknown broker configuration {name!r}{hint}")
    return own, kafka_only


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_endpoints(setting: str, entries: list[str]) -> list[Endpoint]:
    endpoints = []
    for entry in entries:
        match = _LISTENER.match(entry)
        if not match or not 0 <= int(match["port"]) <= 65535:
            raise ConfigError(f"Invalid value {entry} for configuration {setting}: "
                              "expected NAME://host:port")
        host = match["host"].strip("[]")
        endpoints.append(Endpoint(match["name"].upper(), host, int(match["port"])))
    names = [endpoint.listener for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value for configuration {setting}: "
                          "each listener name may appear once")
    return endpoints


_HTTP_LISTENER = re.compile(r"^http://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)/?$")


def parse_http_listener(text: str) -> tuple[str, int] | None:
    """http.listener: `http://host:port` (host may be empty for every interface), or
    empty for none."""
    text = text.strip()
    if not text:
        return None
    match = _HTTP_LISTENER.match(text)
    if not match or not 0 <= int(match["port"]) <= 65535:
        raise ConfigError(f"Invalid value {text} for configuration http.listener: expected "
                          "http://host:port, or empty to disable it")
    return match["host"].strip("[]"), int(match["port"])


def parse_voters(entries: list[str]) -> dict[int, tuple[str, int] | None]:
    """controller.quorum.voters: `id@host:port,...`."""
    voters: dict[int, tuple[str, int] | None] = {}
    for entry in entries:
        node, at, address = entry.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.isdigit() or not port.isdigit() or not host:
            raise ConfigError(f"Invalid value {entry} for configuration "
                              "controller.quorum.voters: expected id@host:port")
        if int(node) in voters:
            raise ConfigError(f"Invalid value {entry} for configuration "
                              f"controller.quorum.voters: voter {node} appears twice")
        voters[int(node)] = (host.strip("[]"), int(port))
    return voters


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`--override key=value` arguments as a mapping."""
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"Invalid override {item!r}: expected key=value")
        overrides[key.strip()] = value
    return overrides


def _derive_times(v: dict[str, Any]) -> None:
    """Kafka derives the *.ms forms from hours/minutes when they are not set."""
    if v["log.retention.ms"] is None:
        minutes = v["log.retention.minutes"]
        v["log.retention.ms"] = (minutes * 60000 if minutes is not None
                                 else v["log.retention.hours"] * 3600000)
    if v["log.roll.ms"] is None:
        v["log.roll.ms"] = v["log.roll.hours"] * 3600000
    if v["log.roll.jitter.ms"] is None:
        v["log.roll.jitter.ms"] = v["log.roll.jitter.hours"] * 3600000
    if v["log.flush.interval.ms"] is None:
        v["log.flush.interval.ms"] = LONG_MAX


class BrokerConfig:
    """The broker's effective settings. `values` holds every key, typed."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        raw, per_listener = split_listener_overrides(raw)
        self.listener_overrides = parse_listener_overrides(per_listener)
        own, self.not_applied = split_known(raw)
        parsed = BROKER_CONFIG.parse(own, what="broker configuration")
        self.overrides = parsed
        # Dynamic layers (metadata log): the cluster-wide default and this broker's own.
        self.dynamic_default: dict[str, Any] = {}
        self.dynamic_broker: dict[str, Any] = {}
        self.values = BROKER_CONFIG.with_defaults(parsed)
        self._derive()

    @classmethod
    def load(cls, path: str | None, overrides: Mapping[str, str]) -> BrokerConfig:
        raw: dict[str, Any] = load_properties(path) if path else {}
        raw.update(overrides)
        return cls(raw)

    def _derive(self) -> None:
        v = self.values
        self.node_id: int = v["node.id"]
        self.listeners = parse_endpoints("listeners", v["listeners"])
        advertised = v["advertised.listeners"]
        self.advertised_listeners = (parse_endpoints("advertised.listeners", advertised)
                                     if advertised else self.listeners)
        listener_names = {endpoint.listener for endpoint in self.listeners}
        for endpoint in self.advertised_listeners:
            if endpoint.listener not in listener_names:
                raise ConfigError(f"Invalid value for configuration advertised.listeners: "
                                  f"{endpoint.listener} is not in listeners")
        self._derive_roles()
        self._derive_security()
        self.log_dirs: list[str] = v["log.dirs"] or [v["log.dir"]]
        if not self.log_dirs:
            raise ConfigError("Invalid value for configuration log.dirs: no directory given")
        self.metadata_log_dir: str = v["metadata.log.dir"] or self.log_dirs[0]
        # Every directory the node writes to; all are locked before any is touched.
        self.data_dirs = list(dict.fromkeys(
            os.path.abspath(d) for d in [*self.log_dirs, self.metadata_log_dir]))
        _derive_times(v)
        self.per_ip_overrides = self._parse_ip_overrides(v["max.connections.per.ip.overrides"])
        self.http_listener = parse_http_listener(v["http.listener"] or "")

    def _derive_security(self) -> None:
        """Each listener's security protocol and the inter-broker listener, checked as Kafka
        checks them."""
        v = self.values
        protocols = parse_protocol_map(v["listener.security.protocol.map"])
        explicit_map = "listener.security.protocol.map" in self.overrides
        controller_names = {name.upper() for name in v["controller.listener.names"]}
        self.protocols: dict[str, str] = {}
        for endpoint in self.listeners:
            protocol = protocols.get(endpoint.listener)
            if protocol is None and not explicit_map and endpoint.listener in controller_names:
                protocol = "PLAINTEXT"  # Kafka's KRaft default for an unmapped controller
            if protocol is None:
                raise ConfigError(f"Invalid value {endpoint} for configuration listeners: "
                                  f"No security protocol defined for listener "
                                  f"{endpoint.listener} in listener.security.protocol.map")
            self.protocols[endpoint.listener] = protocol
        self.inter_broker_listener = self._inter_broker_listener(controller_names)
        # The controllers' listener, as this node reaches it (a broker-only node has no
        # controller listener of its own: the first of controller.listener.names).
        self.controller_listener_name = (
            self.controller_listener.listener if self.controller_listener is not None
            else str(v["controller.listener.names"][0]).upper())
        self.controller_protocol = protocols.get(self.controller_listener_name, "PLAINTEXT")
        if self.controller_protocol in SASL_PROTOCOLS:
            raise ConfigError(f"Invalid value {self.controller_protocol} for the controller "
                              f"listener {self.controller_listener_name} in configuration "
                              "listener.security.protocol.map: controller listeners are "
                              "PLAINTEXT or SSL (SASL there is not supported yet)")
        if self.controller_protocol in TLS_PROTOCOLS and self.controller_listener is None:
            self._check_store_type(self.controller_listener_name, "truststore")
        for endpoint in self.listeners:
            if self.protocols[endpoint.listener] in TLS_PROTOCOLS:
                self._check_keystore(endpoint.listener)
            if self.protocols[endpoint.listener] in SASL_PROTOCOLS:
                self._check_mechanisms(endpoint.listener)

    def _check_store_type(self, listener: str, store: str) -> None:
        key = f"ssl.{store}.type"
        if store == "truststore" and not self.listener_setting(listener,
                                                               "ssl.truststore.location"):
            return  # no truststore file: its type does not matter
        kind = str(self.listener_setting(listener, key)).upper()
        if kind not in ("PKCS12", "PEM"):
            raise ConfigError(f"Invalid value {kind} for configuration "
                              f"{self.setting_name(listener, key)}: Moldau reads PKCS12 "
                              "and PEM stores")

    def _check_keystore(self, listener: str) -> None:
        """A TLS listener needs a keystore Moldau can read; its contents are checked when
        the listener starts."""
        for store in ("keystore", "truststore"):
            self._check_store_type(listener, store)
        if not (self.listener_setting(listener, "ssl.keystore.location")
                or self.listener_setting(listener, "ssl.keystore.certificate.chain")):
            raise ConfigError(f"Missing configuration listener.name.{listener.lower()}."
                              "ssl.keystore.location (or ssl.keystore.location, or the PEM "
                              "ssl.keystore.certificate.chain and ssl.keystore.key): TLS on "
                              f"listener {listener} needs a keystore")

    def _inter_broker_listener(self, controller_names: set[str]) -> str:
        """inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol, else (neither set) the first broker listener."""
        v = self.values
        named = v["inter.broker.listener.name"]
        by_protocol = "security.inter.broker.protocol" in self.overrides
        if named and by_protocol:
            raise ConfigError("Invalid value for configuration inter.broker.listener.name: "
                              "Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set")
        listener = named.upper() if named else (
            v["security.inter.broker.protocol"] if by_protocol else None)
        if listener is None:
            return (self.broker_listeners or self.listeners)[0].listener
        key = "inter.broker.listener.name" if named else "security.inter.broker.protocol"
        if self.is_broker and listener not in {e.listener for e in self.advertised_listeners}:
            raise ConfigError(f"Invalid value {listener} for configuration {key}: "
                              f"{listener} must be a listener name defined in "
                              "advertised.listeners")
        if listener in controller_names:
            raise ConfigError(f"Invalid value {listener} for configuration {key}: the "
                              "inter-broker listener cannot be a controller listener")
        return listener

    def _check_mechanisms(self, listener: str) -> None:
        mechanisms = self.listener_setting(listener, "sasl.enabled.mechanisms")
        key = self.setting_name(listener, "sasl.enabled.mechanisms")
        for mechanism in mechanisms:
            if mechanism not in SUPPORTED_MECHANISMS:
                raise ConfigError(f"Invalid value {mechanism} for configuration {key}: "
                                  f"the SASL mechanisms supported are "
                                  f"{', '.join(SUPPORTED_MECHANISMS)}")
        if "PLAIN" in mechanisms:
            jaas = self.jaas_config(listener, "PLAIN")
            if jaas is None:
                raise ConfigError(f"Missing configuration listener.name.{listener.lower()}."
                                  "plain.sasl.jaas.config (or sasl.jaas.config): PLAIN on "
                                  f"listener {listener} needs its users")
            single_module(jaas, "sasl.jaas.config")

    def listener_setting(self, listener: str, key: str) -> Any:
        """A security setting for one listener: `listener.name.<l>.<key>`, else `<key>`."""
        return listener_value(self.values, self.listener_overrides, listener, key)

    def setting_name(self, listener: str, key: str) -> str:
        """The key a listener's value of `key` came from, for error messages."""
        if key in self.listener_overrides.get(listener, {}):
            return f"listener.name.{listener.lower()}.{key}"
        return key

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """The JAAS config of a mechanism on a listener, as Kafka looks it up."""
        return (self.listener_overrides.get(listener, {}).get(
            f"{mechanism.lower()}.sasl.jaas.config")
            or self.listener_setting(listener, "sasl.jaas.config"))

    def protocol_of(self, listener: str) -> str:
        return self.protocols.get(listener, "PLAINTEXT")

    def _derive_roles(self) -> None:
        """process.roles, controller.quorum.voters and the controller listener, checked as
        Kafka checks them. With no voters configured a combined node is the single voter
        of its own quorum (the embedded default) and needs no controller listener."""
        v = self.values
        self.roles = frozenset(v["process.roles"])
        self.is_broker = "broker" in self.roles
        self.is_controller = "controller" in self.roles
        controller_names = {name.upper() for name in v["controller.listener.names"]}
        self.voters = parse_voters(v["controller.quorum.voters"])
        self.controller_listener: Endpoint | None = None
        for endpoint in self.listeners:
            if endpoint.listener in controller_names:
                self.controller_listener = endpoint
        self.broker_listeners = [endpoint for endpoint in self.listeners
                                 if endpoint.listener not in controller_names]
        self.advertised_listeners = [endpoint for endpoint in self.advertised_listeners
                                     if endpoint.listener not in controller_names]
        voters_text = ",".join(v["controller.quorum.voters"])
        if not self.voters:
            if self.roles != {"broker", "controller"}:
                raise ConfigError("Missing configuration controller.quorum.voters: a node "
                                  f"with process.roles={','.join(sorted(self.roles))} must "
                                  "know the controller quorum")
            self.voters = {self.node_id: None}
        elif self.is_controller:
            if self.node_id not in self.voters:
                raise ConfigError(f"Invalid value {voters_text} for configuration "
                                  f"controller.quorum.voters: node.id {self.node_id} has the "
                                  "controller role but is not one of the voters")
            if self.controller_listener is None:
                raise ConfigError("Invalid value for configuration listeners: a controller "
                                  "needs a listener named in controller.listener.names ("
                                  f"{','.join(sorted(controller_names))})")
        elif self.node_id in self.voters:
            raise ConfigError(f"Invalid value {voters_text} for configuration "
                              f"controller.quorum.voters: node.id {self.node_id} is a voter "
                              "but process.roles does not include controller")
        if self.is_broker and not self.broker_listeners:
            raise ConfigError("Invalid value for configuration listeners: a broker needs a "
                              "listener that is not a controller listener")
        if not self.is_broker and self.broker_listeners:
            raise ConfigError("Invalid value for configuration listeners: a controller-only "
                              "node must not have broker listeners")

    @staticmethod
    def _parse_ip_overrides(text: str) -> dict[str, int]:
        overrides: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            host, _, count = item.rpartition(":")
            if not host or not count.isdigit():
                raise ConfigError(f"Invalid value {item} for configuration "
                                  "max.connections.per.ip.overrides: expected host:count")
            overrides[host] = int(count)
        return overrides

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def set_dynamic(self, default: Mapping[str, Any], broker: Mapping[str, Any]) -> None:
        """Layer dynamic settings (parsed) over server.properties, key by key as Kafka
        does: this broker's own, then the cluster default, then the file, then Kafka's
        default; the *.ms forms are derived afterwards, so a dynamic log.retention.hours
        still loses to a log.retention.ms set anywhere."""
        self.dynamic_default = dict(default)
        self.dynamic_broker = dict(broker)
        values = BROKER_CONFIG.with_defaults({**self.overrides, **default, **broker})
        _derive_times(values)
        self.values = values

    def log_config(self, topic_overrides: Mapping[str, Any]) -> LogConfig:
        return effective_log_config(self.values, topic_overrides)

    def topic_log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's effective log config from its overrides as stored (strings)."""
        return self.log_config({name: TOPIC_CONFIG[name].parse(value)
                                for name, value in overrides.items()})

    def advertised_for(self, listener: str) -> Endpoint:
        for endpoint in self.advertised_listeners:
            if endpoint.listener == listener:
                return endpoint
        return self.advertised_listeners[0]
