"""A Python data source that only hands Spark ready Arrow batches with the Kafka source's
schema: what Spark's Python source path costs by itself on this machine (bench.spark_read)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from pyspark_moldau.schema import kafka_schema

ROWS_PER_BATCH = 50_000


class ReadyArrow(DataSource):
    """Options: rows, size (bytes per value), partitions."""

    @classmethod
    def name(cls) -> str:
        return "bench_ready_arrow"

    def schema(self) -> StructType:
        return kafka_schema(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ReadyArrowReader(int(self.options["rows"]), int(self.options["size"]),
                                int(self.options["partitions"]), schema)


class ReadyArrowReader(DataSourceReader):
    def __init__(self, rows: int, size: int, partitions: int, schema: StructType) -> None:
        self.rows, self.size, self.count, self.schema = rows, size, partitions, schema

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = to_arrow_schema(self.schema, timezone="UTC")
        n = min(ROWS_PER_BATCH, self.rows // self.count)
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * self.size),
                             pa.py_buffer(np.random.bytes(n * self.size))])
        batch = pa.RecordBatch.from_arrays([
            pa.nulls(n, pa.binary()), values, pa.repeat(pa.scalar("bench"), n),
            pa.array(np.full(n, partition.value, dtype=np.int32)),
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(np.zeros(n, dtype=np.int64)).cast(schema.field("timestamp").type),
            pa.array(np.zeros(n, dtype=np.int32))], schema=schema)
        left = self.rows // self.count
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n
