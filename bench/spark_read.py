"""Read throughput of Spark's JVM Kafka connector and of the Moldau source on one broker.

    .venv/bin/python -m bench.spark_read [--records 1000000] [--size 100] [--partitions 2]

Starts a broker on a free loopback port, fills a topic with fixed-size records
(confluent-kafka, acks=1), then with one local[2] Spark session reads the whole topic through
format("kafka") and format("moldau") in turn (twice each, in alternation) and prints records/s
of each run. A run is `count(*)` and `sum(length(value))` over every row, so every record is
fetched and turned into a row.
"""

from __future__ import annotations

import argparse
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


def read_all(spark, fmt: str, bootstrap: str, topic: str) -> tuple[int, int, float]:  # noqa: ANN001
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).load()
           .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0])
    return row.n, row.bytes, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
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
            spark = local_session(Path(work) / "spark", "moldau-spark-bench")
            spark.sparkContext.setLogLevel("ERROR")
            for fmt in ("kafka", "moldau", "kafka", "moldau"):
                count, size, seconds = read_all(spark, fmt, bootstrap, "bench")
                if count != args.records or size != args.records * args.size:
                    print(f"{fmt}: read {count} records, {size} B (want {args.records})")
                    return 1
                print(f"{fmt:>6}: {count / seconds:>10,.0f} records/s ({seconds:.1f} s)")
            spark.stop()
        finally:
            broker.terminate()
            broker.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
