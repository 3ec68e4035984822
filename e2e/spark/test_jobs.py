"""The example jobs of spark/jobs/, run with spark-submit on local[2] against a real broker,
their output checked exactly: the windowed aggregation through Spark's Kafka connector and
through the Moldau source and sink (the same rows), and the Parquet archiver over two runs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from e2e.spark.orders import FIRST_RUN, KEEP, SECOND_RUN, expected_rows, ms, window_rows
from e2e.spark.rows import kafka_recs
from e2e.spark.session import spark_submit
from e2e.support import (
    REPO_ROOT,
    Rec,
    assert_records_equal,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(900)

JOBS = REPO_ROOT / "spark" / "jobs"


def submit(job: str, args: list[str], work: Path, connector: bool = False) -> None:
    proc = spark_submit(JOBS / job, args, work, connector=connector)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"spark-submit {job} exited {proc.returncode}:\n{tail}"


@pytest.mark.parametrize(("fmt", "extra"), [("kafka", []), ("moldau", ["--exactly-once"])])
def test_windowed_counts_with_a_watermark(module_broker, tmp_path, fmt, extra) -> None:
    bootstrap = module_broker.bootstrap
    orders, counts = unique("job-orders"), unique("job-counts")
    kp_create_topic(bootstrap, orders, configs=KEEP)
    kp_create_topic(bootstrap, counts)
    args = ["--bootstrap-servers", bootstrap, "--input", orders, "--output", counts,
            "--checkpoint", str(tmp_path / "checkpoint"), "--format", fmt, "--available-now",
            *extra]
    for run in (FIRST_RUN, SECOND_RUN):
        kp_produce(bootstrap, orders, run)
        submit("windowed_counts.py", args, tmp_path / "spark", connector=fmt == "kafka")
    assert window_rows(bootstrap, counts) == expected_rows()


def test_archive_to_parquet_over_runs(spark, module_broker, tmp_path) -> None:
    bootstrap = module_broker.bootstrap
    prefix = unique("job-archive")
    first, second, later = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    # Record timestamps one second apart across midnight UTC: two days in the archive.
    midnight = ms("2026-03-02T00:00:00Z")
    produced: dict[str, list[Rec]] = {}

    def produce(topic: str, count: int, seed: int) -> None:
        records = make_records(count, partitions=2, seed=seed, ts_base=midnight - 5000)
        kp_produce(bootstrap, topic, records)
        produced[topic] = with_offsets(produced.get(topic, []) + records)

    for topic in (first, second):
        kp_create_topic(bootstrap, topic, partitions=2, configs=KEEP)
    produce(first, 12, 1)
    produce(second, 8, 2)
    args = ["--bootstrap-servers", bootstrap, "--pattern", f"{prefix}-.*",
            "--path", str(tmp_path / "archive"), "--checkpoint", str(tmp_path / "checkpoint"),
            "--available-now", "--max-offsets-per-trigger", "7"]
    submit("archive_to_parquet.py", args, tmp_path / "spark")
    # More records, and a topic the pattern matches created between the runs.
    produce(first, 6, 3)
    kp_create_topic(bootstrap, later, partitions=2, configs=KEEP)
    produce(later, 5, 4)
    submit("archive_to_parquet.py", args, tmp_path / "spark")

    from pyspark.sql import functions as F

    archive = spark.read.parquet(str(tmp_path / "archive"))
    for topic, records in produced.items():
        rows = archive.where(archive.topic == topic)
        assert_records_equal(kafka_recs(rows, topic), records)
        for row in rows.select(F.unix_millis("timestamp").alias("ms"), "date").collect():
            assert row.date == datetime.fromtimestamp(row.ms / 1000, UTC).date()
    days = {p.name for p in (tmp_path / "archive").glob("topic=*/date=*")}
    assert days == {"date=2026-03-01", "date=2026-03-02"}
    assert {p.name for p in (tmp_path / "archive").glob("topic=*")} == {
        f"topic={t}" for t in produced}
