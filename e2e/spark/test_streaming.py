"""The same streaming jobs through Spark's Kafka connector (format "kafka") and the Moldau
source and sink (format "moldau"): the same rows, restarts from a checkpoint, rate limits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from e2e.support import (
    Rec,
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)

FORMATS = ["kafka", "moldau"]


def stream(spark, fmt: str, bootstrap: str, topic: str, **options: str):
    return (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .options(**options).load())


def finish(query) -> None:  # noqa: ANN001
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def run_copy(spark, fmt: str, bootstrap: str, source: str, sink: str, checkpoint: str,
             **sink_options: str) -> None:
    """Copy source to sink partition by partition until the source's current end
    (Trigger.AvailableNow), reading and writing with `fmt`."""
    rows = stream(spark, fmt, bootstrap, source, includeHeaders="true")
    finish(rows.select("key", "value", "headers", "partition").writeStream.format(fmt)
           .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
           .options(**sink_options)
           .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def renumbered(records: list[Rec]) -> list[Rec]:
    """The records in their order, with offsets counted without the gaps transaction
    markers leave."""
    return with_offsets(sorted(records, key=lambda r: (r.partition, r.offset)))


@pytest.mark.parametrize(("fmt", "sink_options"), [
    ("kafka", {}), ("moldau", {}), ("moldau", {"exactlyOnce": "true"})])
def test_copy_restarts_from_its_checkpoint(spark, module_broker, tmp_path, fmt,
                                           sink_options) -> None:
    bootstrap = module_broker.bootstrap
    source, sink = unique("spark-in"), unique("spark-out")
    kp_create_topic(bootstrap, source, partitions=2)
    kp_create_topic(bootstrap, sink, partitions=2)
    first, second = make_records(20, partitions=2, max_value=200), \
        make_records(16, partitions=2, seed=2, max_value=200)
    checkpoint = str(tmp_path / "checkpoint")

    kp_produce(bootstrap, source, first)
    run_copy(spark, fmt, bootstrap, source, sink, checkpoint, **sink_options)
    kp_produce(bootstrap, source, second)
    # The second run starts where the checkpoint says, not at "earliest".
    run_copy(spark, fmt, bootstrap, source, sink, checkpoint, **sink_options)

    # The sink stamps its own timestamps: compare everything else, each record once.
    copied = kp_consume_all(bootstrap, sink, partitions=(0, 1),
                            isolation_level="read_committed")
    if sink_options:
        copied = renumbered(copied)
    want = with_offsets(first + second)
    assert_records_equal([replace(r, timestamp=0) for r in copied],
                         [replace(r, timestamp=0) for r in want])


@pytest.mark.parametrize("fmt", FORMATS)
def test_max_offsets_per_trigger(spark, module_broker, fmt) -> None:
    bootstrap = module_broker.bootstrap
    topic = unique("spark-rate")
    kp_create_topic(bootstrap, topic, partitions=2)
    records = with_offsets(make_records(20, partitions=2, max_value=50))
    kp_produce(bootstrap, topic, records)
    name = unique(f"rate_{fmt}").replace("-", "_")
    query = (stream(spark, fmt, bootstrap, topic, maxOffsetsPerTrigger="5")
             .select("partition", "offset").writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).start())
    finish(query)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 20 and max(sizes) <= 5, sizes
    got = sorted((r.partition, r.offset) for r in spark.table(name).collect())
    assert got == sorted((r.partition, r.offset) for r in records)
