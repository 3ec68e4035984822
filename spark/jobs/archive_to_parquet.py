"""Topics archived to Parquet: every record once, by topic and day, with the query's progress
in a checkpoint. A streaming job to start from:

    spark-submit --master 'local[2]' spark/jobs/archive_to_parquet.py \\
        --bootstrap-servers localhost:9092 --topics orders,payments \\
        --path /data/archive --checkpoint /data/checkpoints/archive --available-now

Each row keeps the record whole: topic, partition, offset, timestamp, timestampType, key,
value and headers, in directories `topic=<topic>/date=<yyyy-MM-dd>` (the record timestamp's
day in UTC). Spark's file sink and the checkpoint make each record land once, also across
restarts: read the archive with Spark (`spark.read.parquet(path)`), which reads only the files
the sink committed (its `_spark_metadata` log).

Run it with `--available-now` from a scheduler (each run archives what arrived since the
last, then stops), or without to keep running, every `--trigger-interval`. `--pattern` reads
every topic matching a regular expression, also ones created later. `--format kafka` uses
Spark's own connector (add `--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0`);
the default, moldau, needs only `pip install moldau-spark`.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

COLUMNS = ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value",
           "headers"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topics", help="comma-separated topics")
    topics.add_argument("--pattern", help="regular expression of topic names")
    parser.add_argument("--path", required=True, help="the archive's directory")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--format", choices=("moldau", "kafka"), default="moldau")
    parser.add_argument("--max-offsets-per-trigger", type=int,
                        help="at most this many records per micro-batch")
    parser.add_argument("--available-now", action="store_true",
                        help="archive what the topics hold, then stop")
    parser.add_argument("--trigger-interval", default="1 minute")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = (SparkSession.builder.appName("archive-to-parquet")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    reader = (spark.readStream.format(args.format)
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("startingOffsets", "earliest").option("includeHeaders", "true"))
    if args.pattern:
        reader = reader.option("subscribePattern", args.pattern)
    else:
        reader = reader.option("subscribe", args.topics)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    records = reader.load().select(*COLUMNS, F.to_date("timestamp").alias("date"))
    trigger = {"availableNow": True} if args.available_now \
        else {"processingTime": args.trigger_interval}
    query = (records.writeStream.format("parquet").partitionBy("topic", "date")
             .option("path", args.path).option("checkpointLocation", args.checkpoint)
             .trigger(**trigger).start())
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
