"""exactlyOnce: each write task writes its rows in a transaction it prepares but does not
commit; the driver commits the transactions of a batch once Spark says every task succeeded.
Each transaction also records which batch its task wrote, so a replayed batch is skipped.

Why the driver commits: a Python writer cannot tell a task that failed from one that ended,
since when Spark fails a task its input may simply stop, and the writer would commit a part of
its rows. Only the driver's `commit` is called for tasks that succeeded, with their messages.

A task's transactional id and progress group are both `moldau-spark-<owner>-<partition>`,
where the owner is the streaming query's id (kept in its checkpoint, so the same after a
restart) or, for a batch write, an id drawn once for the whole job; the partition is Spark's
partition id of the write task, the same in every attempt and in a replay of the batch. The
progress is that group's committed offset on partition 0 of the progress topic: the next batch
the task may write (last written + 1), sent with `send_offsets_to_transaction`, so it commits
with the rows.

A task first calls `init_transactions()`, which fences every earlier attempt with the same
transactional id (its transaction can no longer commit) and aborts a transaction one left
open; only then does it read the progress, which therefore cannot change under it. If the
batch is recorded there, the driver committed it before (it crashed before Spark's commit
log): the task writes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import WriterCommitMessage

from moldau.client import (
    Admin,
    Consumer,
    OffsetAndMetadata,
    PreparedTransaction,
    Producer,
    TopicPartition,
)
from pyspark_moldau.options import connection_settings
from pyspark_moldau.records import send_rows
from pyspark_moldau.sink_options import SinkOptions

log = logging.getLogger("pyspark_moldau")

PREFIX = "moldau-spark"
# The local properties Spark's micro-batch execution gives every task of a batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# A task's transaction stays open until the driver commits the whole batch: by default up
# to Kafka's largest transaction timeout (the broker's transaction.max.timeout.ms).
DEFAULT_TRANSACTION_TIMEOUT_MS = "900000"


@dataclass
class Written(WriterCommitMessage):
    """What one write task did: how many records it wrote and, with exactlyOnce, the
    transaction it left for the driver to commit, or that it found its batch written."""

    partition: int
    records: int
    transaction: PreparedTransaction | None = None
    skipped: bool = False


@dataclass(frozen=True)
class TaskScope:
    """Who a write task is: its owner (query or job), micro-batch and partition."""

    owner: str
    batch: int
    partition: int

    @property
    def transactional_id(self) -> str:
        return f"{PREFIX}-{self.owner}-{self.partition}"

    @property
    def group_id(self) -> str:
        return self.transactional_id


def stream_task_scope() -> TaskScope:
    """The running task's scope in a micro-batch of a streaming query."""
    context = TaskContext.get()
    query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if context is None or query is None or batch is None:
        raise RuntimeError(f"exactlyOnce needs the local properties '{QUERY_ID_PROPERTY}' and "
                           f"'{BATCH_ID_PROPERTY}' Spark gives the tasks of a micro-batch; "
                           "this task has none")
    return TaskScope(query, int(batch), context.partitionId())


def job_task_scope(job_id: str) -> TaskScope:
    """The running task's scope in a batch write: one batch, 0, per job."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactlyOnce writes run in Spark tasks only")
    return TaskScope(job_id, 0, context.partitionId())


def write_prepared(options: SinkOptions, scope: TaskScope, rows: Iterable[Row]) -> Written:
    """The task's half: every row and the progress in a transaction left prepared."""
    rows = iter(rows)
    first = next(rows, None)
    if first is None:  # nothing to write, nothing to record
        return Written(scope.partition, 0)
    assert options.progress_topic is not None
    producer = Producer({"transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
                         **options.client, "transactional.id": scope.transactional_id})
    try:
        producer.init_transactions()
        if next_batch(options, scope) > scope.batch:
            _drain(rows)
            return Written(scope.partition, 0, skipped=True)
        producer.begin_transaction()
        futures = send_rows(producer, options, chain((first,), rows))
        producer.send_offsets_to_transaction(
            {TopicPartition(options.progress_topic, 0): OffsetAndMetadata(
                scope.batch + 1, json.dumps({"batch": scope.batch}))},
            scope.group_id)
        return Written(scope.partition, len(futures), producer.prepare_transaction())
    finally:
        # Leaves a prepared transaction open; aborts one that failed before.
        producer.close()


def complete(options: SinkOptions, messages: Sequence[WriterCommitMessage | None],
             commit: bool) -> None:
    """The driver's half: commit (or abort) the transactions the tasks prepared."""
    prepared = [m.transaction for m in messages
                if isinstance(m, Written) and m.transaction is not None]
    if not prepared:
        return
    with Admin(connection_settings(options.client)) as admin:
        admin.complete_transactions(prepared, commit=commit)


def next_batch(options: SinkOptions, scope: TaskScope) -> int:
    """The batch the task's progress says comes next: 0 when it never wrote."""
    assert options.progress_topic is not None
    tp = TopicPartition(options.progress_topic, 0)
    consumer = Consumer({**connection_settings(options.client), "group.id": scope.group_id,
                         "enable.auto.commit": "false"})
    try:
        committed = consumer.committed([tp])[tp]
    finally:
        consumer.close()
    return 0 if committed is None else committed.offset


def _drain(rows: Iterator[Row]) -> None:
    for _ in rows:
        pass
