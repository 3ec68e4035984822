"""Reading one offset range in a Spark task: the Moldau consumer assigned to one partition
hands over whole record batches (poll_batches), decoded into Arrow columns in bulk
(columns.py) with the Kafka source's schema."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from moldau.client import Consumer, TopicPartition
from pyspark_moldau.cluster import open_consumer
from pyspark_moldau.columns import InvalidRecordsError, RecordColumns, decode_batches
from pyspark_moldau.offsets import OffsetRange

# Records per poll, and so per Arrow batch handed to Spark (whole record batches: about).
ROWS_PER_BATCH = 50_000
# Fetch more than the consumer's default 1 MiB per partition unless kafka.* says otherwise: a
# task reads one partition as fast as it can (4 MiB measured best; 16 MiB was slower).
FETCH_DEFAULTS = {"max.partition.fetch.bytes": str(4 << 20), "fetch.max.bytes": str(64 << 20)}


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (deleted by retention) and failOnDataLoss is true."""


def read_range(settings: dict[str, str], schema: StructType, part: OffsetRange,
               fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    with_headers = "headers" in schema.fieldNames()
    tp = TopicPartition(part.topic, part.partition)
    consumer = open_consumer({**FETCH_DEFAULTS, **settings})
    try:
        start = _first_offset(consumer, tp, part, fail_on_data_loss)
        consumer.assign([tp])
        consumer.seek(tp, start)
        waited_since = time.monotonic()
        while consumer.position(tp) < part.end:
            batches = consumer.poll_batches(1.0, max_records=ROWS_PER_BATCH)
            if not batches:
                if (time.monotonic() - waited_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"Cannot fetch record for offset {consumer.position(tp)} of "
                        f"{part.topic}-{part.partition} in {poll_timeout_ms} milliseconds")
                continue
            waited_since = time.monotonic()
            try:
                columns = decode_batches(batches, with_headers)
            except InvalidRecordsError as exc:
                raise InvalidRecordsError(f"{part.topic}-{part.partition}: {exc}") from None
            rows = arrow_batch(part, columns, arrow_schema)
            if rows.num_rows:
                yield rows
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


def arrow_batch(part: OffsetRange, columns: RecordColumns, schema: pa.Schema
                ) -> pa.RecordBatch:
    """The rows of `columns` within the range, with the Kafka source's schema."""
    keep = columns.offsets < part.end
    count = int(keep.sum())
    if count < len(columns):
        columns = columns.head(count)  # offsets ascend: the rest lie past the range
    arrays = [
        columns.keys,
        columns.values,
        pa.repeat(pa.scalar(part.topic, schema.field("topic").type), count),
        pa.array(np.full(count, part.partition, dtype=np.int32)),
        pa.array(columns.offsets),
        # Spark's timestamps are microseconds; Kafka's milliseconds.
        pa.array(columns.timestamps * 1000).cast(schema.field("timestamp").type),
        pa.array(columns.log_append_time.astype(np.int32)),
    ]
    if columns.headers is not None:
        arrays.append(pa.array([[{"key": k, "value": v} for k, v in headers]
                                for headers in columns.headers],
                               schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
