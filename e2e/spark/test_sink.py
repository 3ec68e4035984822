"""Batch writes through Spark's Kafka sink and the Moldau sink: the same columns, the same
records in the topic; the sink's option and column errors."""

from __future__ import annotations

import pytest

from e2e.support import Rec, kp_consume_all, kp_create_topic, unique

ROWS = [("k1", b"v1", 0, [("h", b"x"), ("h", None)]),
        (None, b"v2", 1, []),
        ("k3", None, 1, None),
        ("k4", b"", 0, [("empty", b"")])]
SCHEMA = "key string, value binary, partition int, headers array<struct<key:string,value:binary>>"


def expected(rows: list[tuple]) -> list[Rec]:
    """What the topic holds after `rows` (timestamps aside), in partition order."""
    out, next_offset = [], {0: 0, 1: 0}
    for key, value, partition, headers in rows:
        out.append(Rec(partition, None if key is None else key.encode(), value,
                       tuple(headers or ()), 0, next_offset[partition]))
        next_offset[partition] += 1
    return out


def stored(bootstrap: str, topic: str) -> list[Rec]:
    return sorted((Rec(r.partition, r.key, r.value, r.headers, 0, r.offset)
                   for r in kp_consume_all(bootstrap, topic, partitions=(0, 1))),
                  key=lambda r: (r.partition, r.offset))


@pytest.mark.parametrize("fmt", ["kafka", "moldau"])
def test_batch_write_with_topic_option_and_topic_column(spark, module_broker, fmt) -> None:
    bootstrap = module_broker.bootstrap
    by_option, by_column = unique("spark-sink"), unique("spark-sink-col")
    for topic in (by_option, by_column):
        kp_create_topic(bootstrap, topic, partitions=2)
    df = spark.createDataFrame(ROWS, SCHEMA).coalesce(1)
    # Spark writes Python data sources in append mode only; its Kafka sink takes it too.
    df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", by_option).save()
    from pyspark.sql import functions as F

    df.withColumn("topic", F.lit(by_column)).write.format(fmt).mode("append") \
        .option("kafka.bootstrap.servers", bootstrap).save()
    want = sorted(expected(ROWS), key=lambda r: (r.partition, r.offset))
    assert stored(bootstrap, by_option) == want
    assert stored(bootstrap, by_column) == want


def test_exactly_once_batch_write_with_a_progress_topic(spark, module_broker) -> None:
    """Rows naming their topics, written in transactions; the progress kept on another."""
    bootstrap = module_broker.bootstrap
    out, progress = unique("spark-eos-col"), unique("spark-eos-progress")
    kp_create_topic(bootstrap, out, partitions=2)
    kp_create_topic(bootstrap, progress)
    from pyspark.sql import functions as F

    df = spark.createDataFrame(ROWS, SCHEMA).coalesce(1).withColumn("topic", F.lit(out))
    df.write.format("moldau").mode("append").option("kafka.bootstrap.servers", bootstrap) \
        .option("exactlyOnce", "true").option("progressTopic", progress).save()
    want = sorted(expected(ROWS), key=lambda r: (r.partition, r.offset))
    # The commit markers take an offset after each partition's records.
    committed = kp_consume_all(bootstrap, out, partitions=(0, 1),
                               isolation_level="read_committed")
    assert sorted((Rec(r.partition, r.key, r.value, r.headers, 0, r.offset)
                   for r in committed), key=lambda r: (r.partition, r.offset)) == want


def test_exactly_once_needs_a_topic_for_its_progress(spark) -> None:
    df = spark.createDataFrame([("t", "v")], "topic string, value string")
    with pytest.raises(Exception) as caught:
        df.write.format("moldau").mode("append").option("kafka.bootstrap.servers",
                                                         "127.0.0.1:1") \
            .option("exactlyOnce", "true").save()
    assert ("pyspark_moldau.options.OptionError: Option 'exactlyOnce' needs the 'topic' "
            "option, or 'progressTopic' naming an existing topic when the rows carry their "
            "topic\n") in str(caught.value)
