"""A Spark application that copies one topic to another through format("moldau") while
failing on purpose, run by the exactly-once tests in a process of its own:

    python -m e2e.spark.failing_app SPEC_JSON

- a task fails once: a UDF raises, or kills its own Python worker with SIGKILL, at the row
  whose value is `fail_value` (once per `fail_marker` file), so Spark retries the task; before
  failing it waits until the row `sent_value` (an earlier row of the same task) is in the
  sink's log, so the failed attempt has written something;
- the driver stalls in the sink's commit of micro-batch `stall_at_batch`, after every task
  wrote and before Spark's commit log, and writes `stall_marker` so the test can kill -9 it:
  before the sink commits (`stall_when` "before") or after ("after").

The sink is the Moldau sink with a journal: every committed micro-batch appends its tasks'
commit messages to `journal` (one JSON line per batch). Workers import this module, so the
repository root must be on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType
from pyspark_moldau.source import MoldauDataSource
from pyspark_moldau.writer import MoldauStreamWriter


class JournalingSink(MoldauDataSource):
    @classmethod
    def name(cls) -> str:
        return "moldau_journaling"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return JournalingStreamWriter(self.options, schema)


class JournalingStreamWriter(MoldauStreamWriter):
    def __init__(self, options: dict, schema: StructType) -> None:
        super().__init__(options, schema)
        self.journal = Path(options["journal"])
        self.stall_at = int(options.get("stallAtBatch", "-1"))
        self.stall_after_commit = options.get("stallWhen") == "after"
        self.stall_marker = options.get("stallMarker")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        stall = batchId == self.stall_at and self.stall_marker
        if not stall or self.stall_after_commit:
            super().commit(messages, batchId)
        with self.journal.open("a") as journal:
            journal.write(json.dumps({"batch": batchId, "pid": os.getpid(),
                                      "tasks": [asdict(m) for m in messages if m]}) + "\n")
        if stall:
            Path(self.stall_marker).write_text(str(batchId))
            while True:  # until the test kills the driver
                time.sleep(60)


def fail_once(value: str | None, spec: dict) -> str | None:
    """`value`, except that the first task to see `fail_value` fails (the marker file,
    created exclusively, makes it the only one)."""
    if value == spec["fail_value"]:
        try:
            os.close(os.open(spec["fail_marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return value
        wait_for_value(spec["bootstrap"], spec["sink"], spec["sent_value"].encode())
        if spec.get("fail_how") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"failing once at {value}")
    return value


def wait_for_value(bootstrap: str, topic: str, value: bytes, timeout: float = 60) -> None:
    """Until a record of `topic` (committed or not) has `value`."""
    from moldau.client import Consumer, TopicPartition

    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for(topic)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(record.value == value for record in consumer.poll(0.5)):
                return
    raise AssertionError(f"{value!r} did not reach {topic} in {timeout} s")


def main(spec: dict) -> int:
    from pyspark.sql import functions as F

    from e2e.spark.session import local_session

    spark = local_session(Path(spec["work"]), "moldau-failing-app", task_attempts=4,
                          connector=False,
                          # Small Arrow batches: a task's first rows reach the sink (and are
                          # sent) before its UDF reaches the failing row.
                          conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "10"})
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(JournalingSink)
    failing = F.udf(lambda v: fail_once(v, spec), "string", useArrow=True)
    bootstrap = spec["bootstrap"]
    sink_options = {"kafka.bootstrap.servers": bootstrap, "topic": spec["sink"],
                    "exactlyOnce": str(spec["exactly_once"]).lower()}
    if spec["mode"] == "batch":
        rows = (spark.read.format("moldau").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", spec["source"]).load())
        rows.select(failing(F.col("value").cast("string")).alias("value")).write \
            .format("moldau").mode("append").options(**sink_options).save()
        return 0
    rows = (spark.readStream.format("moldau").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", spec["source"]).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(spec["max_offsets"])).load())
    query = (rows.select(failing(F.col("value").cast("string")).alias("value")).writeStream
             .format("moldau_journaling").options(**sink_options)
             .option("journal", spec["journal"])
             .option("stallAtBatch", str(spec.get("stall_at_batch", -1)))
             .option("stallWhen", spec.get("stall_when", "before"))
             .option("stallMarker", spec.get("stall_marker", ""))
             .option("checkpointLocation", spec["checkpoint"])
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Through the module's own name, so Spark pickles its classes and functions by reference.
    from e2e.spark.failing_app import main as run

    sys.exit(run(json.loads(sys.argv[1])))
