"""Spark's Kafka rows (key, value, topic, partition, offset, timestamp, headers) as `Rec`s,
so they compare field by field with what the tests produced."""

from __future__ import annotations

from e2e.support import Rec


def kafka_recs(df, topic: str | None = None) -> list[Rec]:  # noqa: ANN001 - a DataFrame
    """Collect a DataFrame with the Kafka source's schema; every row must be of `topic`
    when given, and of CreateTime."""
    from pyspark.sql import functions as F

    has_headers = "headers" in df.columns
    columns = ["topic", "partition", "offset", "key", "value", "timestampType",
               F.unix_millis("timestamp").alias("ts")]
    if has_headers:
        columns.append("headers")
    out = []
    for row in df.select(*columns).collect():
        if topic is not None:
            assert row.topic == topic, row
        assert row.timestampType == 0, f"timestampType {row.timestampType} (want CreateTime)"
        headers = tuple((h.key, _bytes(h.value)) for h in row.headers or ()) \
            if has_headers else ()
        out.append(Rec(row.partition, _bytes(row.key), _bytes(row.value), headers, row.ts,
                       row.offset))
    return out


def _bytes(value: bytearray | None) -> bytes | None:
    return None if value is None else bytes(value)
