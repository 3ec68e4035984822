"""Spark's own Kafka connector (spark-sql-kafka-0-10) against a Moldau broker, unchanged."""

from __future__ import annotations

import json

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

BROKER_OVERRIDES = BROKER_SETTINGS


def test_batch_read_with_per_partition_offsets(spark, module_broker) -> None:
    topic = unique("spark-batch")
    kp_create_topic(module_broker.bootstrap, topic, partitions=3)
    records = with_offsets(make_records(30, partitions=3, max_value=300))
    kp_produce(module_broker.bootstrap, topic, records)
    # -2 is earliest and -1 latest, as Spark's JSON offsets say.
    starting = {topic: {"0": 2, "1": -2, "2": 5}}
    ending = {topic: {"0": 7, "1": 4, "2": -1}}
    df = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", module_broker.bootstrap)
          .option("subscribe", topic).option("includeHeaders", "true")
          .option("startingOffsets", json.dumps(starting))
          .option("endingOffsets", json.dumps(ending)).load())
    bounds = {0: (2, 7), 1: (0, 4), 2: (5, 10)}
    want = [r for r in records if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]
    assert_records_equal(kafka_recs(df, topic), want)


def test_read_committed_skips_aborted_records(spark, module_broker) -> None:
    assert_isolation_levels(spark, "kafka", module_broker.bootstrap)
