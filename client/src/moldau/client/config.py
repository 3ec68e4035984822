"""Client settings with Kafka's names, types and defaults, parsed with moldau.config.

Settings are given as a mapping with Kafka's dotted names (`{"linger.ms": 10}`), or as
keyword arguments with underscores (`linger_ms=10`); both may be combined. Unknown names
and invalid values raise `ConfigError` naming the setting.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from moldau.client.security import ClientSecurity
from moldau.config import (
    INT_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    one_of,
)

B, S, INT, L, LIST, C = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT,
                         ConfigType.LONG, ConfigType.LIST, ConfigType.CLASS)
P = ConfigType.PASSWORD

# TLS and SASL, with Kafka's client names (and librdkafka's ssl.ca.location,
# sasl.username and sasl.password, which many users know).
SECURITY_KEYS: list[ConfigKey] = [
    ConfigKey("ssl.ca.location", S, None, "PEM file of the CAs to trust (librdkafka's name)"),
    ConfigKey("ssl.truststore.location", S, None, "truststore file"),
    ConfigKey("ssl.truststore.type", S, "JKS", "PEM or PKCS12 (JKS is not read)"),
    ConfigKey("ssl.truststore.password", P, None, "truststore password", sensitive=True),
    ConfigKey("ssl.truststore.certificates", P, None, "trusted PEM certificates, inline",
              sensitive=True),
    ConfigKey("ssl.keystore.location", S, None, "keystore with this client's certificate"),
    ConfigKey("ssl.keystore.type", S, "JKS", "PEM or PKCS12 (JKS is not read)"),
    ConfigKey("ssl.keystore.password", P, None, "keystore password", sensitive=True),
    ConfigKey("ssl.key.password", P, None, "private key password", sensitive=True),
    ConfigKey("ssl.keystore.certificate.chain", P, None, "PEM certificate chain, inline",
              sensitive=True),
    ConfigKey("ssl.keystore.key", P, None, "PEM private key, inline", sensitive=True),
    ConfigKey("ssl.endpoint.identification.algorithm", S, "https",
              "https checks the broker's host name; empty does not"),
    ConfigKey("ssl.enabled.protocols", LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions",
              one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.protocol", S, "TLSv1.3", "accepted; ssl.enabled.protocols decides"),
    ConfigKey("ssl.cipher.suites", LIST, [], "OpenSSL cipher list for TLSv1.2"),
    ConfigKey("sasl.mechanism", S, "GSSAPI", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    ConfigKey("sasl.jaas.config", P, None, "login module with username and password",
              sensitive=True),
    ConfigKey("sasl.username", S, None, "SASL user (instead of sasl.jaas.config)"),
    ConfigKey("sasl.password", P, None, "SASL password", sensitive=True),
]

__all__ = ["ADMIN_CONFIG", "COMMON_KEYS", "CONSUMER_CONFIG", "PRODUCER_CONFIG", "ConfigError",
           "parse_config"]

COMMON_KEYS: list[ConfigKey] = [
    ConfigKey("bootstrap.servers", LIST, None,
              "host:port pairs used to discover the cluster; one reachable broker suffices"),
    ConfigKey("client.id", S, "", "a name sent with every request, for the broker's logs"),
    ConfigKey("request.timeout.ms", INT, 30000,
              "how long to wait for a response before disconnecting and failing the request",
              at_least(0)),
    ConfigKey("max.in.flight.requests.per.connection", INT, 5,
              "unanswered requests allowed on one connection", at_least(1)),
    ConfigKey("reconnect.backoff.ms", L, 50, "first wait before reconnecting to a broker",
              at_least(0)),
    ConfigKey("reconnect.backoff.max.ms", L, 1000,
              "the reconnect wait doubles after each failure up to this", at_least(0)),
    ConfigKey("retry.backoff.ms", L, 100, "wait before retrying a failed request",
              at_least(0)),
    ConfigKey("retry.backoff.max.ms", L, 1000,
              "the retry wait grows exponentially up to this", at_least(0)),
    ConfigKey("metadata.max.age.ms", L, 300000,
              "refresh cluster metadata at least this often", at_least(0)),
    ConfigKey("socket.connection.setup.timeout.ms", L, 10000,
              "give up on a connection attempt after this long", at_least(0)),
    ConfigKey("send.buffer.bytes", INT, 131072, "SO_SNDBUF; -1 keeps the OS default",
              at_least(-1)),
    ConfigKey("receive.buffer.bytes", INT, 65536, "SO_RCVBUF; -1 keeps the OS default",
              at_least(-1)),
    ConfigKey("security.protocol", S, "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or "
              "SASL_SSL", one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL",
                                 case_sensitive=False)),
    *SECURITY_KEYS,
]

PRODUCER_KEYS: list[ConfigKey] = [
    ConfigKey("acks", S, "all", "acknowledgements required: all (-1), 1 or 0",
              one_of("all", "-1", "0", "1", case_sensitive=False)),
    ConfigKey("linger.ms", L, 5, "wait this long for more records before sending a batch",
              at_least(0)),
    ConfigKey("batch.size", INT, 16384, "bytes of records per partition batch", at_least(0)),
    ConfigKey("buffer.memory", L, 33554432, "total bytes buffered for sending", at_least(0)),
    ConfigKey("max.block.ms", L, 60000,
              "how long send() may wait for metadata or buffer memory", at_least(0)),
    ConfigKey("delivery.timeout.ms", INT, 120000,
              "upper bound on the time from send() to success or failure", at_least(0)),
    ConfigKey("enable.idempotence", B, True,
              "producer ids and sequence numbers: no duplicates, order kept on retries"),
    ConfigKey("compression.type", S, "none", "codec for record batches",
              one_of("none", "gzip", "snappy", "lz4", "zstd")),
    ConfigKey("compression.gzip.level", INT, -1, "gzip level 1-9 (-1: the codec default)",
              between(-1, 9)),
    ConfigKey("compression.zstd.level", INT, 3, "zstd level", between(-131072, 22)),
    ConfigKey("max.request.size", INT, 1048576,
              "largest Produce request, and so the largest record", at_least(0)),
    ConfigKey("retries", INT, INT_MAX, "retries of a failed batch within delivery.timeout.ms",
              at_least(0)),
    ConfigKey("partitioner.class", C, None,
              "a callable(topic, key_bytes, partition_count) -> partition, or None"),
    ConfigKey("partitioner.ignore.keys", B, False,
              "place keyed records like keyless ones (sticky)"),
    ConfigKey("metadata.max.idle.ms", L, 300000,
              "forget a topic's metadata when nothing was sent to it for this long",
              at_least(5000)),
    ConfigKey("transactional.id", S, None,
              "enables transactions (and requires idempotence); a second producer with the "
              "same id fences this one"),
    ConfigKey("transaction.timeout.ms", INT, 60000,
              "the coordinator aborts a transaction left open this long", at_least(1)),
]

CONSUMER_KEYS: list[ConfigKey] = [
    ConfigKey("group.id", S, None,
              "the consumer group; without one, subscribe() and commits are unavailable"),
    ConfigKey("group.instance.id", S, None,
              "a stable name for static membership: restarts within session.timeout.ms do "
              "not rebalance"),
    ConfigKey("group.protocol", S, "classic",
              "the group protocol; only classic (JoinGroup/SyncGroup) is implemented",
              one_of("classic", case_sensitive=False)),
    ConfigKey("session.timeout.ms", INT, 45000,
              "the coordinator removes a member it has not heard from for this long",
              at_least(1)),
    ConfigKey("heartbeat.interval.ms", INT, 3000, "time between heartbeats", at_least(1)),
    ConfigKey("max.poll.interval.ms", INT, 300000,
              "leave the group when poll() is not called for this long", at_least(1)),
    ConfigKey("partition.assignment.strategy", LIST, ["range", "cooperative-sticky"],
              "assignors in order of preference: range, roundrobin, sticky, "
              "cooperative-sticky (or Kafka's class names)"),
    ConfigKey("enable.auto.commit", B, True,
              "commit the positions of returned records in the background"),
    ConfigKey("auto.commit.interval.ms", INT, 5000, "how often to auto-commit", at_least(0)),
    ConfigKey("auto.offset.reset", S, "latest",
              "where to start without a valid committed offset: earliest, latest or none",
              one_of("earliest", "latest", "none", case_sensitive=False)),
    ConfigKey("fetch.min.bytes", INT, 1, "the broker waits for this much data",
              at_least(0)),
    ConfigKey("fetch.max.wait.ms", INT, 500,
              "longest the broker waits to gather fetch.min.bytes", at_least(0)),
    ConfigKey("fetch.max.bytes", INT, 52428800, "most data one fetch response returns",
              at_least(0)),
    ConfigKey("max.partition.fetch.bytes", INT, 1048576,
              "most data per partition in one fetch (a larger first batch still comes back)",
              at_least(0)),
    ConfigKey("max.poll.records", INT, 500, "most records one poll() returns", at_least(1)),
    ConfigKey("isolation.level", S, "read_uncommitted",
              "read_committed hides records of open and aborted transactions",
              one_of("read_uncommitted", "read_committed", case_sensitive=False)),
    ConfigKey("check.crcs", B, True, "verify the CRC32C of fetched batches"),
    ConfigKey("client.rack", S, "", "the consumer's rack, sent with fetches"),
    ConfigKey("exclude.internal.topics", B, True,
              "pattern subscriptions leave out internal topics"),
    ConfigKey("allow.auto.create.topics", B, True,
              "subscribing to a missing topic creates it if the broker allows"),
    ConfigKey("default.api.timeout.ms", INT, 60000,
              "timeout of blocking calls that take none (commit, position, committed)",
              at_least(0)),
    ConfigKey("internal.leave.group.on.close", B, True,
              "dynamic members send LeaveGroup on close"),
]

ADMIN_KEYS: list[ConfigKey] = [
    ConfigKey("default.api.timeout.ms", INT, 60000,
              "upper bound of an admin call, retries included", at_least(0)),
]

PRODUCER_CONFIG = ConfigDef([*COMMON_KEYS, *PRODUCER_KEYS])
CONSUMER_CONFIG = ConfigDef([*COMMON_KEYS, *CONSUMER_KEYS])
ADMIN_CONFIG = ConfigDef([*COMMON_KEYS, *ADMIN_KEYS])

_client_ids = itertools.count(1)


def parse_config(definition: ConfigDef, config: Mapping[str, Any] | None,
                 overrides: Mapping[str, Any], *, what: str, kind: str) -> dict[str, Any]:
    """Merge a dotted-name mapping with underscore keyword overrides, parse, fill defaults."""
    raw: dict[str, Any] = dict(config or {})
    for name, value in overrides.items():
        raw[name.replace("_", ".")] = value
    parsed = definition.with_defaults(definition.parse(raw, what=what))
    servers = parsed["bootstrap.servers"]
    if not servers:
        raise ConfigError("Missing required configuration \"bootstrap.servers\" which has no "
                          "default value.")
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"Invalid url in bootstrap.servers: {server}")
    if not parsed["client.id"]:
        parsed["client.id"] = f"moldau-{kind}-{next(_client_ids)}"
    if parsed["reconnect.backoff.max.ms"] < parsed["reconnect.backoff.ms"]:
        parsed["reconnect.backoff.max.ms"] = parsed["reconnect.backoff.ms"]
    if parsed["retry.backoff.max.ms"] < parsed["retry.backoff.ms"]:
        parsed["retry.backoff.max.ms"] = parsed["retry.backoff.ms"]
    return parsed


def client_security(config: Mapping[str, Any]) -> ClientSecurity:
    """The TLS and SASL settings of a parsed client config, checked once."""

    def setting(key: str) -> Any:
        if key == "ssl.truststore.location" and not config.get(key):
            return config.get("ssl.ca.location")
        if key == "ssl.truststore.type" and not config.get("ssl.truststore.location"):
            return "PEM"
        return config.get(key)

    return ClientSecurity.from_settings(config["security.protocol"], setting, lambda key: key,
                                        mechanism=config["sasl.mechanism"],
                                        jaas=config["sasl.jaas.config"])


def parse_producer_config(config: Mapping[str, Any] | None,
                          overrides: Mapping[str, Any]) -> dict[str, Any]:
    explicit = {name.replace("_", ".") for name in overrides} | set(config or {})
    parsed = parse_config(PRODUCER_CONFIG, config, overrides, what="producer configuration",
                          kind="producer")
    acks = str(parsed["acks"]).lower()
    parsed["acks"] = -1 if acks in ("all", "-1") else int(acks)
    if parsed["transactional.id"] == "":
        parsed["transactional.id"] = None
    # As in Kafka 3.0+, idempotence is on by default but quietly off when the user asks for
    # settings it cannot work with; asking for both explicitly is an error.
    conflict = None
    if parsed["acks"] != -1:
        conflict = "acks must be set to 'all'"
    elif parsed["max.in.flight.requests.per.connection"] > 5:
        conflict = "max.in.flight.requests.per.connection must be at most 5"
    elif parsed["retries"] == 0:
        conflict = "retries must be greater than 0"
    if conflict and parsed["enable.idempotence"]:
        if "enable.idempotence" in explicit:
            raise ConfigError(f"Must set enable.idempotence to false or fix the conflict: "
                              f"{conflict} to use the idempotent producer.")
        parsed["enable.idempotence"] = False
    if parsed["transactional.id"] is not None and not parsed["enable.idempotence"]:
        raise ConfigError("Cannot set a transactional.id without also enabling idempotence.")
    minimum = parsed["linger.ms"] + parsed["request.timeout.ms"]
    if parsed["delivery.timeout.ms"] < minimum:
        if "delivery.timeout.ms" in explicit:
            raise ConfigError(f"delivery.timeout.ms should be equal to or larger than "
                              f"linger.ms + request.timeout.ms ({minimum})")
        parsed["delivery.timeout.ms"] = minimum
    return parsed


def parse_admin_config(config: Mapping[str, Any] | None,
                       overrides: Mapping[str, Any]) -> dict[str, Any]:
    return parse_config(ADMIN_CONFIG, config, overrides, what="admin configuration",
                        kind="admin")


def parse_consumer_config(config: Mapping[str, Any] | None,
                          overrides: Mapping[str, Any]) -> dict[str, Any]:
    parsed = parse_config(CONSUMER_CONFIG, config, overrides, what="consumer configuration",
                          kind="consumer")
    for name in ("auto.offset.reset", "isolation.level", "group.protocol"):
        parsed[name] = parsed[name].lower()
    if parsed["group.id"] == "":
        parsed["group.id"] = None
    if parsed["group.instance.id"] is not None and parsed["group.id"] is None:
        raise ConfigError("group.instance.id requires group.id")
    if parsed["heartbeat.interval.ms"] >= parsed["session.timeout.ms"]:
        raise ConfigError("heartbeat.interval.ms must be smaller than session.timeout.ms")
    return parsed
