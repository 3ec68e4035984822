"""Spark's own Kafka connector (spark-sql-kafka-0-10) against a Moldau broker, unchanged."""

from __future__ import annotations

import json
from dataclasses import replace

from e2e.spark.rows import kafka_recs
from e2e.spark.transactions import assert_isolation_levels
from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)


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


def run_copy(spark, bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    """Copy source to sink partition by partition with Spark's Kafka source and sink, until
    the source's current end (Trigger.AvailableNow)."""
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
              .option("startingOffsets", "earliest").option("includeHeaders", "true").load())
    query = (stream.select("key", "value", "headers", "partition").writeStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def test_streaming_copy_restarts_from_its_checkpoint(spark, module_broker, tmp_path) -> None:
    bootstrap = module_broker.bootstrap
    source, sink = unique("spark-in"), unique("spark-out")
    kp_create_topic(bootstrap, source, partitions=2)
    kp_create_topic(bootstrap, sink, partitions=2)
    first, second = make_records(20, partitions=2, max_value=200), \
        make_records(16, partitions=2, seed=2, max_value=200)
    checkpoint = str(tmp_path / "checkpoint")

    kp_produce(bootstrap, source, first)
    run_copy(spark, bootstrap, source, sink, checkpoint)
    kp_produce(bootstrap, source, second)
    # The second run starts where the checkpoint says, not at "earliest".
    run_copy(spark, bootstrap, source, sink, checkpoint)

    # The sink stamps its own timestamps: compare everything else, each record once.
    copied = kp_consume_all(bootstrap, sink, partitions=(0, 1))
    want = with_offsets(first + second)
    assert_records_equal([replace(r, timestamp=0) for r in copied],
                         [replace(r, timestamp=0) for r in want])


def test_read_committed_skips_aborted_records(spark, module_broker) -> None:
    assert_isolation_levels(spark, "kafka", module_broker.bootstrap)
