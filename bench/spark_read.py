"""Read throughput of Spark's JVM Kafka connector and of the Moldau source on one broker.

    .venv/bin/python -m bench.spark_read [--records 1000000] [--size 100] [--partitions 2]

Starts a broker on a free loopback port, fills a topic with fixed-size records
(confluent-kafka, acks=1), then with one local[2] Spark session reads the whole topic through
format("kafka") and format("moldau") in turn (twice each, in alternation) and prints records/s
of each run. A run is `count(*)` and `sum(length(value))` over every row, so every record is
fetched and turned into a row.

Before Spark, it times the Moldau source's two stages on one partition in this process, as one
Spark task runs them: fetching record batches alone (Consumer.poll_batches), then fetching and
decoding them into Arrow batches (the source's read_range). And it reads the same number of
rows from a Python source that only yields ready Arrow batches (bench/spark_arrow_source.py):
what Spark's Python source path (worker, Arrow to the JVM, rows) costs by itself here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.confluent_throughput import free_port, produce, start_broker


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def task_stages(bootstrap: str, topic: str, partition: int) -> tuple[float, float]:
    """Records/s of one partition fetched alone, and fetched and decoded to Arrow."""
    from pyspark_moldau.offsets import OffsetRange
    from pyspark_moldau.reader import FETCH_DEFAULTS, ROWS_PER_BATCH, read_range
    from pyspark_moldau.schema import kafka_schema

    from moldau.client import Consumer, TopicPartition

    tp = TopicPartition(topic, partition)
    settings = {"bootstrap.servers": bootstrap, **FETCH_DEFAULTS}
    with Consumer({**settings, "enable.auto.commit": "false"}) as consumer:
        end = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek(tp, 0)
        started = time.perf_counter()
        while consumer.position(tp) < end:
            consumer.poll_batches(1.0, max_records=ROWS_PER_BATCH)
        fetch = end / (time.perf_counter() - started)
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_range(
        settings, kafka_schema(False), OffsetRange(topic, partition, 0, end), True, 120_000))
    assert rows == end, (rows, end)
    return fetch, end / (time.perf_counter() - started)


def read_all(spark, fmt: str, options: dict[str, str]) -> tuple[int, int, float]:  # noqa: ANN001
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = (spark.read.format(fmt).options(**options).load()
           .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0])
    return row.n, row.bytes, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each measurement; the best is reported (a shared machine)")
    args = parser.parse_args(argv)

    from e2e.spark.session import local_session

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as work:
        port = free_port()
        broker = start_broker(str(Path(work) / "data"), port)
        try:
            bootstrap = f"127.0.0.1:{port}"
            create_topic(bootstrap, "bench", args.partitions)
            elapsed = produce(bootstrap, "bench", args.records, args.size)
            print(f"produced {args.records} x {args.size} B in {elapsed:.1f} s")
            stages = [task_stages(bootstrap, "bench", 0) for _ in range(args.rounds)]
            print(f"one partition, no Spark: fetch {max(f for f, _ in stages):,.0f} "
                  f"records/s, fetch + decode to Arrow {max(d for _, d in stages):,.0f} "
                  f"records/s (best of {args.rounds})")
            # Spark's Python workers import the ready-Arrow source from this repository.
            os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
            spark = local_session(Path(work) / "spark", "moldau-spark-bench",
                                  conf={"spark.ui.showConsoleProgress": "false"})
            spark.sparkContext.setLogLevel("ERROR")
            from bench.spark_arrow_source import ReadyArrow

            spark.dataSource.register(ReadyArrow)
            kafka = {"kafka.bootstrap.servers": bootstrap, "subscribe": "bench"}
            sources = {"kafka": kafka, "moldau": kafka, "bench_ready_arrow": {
                "rows": str(args.records), "size": str(args.size),
                "partitions": str(args.partitions)}}
            best: dict[str, float] = {}
            # The first read of each warms up (JVM classes, Python workers, imports).
            for index, fmt in enumerate(list(sources) * (args.rounds + 1)):
                count, size, seconds = read_all(spark, fmt, sources[fmt])
                if count != args.records or size != args.records * args.size:
                    print(f"{fmt}: read {count} records, {size} B (want {args.records})")
                    return 1
                print(f"{fmt:>17}: {count / seconds:>10,.0f} records/s ({seconds:.1f} s)")
                if index >= len(sources):
                    best[fmt] = max(best.get(fmt, 0.0), count / seconds)
            for fmt, rate in best.items():
                print(f"best {fmt:>17}: {rate:>10,.0f} records/s, "
                      f"{rate * args.size / 2**20:,.0f} MiB/s of values")
            spark.stop()
        finally:
            broker.terminate()
            broker.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
