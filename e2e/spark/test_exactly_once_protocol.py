"""The exactly-once sink's protocol against a real broker, without Spark: each call of
write_prepared is one attempt of a write task, as a Spark worker makes it, and complete() is
the driver's commit (or abort) of the messages of the attempts Spark counted."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pyspark.sql import Row
from pyspark.sql.types import StringType, StructField, StructType
from pyspark_moldau.exactly_once import (
    TaskScope,
    Written,
    complete,
    next_batch,
    write_prepared,
)
from pyspark_moldau.sink_options import SinkOptions, sink_options

from e2e.support import ck_values, kp_create_topic, kp_offsets, unique, wait_until
from moldau.client.errors import (
    ProducerFencedError,  # type: ignore[attr-defined]
    TransactionAbortableError,  # type: ignore[attr-defined]
)

SCHEMA = StructType([StructField("value", StringType())])


def rows(prefix: str, count: int) -> list[Row]:
    return [Row(value=f"{prefix}{i}") for i in range(count)]


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


@pytest.fixture
def sink(module_broker) -> SinkOptions:
    topic = unique("eos-out")
    kp_create_topic(module_broker.bootstrap, topic)
    return sink_options({"kafka.bootstrap.servers": module_broker.bootstrap, "topic": topic,
                         "exactlyOnce": "true"}, SCHEMA)


def log_end(sink: SinkOptions) -> int:
    assert sink.topic is not None
    return kp_offsets(sink.client["bootstrap.servers"], sink.topic)[1]


def read(sink: SinkOptions, isolation: str = "read_committed") -> list[bytes]:
    """The topic's values; read_committed waits until no transaction is open."""
    assert sink.topic is not None
    return ck_values(sink.client["bootstrap.servers"], sink.topic, 1, isolation)[0]


def commit(sink: SinkOptions, *messages: Written) -> None:
    complete(sink, list(messages), commit=True)


def test_rows_commit_with_the_batch_and_a_replay_is_skipped(sink) -> None:
    scope = TaskScope(unique("query"), batch=3, partition=1)
    assert next_batch(sink, scope) == 0
    first = write_prepared(sink, scope, rows("a", 5))
    assert (first.partition, first.records, first.skipped) == (1, 5, False)
    assert first.transaction is not None
    # Prepared, not committed: in the log, and read_committed sees none of it yet.
    assert read(sink, "read_uncommitted") == values("a", 5)
    commit(sink, first)
    assert read(sink) == values("a", 5)
    assert next_batch(sink, scope) == 4
    # The same batch again: Spark replays it after the driver crashed before its commit log.
    assert write_prepared(sink, scope, rows("a", 5)) == Written(1, 0, skipped=True)
    second = write_prepared(sink, replace(scope, batch=4), rows("b", 2))
    # Another task partition of the same query keeps its own progress.
    other = write_prepared(sink, replace(scope, partition=0), rows("c", 1))
    commit(sink, second, other)
    assert read(sink) == values("a", 5) + values("b", 2) + values("c", 1)


def test_an_attempt_spark_did_not_count_never_commits(sink) -> None:
    """A task failed upstream and its writer saw the input end early: it prepared a part of
    the rows, but Spark drops its message; the retry's rows are the ones committed."""
    scope = TaskScope(unique("query"), batch=0, partition=0)
    truncated = write_prepared(sink, scope, rows("a", 3))
    retry = write_prepared(sink, scope, rows("a", 5))
    assert retry.records == 5
    commit(sink, retry)
    # The first attempt's records are in the log, aborted by the retry's init_transactions.
    assert read(sink, "read_uncommitted") == values("a", 3) + values("a", 5)
    assert read(sink) == values("a", 5)
    # Its transaction cannot be committed any more.
    with pytest.raises(ProducerFencedError):
        commit(sink, truncated)


def test_a_failed_attempt_is_aborted_and_its_retry_writes_once(sink) -> None:
    scope = TaskScope(unique("query"), batch=0, partition=0)

    def failing() -> object:
        yield from rows("a", 3)
        # Fail once the attempt's records are in the log, so there is something to abort.
        wait_until(lambda: log_end(sink) >= 3, 30, "the first attempt's records in the log")
        raise RuntimeError("the task failed half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        write_prepared(sink, scope, failing())
    # Closing the producer aborted it at once (its marker follows the 3 records).
    wait_until(lambda: log_end(sink) == 4, 30, "the abort marker")
    commit(sink, write_prepared(sink, scope, rows("a", 5)))
    assert read(sink) == values("a", 5)


def test_a_zombie_attempt_is_fenced_by_the_next(sink) -> None:
    scope = TaskScope(unique("query"), batch=7, partition=2)
    retries: list[Written] = []

    def zombie() -> object:
        yield from rows("z", 2)
        # A second attempt of the same task starts and finishes while this one still runs.
        retries.append(write_prepared(sink, scope, rows("a", 4)))
        yield from rows("late", 2)

    # Fenced at its prepare, or earlier at a send of its old epoch (then abortable only).
    with pytest.raises((ProducerFencedError, TransactionAbortableError)):
        write_prepared(sink, scope, zombie())
    commit(sink, *retries)
    assert read(sink) == values("a", 4)
    assert next_batch(sink, scope) == 8


def test_the_driver_aborts_a_failed_batch(sink) -> None:
    scope = TaskScope(unique("job"), batch=0, partition=0)
    prepared = write_prepared(sink, scope, rows("a", 2))
    complete(sink, [prepared, None], commit=False)
    wait_until(lambda: log_end(sink) == 3, 30, "the abort marker")
    assert read(sink) == []
    assert next_batch(sink, scope) == 0
