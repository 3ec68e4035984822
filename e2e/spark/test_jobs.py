"""The example jobs of spark/jobs/, run with spark-submit on local[2] against a real broker,
their output checked exactly: the windowed aggregation through Spark's Kafka connector and
through the Moldau source and sink (the same rows), and the Parquet archiver over two runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from e2e.spark.rows import kafka_recs
from e2e.spark.session import spark_submit
from e2e.support import (
    REPO_ROOT,
    Rec,
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(900)

JOBS = REPO_ROOT / "spark" / "jobs"
# The records carry timestamps of fixed past days: retention must not delete them.
KEEP = {"retention.ms": "-1"}


def submit(job: str, args: list[str], work: Path, connector: bool = False) -> None:
    proc = spark_submit(JOBS / job, args, work, connector=connector)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"spark-submit {job} exited {proc.returncode}:\n{tail}"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def order(ts: str, store: str, amount: str) -> Rec:
    value = json.dumps({"store": store, "amount": float(amount), "ts": f"2026-01-01T{ts}Z"})
    return Rec(0, store.encode(), value.encode(), (), ms(f"2026-01-01T{ts}Z"))


# Two runs of the job over the same checkpoint. After the first, the watermark is the latest
# event time minus 30 s: 10:03:20 - 30 s = 10:02:50, so the windows of 10:00 and 10:01 close.
FIRST_RUN = [order("10:00:05", "s1", "10.00"), order("10:00:40", "s2", "5.25"),
             order("10:00:59", "s1", "2.50"), order("10:01:10", "s1", "1.00"),
             order("10:01:30", "s2", "7.75"), order("10:02:20", "s1", "3.00"),
             order("10:03:20", "s2", "4.00"),
             # Out of order, but within the first run's batch: counted.
             order("10:00:30", "s2", "1.00")]
# In the second: 10:01:30 is older than the watermark (dropped), 10:02:55 is not; the
# watermark moves to 10:05:40 - 30 s = 10:05:10, closing the windows up to 10:04.
SECOND_RUN = [order("10:01:30", "s1", "100.00"), order("10:02:55", "s2", "6.00"),
              order("10:04:10", "s1", "8.00"), order("10:05:40", "s2", "9.00")]
# (store, window start, orders, amount); 10:05's window stays open.
EXPECTED = [("s1", "10:00", 2, "12.50"), ("s1", "10:01", 1, "1.00"), ("s1", "10:02", 1, "3.00"),
            ("s1", "10:04", 1, "8.00"), ("s2", "10:00", 2, "6.25"), ("s2", "10:01", 1, "7.75"),
            ("s2", "10:02", 1, "6.00"), ("s2", "10:03", 1, "4.00")]


def window_rows(bootstrap: str, topic: str) -> list[tuple[str, str, int, Decimal]]:
    rows = []
    for rec in kp_consume_all(bootstrap, topic, isolation_level="read_committed"):
        value = json.loads(rec.value, parse_float=Decimal)
        start = datetime.fromisoformat(value["window_start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(value["window_end"].replace("Z", "+00:00"))
        assert (end - start).total_seconds() == 60 and rec.key == value["store"].encode()
        rows.append((value["store"], start.strftime("%H:%M"), value["orders"],
                     value["amount"]))
    return sorted(rows)


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
    assert window_rows(bootstrap, counts) == [
        (store, start, n, Decimal(amount)) for store, start, n, amount in EXPECTED]


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
