"""Moldau's Python client for Kafka-compatible clusters.

- `AsyncProducer` / `Producer`: produce records (asyncio / threads).
- `AsyncConsumer` / `Consumer`: consume records, alone or in a consumer group.
- `AsyncAdmin` / `Admin`: manage topics, configs, groups and offsets.

Settings use Kafka's names (`{"bootstrap.servers": "localhost:9092"}`); errors are typed
exceptions named after Kafka's error codes (see `moldau.client.errors`).

Names are imported on first use, so tools that need one part (or only the command-line
parsers) do not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moldau.client.admin import Admin, AsyncAdmin, ConfigResource, NewPartitions, NewTopic
    from moldau.client.admin.types import OffsetAndMetadata
    from moldau.client.consumer import (
        AsyncConsumer,
        Consumer,
        ConsumerRebalanceListener,
        ConsumerRecord,
        ConsumerRecords,
        FetchedBatch,
        OffsetAndTimestamp,
    )
    from moldau.client.errors import KafkaError, KafkaTimeoutError
    from moldau.client.producer import AsyncProducer, Producer, RecordFuture
    from moldau.client.types import Node, PreparedTransaction, RecordMetadata, TopicPartition

_EXPORTS = {
    "Admin": "moldau.client.admin",
    "AsyncAdmin": "moldau.client.admin",
    "ConfigResource": "moldau.client.admin",
    "NewPartitions": "moldau.client.admin",
    "NewTopic": "moldau.client.admin",
    "AsyncConsumer": "moldau.client.consumer",
    "Consumer": "moldau.client.consumer",
    "ConsumerRebalanceListener": "moldau.client.consumer",
    "ConsumerRecord": "moldau.client.consumer",
    "ConsumerRecords": "moldau.client.consumer",
    "FetchedBatch": "moldau.client.consumer",
    "OffsetAndTimestamp": "moldau.client.consumer",
    "OffsetAndMetadata": "moldau.client.admin.types",
    "KafkaError": "moldau.client.errors",
    "KafkaTimeoutError": "moldau.client.errors",
    "AsyncProducer": "moldau.client.producer",
    "Producer": "moldau.client.producer",
    "RecordFuture": "moldau.client.producer",
    "Node": "moldau.client.types",
    "PreparedTransaction": "moldau.client.types",
    "RecordMetadata": "moldau.client.types",
    "TopicPartition": "moldau.client.types",
}

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ConfigResource",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "FetchedBatch",
    "KafkaError",
    "KafkaTimeoutError",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PreparedTransaction",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "TopicPartition",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'moldau.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
