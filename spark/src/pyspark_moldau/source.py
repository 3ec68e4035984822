"""format("moldau"): Spark's Python Data Source API over the Moldau client, batch and streaming,
with the options, offsets and schema of Spark's Kafka connector."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pyspark_moldau.cluster import ClusterView
from pyspark_moldau.limits import TriggerDelay, rate_limit
from pyspark_moldau.offsets import (
    EARLIEST,
    OffsetRange,
    TopicOffsets,
    from_json_dict,
    split_ranges,
    to_json_dict,
)
from pyspark_moldau.options import SourceOptions, source_options
from pyspark_moldau.reader import read_range
from pyspark_moldau.schema import kafka_schema


class MoldauDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "moldau"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return kafka_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return MoldauBatchReader(source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MoldauStreamReader(source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_moldau.writer import MoldauBatchWriter

        return MoldauBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_moldau.writer import MoldauStreamWriter

        return MoldauStreamWriter(self.options, schema)


class _RangeReader:
    """What batch and stream readers share: reading one planned range in a task."""

    options: SourceOptions
    schema: StructType

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            # Spark's placeholder when there was nothing to read.
            return iter(())
        return read_range(self.options.client, self.schema, partition,
                          self.options.fail_on_data_loss, self.options.poll_timeout_ms)


class MoldauBatchReader(_RangeReader, DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        view = ClusterView(self.options.client)
        try:
            names = view.partitions(self.options.strategy)
            start = view.resolve(self.options.starting, names, "startingOffsets")
            end = view.resolve(self.options.ending, names, "endingOffsets")
        finally:
            view.close()
        return split_ranges(start, end, self.options.max_records_per_partition)


class MoldauStreamReader(_RangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Spark's JSON per topic and partition; partitions that appear later are
    read from their earliest offset."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._view: ClusterView | None = None
        # The offsets Trigger.AvailableNow must stop at, once it asked for them.
        self._target: TopicOffsets | None = None
        least = options.min_offsets_per_trigger
        self._delay = None if least is None else \
            TriggerDelay(least, options.max_trigger_delay_ms)

    def __getstate__(self) -> dict:
        # The driver's consumer stays on the driver.
        return {**self.__dict__, "_view": None}

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.options.client)
        return self._view

    def initialOffset(self) -> dict:
        names = self.view.partitions(self.options.strategy)
        return to_json_dict(self.view.resolve(self.options.starting, names, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark passes this back to latestOffset; Python sources have no composite limit,
        so the options themselves say which limits apply, and ReadAllAvailable (Spark's
        Trigger.Once) lifts them all."""
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> TopicOffsets:
        return self.view.latest(self.view.partitions(self.options.strategy))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._with_new_partitions(from_json_dict(start))
        latest = self._target if self._target is not None else self._available()
        end = {tp: max(latest.get(tp, offset), offset) for tp, offset in begin.items()}
        if isinstance(limit, ReadAllAvailable):
            return to_json_dict(end)
        # Trigger.AvailableNow gets no more data: waiting for more would never end.
        if self._delay is not None and self._target is None and \
                self._delay.should_wait(begin, end):
            return start  # no batch this trigger
        if self.options.max_offsets_per_trigger is not None:
            end = rate_limit(begin, end, self.options.max_offsets_per_trigger)
        return to_json_dict(end)

    def _with_new_partitions(self, start: TopicOffsets) -> TopicOffsets:
        names = self.view.partitions(self.options.strategy)
        new = [tp for tp in names if tp not in start]
        return {**start, **self.view.earliest(new)} if new else start

    def reportLatestOffset(self) -> dict | None:
        return to_json_dict(self._available())

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_json_dict(start)
        until = from_json_dict(end)
        missing = [tp for tp in until if tp not in begin]
        begin.update(self.view.resolve(EARLIEST, missing, "startingOffsets"))
        return split_ranges(begin, until, self.options.max_records_per_partition)

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
