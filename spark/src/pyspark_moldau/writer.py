"""The sink: rows with Spark's Kafka sink columns (topic, key, value, partition, headers)
produced with the Moldau client, at least once with the idempotent producer, or exactly once
in transactions the driver commits per batch (`exactlyOnce`, see exactly_once.py)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from moldau.client import KafkaError, Producer
from pyspark_moldau.exactly_once import (
    TaskScope,
    Written,
    complete,
    job_task_scope,
    stream_task_scope,
    write_prepared,
)
from pyspark_moldau.records import send_rows
from pyspark_moldau.sink_options import SinkOptions, sink_options

log = logging.getLogger("pyspark_moldau")


def write_at_least_once(options: SinkOptions, rows: Iterator[Row]) -> Written:
    """Send every row and wait for every acknowledgement; a failed send fails the task, so
    Spark retries it (at least once)."""
    context = TaskContext.get()
    producer = Producer(options.client)
    try:
        futures = send_rows(producer, options, rows)
        producer.flush()
        for future in futures:
            future.get()
        return Written(context.partitionId() if context else 0, len(futures))
    finally:
        producer.close()


class _SinkWriter:
    """What the batch and the streaming writer share."""

    options: SinkOptions

    def _write(self, scope: TaskScope | None, rows: Iterator[Row]) -> Written:
        if scope is None:
            return write_at_least_once(self.options, rows)
        return write_prepared(self.options, scope, rows)

    def _abort(self, messages: Sequence[WriterCommitMessage | None], what: str) -> None:
        """Abort what the tasks that succeeded prepared; a transaction this misses ends at
        its timeout, or when the next attempt of its task starts."""
        if not self.options.exactly_once:
            return
        try:
            complete(self.options, messages, commit=False)
        except KafkaError as exc:
            log.warning("could not abort the transactions of %s: %s", what, exc)


class MoldauBatchWriter(_SinkWriter, DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = sink_options(options, schema)
        # Made once on the driver and shipped to every task of this job and their retries.
        self.job_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[Row]) -> Written:
        scope = job_task_scope(self.job_id) if self.options.exactly_once else None
        return self._write(scope, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            complete(self.options, messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages, f"write job {self.job_id}")


class MoldauStreamWriter(_SinkWriter, DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = sink_options(options, schema)

    def write(self, iterator: Iterator[Row]) -> Written:
        scope = stream_task_scope() if self.options.exactly_once else None
        return self._write(scope, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """With exactlyOnce, commit the batch's transactions (before Spark's commit log);
        without, every record is acknowledged already."""
        if self.options.exactly_once:
            complete(self.options, messages, commit=True)
        written = [m for m in messages if isinstance(m, Written)]
        skipped = sorted(m.partition for m in written if m.skipped)
        log.info("batch %d: %d records written by %d tasks%s", batchId,
                 sum(m.records for m in written), len(written),
                 f"; tasks {skipped} found the batch written already" if skipped else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self._abort(messages, f"batch {batchId}")
