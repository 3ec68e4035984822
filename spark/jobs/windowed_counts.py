"""Orders per store per minute: a windowed aggregation with a watermark, from one topic into
another. A streaming job to start from:

    spark-submit --master 'local[2]' --conf spark.sql.shuffle.partitions=2 \\
        spark/jobs/windowed_counts.py --bootstrap-servers localhost:9092 \\
        --input orders --output orders-per-minute \\
        --checkpoint /tmp/checkpoints/orders-per-minute

Input records carry JSON values, `{"store": "s1", "amount": 12.50, "ts": "2026-01-01T10:00:05Z"}`,
whose `ts` is the event time. Every store and window of `--window` (1 minute) gets one output
record once the watermark, the latest event time seen minus `--watermark` (30 seconds), has
passed the window's end: key the store, value JSON
`{"store": "s1", "window_start": "2026-01-01T10:00:00Z", "window_end": "2026-01-01T10:01:00Z",
"orders": 3, "amount": 41.5}`. Orders that arrive after their window closed are dropped, as
Spark drops rows older than the watermark.

`--format moldau` (the default) reads and writes with the moldau-spark source and sink (pip
install moldau-spark, no JVM jar); `--format kafka` with Spark's own connector (add
`--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0`). `--exactly-once` makes the
Moldau sink transactional (docs/spark.md). `--available-now` processes what the input holds
and stops, instead of running every `--trigger-interval`.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "store STRING, amount DECIMAL(12, 2), ts TIMESTAMP"
ISO_UTC = "yyyy-MM-dd'T'HH:mm:ssXXX"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--input", required=True, help="topic of orders")
    parser.add_argument("--output", required=True, help="topic of counts per window")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--format", choices=("moldau", "kafka"), default="moldau")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="30 seconds")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="where a new query starts (a restart goes on from its checkpoint)")
    parser.add_argument("--exactly-once", action="store_true",
                        help="transactional writes (format moldau only)")
    parser.add_argument("--available-now", action="store_true",
                        help="process what the input holds, then stop")
    parser.add_argument("--trigger-interval", default="10 seconds")
    args = parser.parse_args(argv)
    if args.exactly_once and args.format != "moldau":
        parser.error("--exactly-once needs --format moldau")
    return args


def counts_per_window(orders: DataFrame, window: str, watermark: str) -> DataFrame:
    """The Kafka rows of orders -> one row (key, value) per store and closed window."""
    parsed = orders.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
                           .alias("order")).select("order.*")
    counted = (parsed.withWatermark("ts", watermark)
               .groupBy(F.window("ts", window), "store")
               .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount")))
    return counted.select(
        F.col("store").alias("key"),
        F.to_json(F.struct(
            "store",
            F.date_format("window.start", ISO_UTC).alias("window_start"),
            F.date_format("window.end", ISO_UTC).alias("window_end"),
            "orders", "amount")).alias("value"))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = (SparkSession.builder.appName("windowed-counts")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    orders = (spark.readStream.format(args.format)
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.input)
              .option("startingOffsets", args.starting_offsets).load())
    writer = (counts_per_window(orders, args.window, args.watermark).writeStream
              .format(args.format).outputMode("append")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    if args.exactly_once:
        writer = writer.option("exactlyOnce", "true")
    trigger = {"availableNow": True} if args.available_now \
        else {"processingTime": args.trigger_interval}
    query = writer.trigger(**trigger).start()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
