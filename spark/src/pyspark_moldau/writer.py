"""The sink: rows with Spark's Kafka sink columns (topic, key, value, partition, headers)
produced with the Moldau client's idempotent producer, at least once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from moldau.client import Producer, RecordFuture
from pyspark_moldau.options import OptionError, client_settings
from pyspark_moldau.schema import HEADERS_TYPE

_REFUSED = ("key.serializer", "value.serializer")
_TEXT_OR_BYTES = (StringType(), BinaryType())


@dataclass(frozen=True)
class SinkOptions:
    client: dict[str, str]
    topic: str | None


@dataclass
class Written(WriterCommitMessage):
    records: int


def sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Checks the options and the columns as Spark's Kafka sink does, with its messages."""
    opts = {key.lower(): value for key, value in options.items()}
    if opts.get("exactlyonce", "false").strip().lower() == "true":
        raise OptionError("Option 'exactlyOnce' is not available yet: it needs Moldau's "
                          "transactional producer. Without it the sink writes at least once.")
    client = client_settings(options, "producer")
    for name in client:
        if name.lower() in _REFUSED:
            kind = name.split(".")[0]
            raise OptionError(f"Kafka option '{name}' is not supported as {kind}s are "
                              f"serialized as byte arrays. Use DataFrame operations to "
                              f"explicitly serialize the {kind}s into either strings or "
                              f"byte arrays.")
    topic = opts.get("topic")
    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if topic is None:
        if "topic" not in columns:
            raise OptionError("topic option required when no 'topic' attribute is present. "
                              "Use the topic option for setting a topic.")
        _check_type(columns, "topic", (StringType(),), "string")
    if "value" not in columns:
        raise OptionError("Required attribute 'value' not found")
    _check_type(columns, "value", _TEXT_OR_BYTES, "string or binary")
    _check_type(columns, "key", _TEXT_OR_BYTES, "string or binary")
    _check_type(columns, "partition", (IntegerType(),), "int")
    _check_type(columns, "headers", (HEADERS_TYPE, ArrayType(HEADERS_TYPE.elementType, False)),
                "array<struct<key:string,value:binary>>")
    return SinkOptions(client, topic)


def _check_type(columns: dict[str, DataType], name: str, allowed: tuple[DataType, ...],
                wanted: str) -> None:
    found = columns.get(name)
    if found is not None and found not in allowed:
        raise OptionError(f"{name} attribute unsupported type {found.simpleString()}. "
                          f"{name} must be a(n) {wanted}")


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]


def produce_rows(options: SinkOptions, rows: Iterator[Row]) -> Written:
    """Send every row and wait for every acknowledgement; a failed send fails the task, so
    Spark retries it (at least once)."""
    producer = Producer(options.client)
    try:
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
        producer.flush()
        for future in futures:
            future.get()
        return Written(len(futures))
    finally:
        producer.close()


class MoldauBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = sink_options(options, schema)

    def write(self, iterator: Iterator[Row]) -> Written:
        return produce_rows(self.options, iterator)


class MoldauStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = sink_options(options, schema)

    def write(self, iterator: Iterator[Row]) -> Written:
        return produce_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every record of the batch is acknowledged already; nothing to finish."""
