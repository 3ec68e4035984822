"""Streaming reads through Spark's Kafka connector and the Moldau source side by side, on a
running query: minOffsetsPerTrigger with maxTriggerDelay, partitions and topics created while
it runs, records deleted under it (failOnDataLoss), and a kafka.* setting the broker sees."""

from __future__ import annotations

import contextlib
import json

import pytest
from pyspark.errors import StreamingQueryException

from e2e.spark.test_streaming import FORMATS, finish, stream
from e2e.support import (
    Rec,
    kp_create_topic,
    kp_produce,
    now_ms,
    unique,
    wait_until,
)
from e2e.test_metrics import scrape, value
from moldau.client import Admin, TopicPartition

WAIT = 90.0


def numbered(partition: int, first: int, count: int) -> list[Rec]:
    return [Rec(partition, None, f"{partition}-{n}".encode(), (), now_ms())
            for n in range(first, first + count)]


class MemoryQuery:
    """A streaming query into Spark's memory sink, triggered every 200 ms."""

    def __init__(self, df, name: str) -> None:  # noqa: ANN001 - a DataFrame
        self.name = unique(name).replace("-", "_")
        self.query = (df.select("topic", "partition", "offset").writeStream.format("memory")
                      .queryName(self.name).trigger(processingTime="200 milliseconds").start())
        self._batches: dict[int, dict] = {}

    def rows(self, spark) -> list[tuple[str, int, int]]:
        return sorted((r.topic, r.partition, r.offset)
                      for r in spark.table(self.name).collect())

    def wait_rows(self, spark, count: int, what: str) -> list[tuple[str, int, int]]:
        """Until `count` rows are in the sink and the progress of their batch is posted."""
        def arrived() -> bool:
            total = sum(b["numInputRows"] for b in self.batches())
            return total >= count and len(self.rows(spark)) >= count
        wait_until(lambda: arrived() or self.query.exception(), WAIT, what)
        assert self.query.exception() is None, self.query.exception()
        return self.rows(spark)

    def batches(self) -> list[dict]:
        """Progress of the micro-batches that read rows, in order; gathered as they come
        (Spark keeps only the last 100 progress updates)."""
        for progress in self.query.recentProgress:
            if progress["numInputRows"]:
                self._batches[progress["batchId"]] = progress
        return [self._batches[batch] for batch in sorted(self._batches)]

    def stop(self) -> None:
        self.query.stop()


@pytest.mark.parametrize("fmt", FORMATS)
def test_min_offsets_per_trigger_waits_for_rows_or_the_delay(spark, module_broker, fmt
                                                             ) -> None:
    bootstrap = module_broker.bootstrap
    topic = unique("spark-min")
    kp_create_topic(bootstrap, topic)
    # Every trigger without a batch reports its progress, with the offsets it saw.
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    try:
        query = MemoryQuery(stream(spark, fmt, bootstrap, topic, minOffsetsPerTrigger="10",
                                   maxTriggerDelay="12s"), "min_rows")
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        # The first trigger (no data yet) starts the delay.
        wait_until(lambda: query.query.recentProgress, WAIT, "the first trigger")
        kp_produce(bootstrap, topic, numbered(0, 0, 9))
        # Nine records wait: triggers see them and start no batch (the delay is 12 s).
        wait_until(lambda: seen(query, topic) == 9 or query.batches(), WAIT,
                   "a trigger to see nine records")
        assert query.rows(spark) == [] and not query.batches()
        kp_produce(bootstrap, topic, numbered(0, 9, 1))
        assert query.wait_rows(spark, 10, "the tenth record") == [
            (topic, 0, offset) for offset in range(10)]
        assert [b["numInputRows"] for b in query.batches()] == [10]
        # Two more never make ten: the batch comes when 12 s passed since the last one.
        kp_produce(bootstrap, topic, numbered(0, 10, 2))
        assert len(query.wait_rows(spark, 12, "the delayed batch")) == 12
        first, delayed = query.batches()
        assert delayed["numInputRows"] == 2
        waited = (parse_time(delayed["timestamp"]) - parse_time(first["timestamp"]))
        assert waited >= 11.5, f"the delayed batch came {waited:.1f} s after the last"
    finally:
        query.stop()


def seen(query: MemoryQuery, topic: str) -> int | None:
    """The offset of partition 0 the source last reported as available, if any."""
    progress = query.query.lastProgress
    latest = progress["sources"][0].get("latestOffset") if progress else None
    if isinstance(latest, str):
        latest = json.loads(latest)
    return (latest or {}).get(topic, {}).get("0")


def parse_time(timestamp: str) -> float:
    """Seconds of Spark's progress timestamp (2026-01-01T12:00:00.123Z)."""
    from datetime import datetime

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("fmt", FORMATS)
def test_partitions_added_while_running_are_read(spark, module_broker, fmt) -> None:
    bootstrap = module_broker.bootstrap
    topic = unique("spark-grow")
    kp_create_topic(bootstrap, topic)
    kp_produce(bootstrap, topic, numbered(0, 0, 3))
    query = MemoryQuery(stream(spark, fmt, bootstrap, topic), "grow")
    try:
        query.wait_rows(spark, 3, "the first partition's records")
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_partitions({topic: 3})
        kp_produce(bootstrap, topic, numbered(1, 0, 2) + numbered(2, 0, 2))
        # New partitions are read from their start.
        assert query.wait_rows(spark, 7, "the new partitions' records") == [
            (topic, 0, 0), (topic, 0, 1), (topic, 0, 2), (topic, 1, 0), (topic, 1, 1),
            (topic, 2, 0), (topic, 2, 1)]
    finally:
        query.stop()


@pytest.mark.parametrize("fmt", FORMATS)
def test_subscribe_pattern_reads_topics_created_while_running(spark, module_broker, fmt
                                                              ) -> None:
    bootstrap = module_broker.bootstrap
    prefix = unique("spark-pattern")
    first, second, other = f"{prefix}-a", f"{prefix}-b", f"{prefix}x"
    kp_create_topic(bootstrap, first)
    kp_produce(bootstrap, first, numbered(0, 0, 2))
    df = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest")
          .load())
    query = MemoryQuery(df, "pattern")
    try:
        query.wait_rows(spark, 2, "the first topic's records")
        for topic in (second, other):
            kp_create_topic(bootstrap, topic)
            kp_produce(bootstrap, topic, numbered(0, 0, 2))
        assert query.wait_rows(spark, 4, "the new topic's records") == [
            (first, 0, 0), (first, 0, 1), (second, 0, 0), (second, 0, 1)]
        # The query has read past the non-matching topic's records by now (no more rows).
        kp_produce(bootstrap, second, numbered(0, 2, 1))
        assert query.wait_rows(spark, 5, "one more")[-1] == (second, 0, 2)
    finally:
        query.stop()


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_deleted_under_a_query_fail_it_or_are_skipped(spark, module_broker, tmp_path,
                                                              fmt) -> None:
    bootstrap = module_broker.bootstrap
    topic = unique("spark-lost")
    kp_create_topic(bootstrap, topic)
    kp_produce(bootstrap, topic, numbered(0, 0, 10))
    checkpoint, output = str(tmp_path / "checkpoint"), str(tmp_path / "output")

    def run(fail_on_data_loss: str):  # noqa: ANN202 - a StreamingQuery
        df = stream(spark, fmt, bootstrap, topic, failOnDataLoss=fail_on_data_loss)
        query = (df.select("offset").writeStream.format("parquet").option("path", output)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):  # kept in query.exception()
            query.awaitTermination(240)
        return query

    def offsets_written() -> list[int]:
        return sorted(r.offset for r in spark.read.parquet(output).collect())

    finish(run("true"))
    assert offsets_written() == list(range(10))
    # Ten more, of which retention (here DeleteRecords) takes five before the query reads.
    kp_produce(bootstrap, topic, numbered(0, 10, 10))
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.delete_records({TopicPartition(topic, 0): 15})

    strict = run("true")
    assert strict.exception() is not None, "the query read past lost records"
    message = str(strict.exception())
    assert "data may have been lost" in message.lower(), message
    assert "set the source option" in message and "failOnDataLoss" in message, message
    wanted = {"moldau": f"Cannot fetch offset 10 of {topic}-0: the earliest offset is now 15",
              "kafka": f"Could not read records in offset [10, 20) for topic partition "
                       f"{topic}-0"}[fmt]
    assert wanted in message, message
    finish(run("false"))
    assert offsets_written() == list(range(10)) + list(range(15, 20))


def fetch_requests(module_broker, topic: str) -> float:
    return value(scrape(module_broker.http_port),
                 "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic)


@pytest.mark.parametrize("fmt", FORMATS)
def test_kafka_options_configure_the_readers(spark, module_broker, fmt) -> None:
    """kafka.max.partition.fetch.bytes=1 makes every fetch return one record batch (a
    broker returns the first batch whatever the limit): the broker counts the fetches."""
    bootstrap = module_broker.bootstrap
    batches = 30
    counts = {}
    for fetch_bytes in (None, "1"):
        topic = unique("spark-fetch")
        kp_create_topic(bootstrap, topic)
        # One record per batch: nothing waits to be batched with the next.
        kp_produce(bootstrap, topic, numbered(0, 0, batches), batch_size=1, linger_ms=0,
                   max_in_flight_requests_per_connection=1)
        options = {"subscribe": topic}
        if fetch_bytes is not None:
            options["kafka.max.partition.fetch.bytes"] = fetch_bytes
        before = fetch_requests(module_broker, topic)
        df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap) \
            .options(**options).load()
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(batches))
        counts[fetch_bytes] = fetch_requests(module_broker, topic) - before
    assert counts[None] < batches / 3, counts
    assert counts["1"] >= batches, counts


def test_offsets_json_of_a_query_name_every_partition(spark, module_broker, tmp_path) -> None:
    """The Moldau source keeps Spark's offset JSON in the checkpoint, as the connector."""
    bootstrap = module_broker.bootstrap
    topic = unique("spark-offsets")
    kp_create_topic(bootstrap, topic, partitions=2)
    kp_produce(bootstrap, topic, numbered(0, 0, 3) + numbered(1, 0, 1))
    checkpoint = tmp_path / "checkpoint"
    finish(stream(spark, "moldau", bootstrap, topic).writeStream.format("noop")
           .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    batches = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = max(batches, key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {topic: {"0": 3, "1": 1}}
