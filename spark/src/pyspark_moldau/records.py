"""Rows with the Kafka sink's columns (topic, key, value, partition, headers) sent as records."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Row

from moldau.client import Producer, RecordFuture
from pyspark_moldau.options import OptionError
from pyspark_moldau.sink_options import SinkOptions


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]


def send_rows(producer: Producer, options: SinkOptions, rows: Iterable[Row]
              ) -> list[RecordFuture]:
    """Queue every row with the producer; the futures tell how each one went."""
    futures: list[RecordFuture] = []
    for row in rows:
        fields = row.asDict()
        topic = options.topic or fields.get("topic")
        if topic is None:
            raise OptionError("Null topic present in the data. Use the topic option for "
                              "setting a topic.")
        headers = [(h["key"], _bytes(h["value"])) for h in fields.get("headers") or ()]
        futures.append(producer.send(topic, value=_bytes(fields.get("value")),
                                     key=_bytes(fields.get("key")), headers=headers,
                                     partition=fields.get("partition")))
    return futures
