"""The sink's options and columns, checked as Spark's Kafka sink checks them, with its messages,
plus `exactlyOnce` and where it keeps its progress."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from pyspark_moldau.options import OptionError, client_settings, parse_boolean
from pyspark_moldau.schema import HEADERS_TYPE

_TEXT_OR_BYTES = (StringType(), BinaryType())


@dataclass(frozen=True)
class SinkOptions:
    client: dict[str, str]
    topic: str | None
    exactly_once: bool = False
    # exactlyOnce records each write task's last batch on partition 0 of this topic.
    progress_topic: str | None = None


def sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    opts = {key.lower(): value for key, value in options.items()}
    client = client_settings(options, "producer")
    _check_client(client)
    exactly_once = parse_boolean(opts, "exactlyonce", "exactlyOnce", False)
    topic = opts.get("topic")
    _check_columns(schema, topic)
    if not exactly_once:
        return SinkOptions(client, topic)
    if client.get("enable.idempotence", "true").strip().lower() == "false":
        raise OptionError("Kafka option 'enable.idempotence' cannot be false with "
                          "'exactlyOnce': transactions need the idempotent producer")
    progress = opts.get("progresstopic") or topic
    if not progress:
        raise OptionError("Option 'exactlyOnce' needs the 'topic' option, or 'progressTopic' "
                          "naming an existing topic when the rows carry their topic")
    return SinkOptions(client, topic, exactly_once=True, progress_topic=progress.strip())


def _check_client(client: dict[str, str]) -> None:
    for name in client:
        lowered = name.lower()
        if lowered in ("key.serializer", "value.serializer"):
            kind = lowered.split(".")[0]
            raise OptionError(f"Kafka option '{name}' is not supported as {kind}s are "
                              f"serialized as byte arrays. Use DataFrame operations to "
                              f"explicitly serialize the {kind}s into either strings or "
                              f"byte arrays.")
        if lowered == "transactional.id":
            raise OptionError("Kafka option 'transactional.id' is not supported: with "
                              "'exactlyOnce' set to 'true' the sink gives each write task "
                              "its own")


def _check_columns(schema: StructType, topic: str | None) -> None:
    """The columns Spark's Kafka sink takes, with its messages."""
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


def _check_type(columns: dict[str, DataType], name: str, allowed: tuple[DataType, ...],
                wanted: str) -> None:
    found = columns.get(name)
    if found is not None and found not in allowed:
        raise OptionError(f"{name} attribute unsupported type {found.simpleString()}. "
                          f"{name} must be a(n) {wanted}")
