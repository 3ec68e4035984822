"""format("moldau") (the moldau-spark source) against a real broker: the same rows as Spark's
own Kafka connector, and each of its options with exact results."""

from __future__ import annotations

import json

import pytest

from e2e.spark.rows import kafka_recs
from e2e.spark.transactions import BROKER_SETTINGS, assert_isolation_levels
from e2e.support import (
    assert_records_equal,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)
from moldau.client import Admin, TopicPartition

BROKER_OVERRIDES = BROKER_SETTINGS


def read(spark, fmt: str, bootstrap: str, **options: str):
    return spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap) \
        .options(**options).load()


@pytest.fixture(scope="module")
def three_partitions(module_broker):
    """A topic of 3 partitions holding 30 varied records (keys, nulls, headers)."""
    topic = unique("spark-src")
    kp_create_topic(module_broker.bootstrap, topic, partitions=3)
    records = with_offsets(make_records(30, partitions=3, max_value=300))
    kp_produce(module_broker.bootstrap, topic, records)
    return topic, records


def test_batch_read_gives_the_kafka_connectors_rows(spark, module_broker,
                                                   three_partitions) -> None:
    topic, records = three_partitions
    options = {"subscribe": topic, "includeHeaders": "true",
               "startingOffsets": json.dumps({topic: {"0": 2, "1": -2, "2": 5}}),
               "endingOffsets": json.dumps({topic: {"0": 7, "1": 4, "2": -1}})}
    bounds = {0: (2, 7), 1: (0, 4), 2: (5, 10)}
    want = [r for r in records if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]
    moldau = read(spark, "moldau", module_broker.bootstrap, **options)
    assert moldau.schema == read(spark, "kafka", module_broker.bootstrap, **options).schema
    assert_records_equal(kafka_recs(moldau, topic), want)


def test_large_ranges_are_split_into_spark_partitions(spark, module_broker,
                                                      three_partitions) -> None:
    topic, records = three_partitions
    df = read(spark, "moldau", module_broker.bootstrap, subscribe=topic,
              maxRecordsPerPartition="4", includeHeaders="true")
    # 10 records per Kafka partition: 4 + 4 + 2, three times.
    assert df.rdd.getNumPartitions() == 9
    assert_records_equal(kafka_recs(df, topic), records)


def test_subscribe_pattern_and_assign(spark, module_broker) -> None:
    prefix = unique("spark-pat")
    names = [f"{prefix}-a", f"{prefix}-b", f"{prefix}x-c"]
    for name in names:
        kp_create_topic(module_broker.bootstrap, name, partitions=2)
        kp_produce(module_broker.bootstrap, name, make_records(4, partitions=2, max_value=50))

    def topics_and_partitions(**options: str) -> list[tuple[str, int, int]]:
        df = read(spark, "moldau", module_broker.bootstrap, **options)
        return sorted((r.topic, r.partition, r.offset) for r in df.collect())

    assert topics_and_partitions(subscribePattern=f"{prefix}-.*") == [
        (name, p, o) for name in names[:2] for p in (0, 1) for o in (0, 1)]
    assert topics_and_partitions(assign=json.dumps({names[2]: [1], names[0]: [0]})) == [
        (names[0], 0, 0), (names[0], 0, 1), (names[2], 1, 0), (names[2], 1, 1)]


def test_isolation_level(spark, module_broker) -> None:
    assert_isolation_levels(spark, "moldau", module_broker.bootstrap)



def test_fail_on_data_loss(spark, module_broker) -> None:
    topic = unique("spark-loss")
    kp_create_topic(module_broker.bootstrap, topic)
    records = with_offsets(make_records(10, max_value=50))
    kp_produce(module_broker.bootstrap, topic, records)
    with Admin({"bootstrap.servers": module_broker.bootstrap}) as admin:
        admin.delete_records({TopicPartition(topic, 0): 4})
    options = {"subscribe": topic, "includeHeaders": "true",
               "startingOffsets": json.dumps({topic: {"0": 0}})}

    lenient = read(spark, "moldau", module_broker.bootstrap, failOnDataLoss="false", **options)
    assert_records_equal(kafka_recs(lenient, topic), records[4:])
    strict = read(spark, "moldau", module_broker.bootstrap, **options)
    with pytest.raises(Exception, match=f"Cannot fetch offset 0 of {topic}-0: the earliest "
                                        "offset is now 4"):
        strict.collect()


def test_a_bad_option_is_named_in_sparks_error(spark) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("moldau").option("kafka.bootstrap.servers", "127.0.0.1:1") \
            .option("subscribe", "t").option("startingOffsets", "latest").load().collect()
    # Spark wraps the source's error; its last line is the source's one-line message.
    assert ("pyspark_moldau.options.OptionError: starting offset can't be latest for batch "
            "queries on Kafka\n") in str(caught.value)
