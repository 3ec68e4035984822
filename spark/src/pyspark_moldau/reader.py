"""Reading one offset range in a Spark task: the Moldau consumer assigned to one partition,
its records turned into Arrow batches with the Kafka source's schema."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from moldau.client import Consumer, ConsumerRecord, TopicPartition
from pyspark_moldau.cluster import open_consumer
from pyspark_moldau.offsets import OffsetRange

ROWS_PER_BATCH = 10_000


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (deleted by retention) and failOnDataLoss is true."""


def read_range(settings: dict[str, str], schema: StructType, part: OffsetRange,
               fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    with_headers = "headers" in schema.fieldNames()
    tp = TopicPartition(part.topic, part.partition)
    consumer = open_consumer(settings)
    try:
        start = _first_offset(consumer, tp, part, fail_on_data_loss)
        consumer.assign([tp])
        consumer.seek(tp, start)
        columns = _Columns(part.topic, with_headers)
        waited_since = time.monotonic()
        while consumer.position(tp) < part.end:
            records = consumer.poll(1.0)
            if not records:
                if (time.monotonic() - waited_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"Cannot fetch record for offset {consumer.position(tp)} of "
                        f"{part.topic}-{part.partition} in {poll_timeout_ms} milliseconds")
                continue
            waited_since = time.monotonic()
            for record in records:
                if record.offset >= part.end:
                    break
                columns.add(record)
            if len(columns) >= ROWS_PER_BATCH:
                yield columns.batch(arrow_schema)
        if len(columns):
            yield columns.batch(arrow_schema)
    finally:
        consumer.close()


def _first_offset(consumer: Consumer, tp: TopicPartition, part: OffsetRange,
                  fail_on_data_loss: bool) -> int:
    """The range's start, or the log start when retention already deleted the records
    before it (an error under failOnDataLoss, as in Spark's connector)."""
    log_start = consumer.beginning_offsets([tp])[tp]
    if log_start <= part.start:
        return part.start
    if fail_on_data_loss:
        raise DataLossError(
            f"Cannot fetch offset {part.start} of {part.topic}-{part.partition}: the earliest "
            f"offset is now {log_start}; some data may have been lost because it is no longer "
            f"available in Kafka. If you don't want your streaming query to fail on such "
            f"cases, set the source option \"failOnDataLoss\" to \"false\".")
    return min(log_start, part.end)


class _Columns:
    """Column lists of the rows read so far, emptied into an Arrow batch."""

    def __init__(self, topic: str, with_headers: bool) -> None:
        self.topic = topic
        self.with_headers = with_headers
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: ConsumerRecord) -> None:
        self.keys.append(record.key)
        self.values.append(record.value)
        self.partitions.append(record.partition)
        self.offsets.append(record.offset)
        # Spark's timestamps are microseconds; Kafka's milliseconds.
        self.timestamps.append(record.timestamp * 1000)
        self.types.append(record.timestamp_type)
        if self.with_headers:
            self.headers.append([{"key": k, "value": v}
                                 for k, v in record.headers])

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        count = len(self)
        arrays = [
            pa.array(self.keys, schema.field("key").type),
            pa.array(self.values, schema.field("value").type),
            pa.array([self.topic] * count, schema.field("topic").type),
            pa.array(self.partitions, schema.field("partition").type),
            pa.array(self.offsets, schema.field("offset").type),
            pa.array(self.timestamps, pa.int64()).cast(schema.field("timestamp").type),
            pa.array(self.types, schema.field("timestampType").type),
        ]
        if self.with_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
