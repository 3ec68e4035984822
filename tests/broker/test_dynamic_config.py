"""Dynamic broker configs on a broker: the layers over server.properties, key by key as
Kafka resolves them, and the topic defaults that follow."""

from moldau.broker.config import BROKER_CONFIG, BrokerConfig
from moldau.broker.dynamic_config import refresh, touches_broker
from moldau.broker.log.config import BROKER_SYNONYMS
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigRecord
from moldau.config import DYNAMIC_BROKER_KEYS, REPLICATION_THROTTLE_RATES


def image_with(*records: ConfigRecord) -> MetadataImage:
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(offset, record)
    return image


def test_layers_win_key_by_key():
    config = BrokerConfig({"node.id": "2", "log.retention.ms": "1000",
                           "log.segment.bytes": "4194304"})
    image = image_with(
        ConfigRecord(BROKER_RESOURCE, "", "log.retention.hours", "1"),
        ConfigRecord(BROKER_RESOURCE, "", "log.segment.bytes", "2097152"),
        ConfigRecord(BROKER_RESOURCE, "", "min.insync.replicas", "2"),
        ConfigRecord(BROKER_RESOURCE, "2", "min.insync.replicas", "3"),
        ConfigRecord(BROKER_RESOURCE, "3", "log.roll.ms", "5000"))  # another broker's
    assert refresh(config, image)
    # log.retention.ms in the file still wins over a dynamic log.retention.hours (Kafka's
    # precedence among the names of one setting); other keys: broker > default > file.
    assert config["log.retention.ms"] == 1000
    assert config["log.segment.bytes"] == 2097152
    assert config["min.insync.replicas"] == 3
    assert config["log.roll.ms"] == 168 * 3600000
    topic = config.topic_log_config({"segment.bytes": "1048576"})
    assert (topic.segment_bytes, topic.min_insync_replicas) == (1048576, 3)
    assert not refresh(config, image)  # nothing new


def test_removing_a_dynamic_value_returns_to_the_file():
    config = BrokerConfig({"node.id": "1", "log.retention.hours": "2"})
    image = image_with(ConfigRecord(BROKER_RESOURCE, "", "log.retention.ms", "60000"))
    refresh(config, image)
    assert config.log_config({}).retention_ms == 60000
    image.apply(1, ConfigRecord(BROKER_RESOURCE, "", "log.retention.ms", None))
    assert refresh(config, image)
    assert config.log_config({}).retention_ms == 2 * 3600000
    assert config.dynamic_default == {}


def test_which_batches_touch_this_broker():
    assert touches_broker([ConfigRecord(BROKER_RESOURCE, "", "x", "1")], 1)
    assert touches_broker([ConfigRecord(BROKER_RESOURCE, "1", "x", "1")], 1)
    assert not touches_broker([ConfigRecord(BROKER_RESOURCE, "2", "x", "1")], 1)
    assert not touches_broker([ConfigRecord(TOPIC_RESOURCE, "", "x", "1")], 1)


def test_the_dynamic_keys_are_the_topic_defaults_moldau_applies():
    """Every broker name of a topic setting's default, except those Moldau stores but does
    not act on yet (broker-side recompression levels, tiered storage), the replication
    throttle rates, and transaction verification (a cluster-wide dynamic setting in Kafka)."""
    not_applied = {"compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
                   "log.local.retention.bytes", "log.local.retention.ms"}
    synonyms = {prop for props in BROKER_SYNONYMS.values() for prop in props}
    applied = {prop for prop in synonyms if prop in BROKER_CONFIG and prop not in not_applied}
    assert applied | REPLICATION_THROTTLE_RATES \
        | {"transaction.partition.verification.enable"} == DYNAMIC_BROKER_KEYS
