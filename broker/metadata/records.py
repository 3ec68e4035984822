"""Metadata records: the facts the controller writes to the metadata log.

Each record is immutable; the image is the fold of every record in log order. Records are
serialized as small JSON objects with a `type` tag: the log is low volume and stays readable
with ordinary tools.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(frozen=True)
class TopicRecord:
    TYPE: ClassVar[str] = "topic"
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True)
class PartitionRecord:
    TYPE: ClassVar[str] = "partition"
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True)
class ConfigRecord:
    """Sets (or, with value None, removes) one config override of a resource."""

    TYPE: ClassVar[str] = "config"
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True)
class RemoveTopicRecord:
    TYPE: ClassVar[str] = "remove_topic"
    topic_id: uuid.UUID


@dataclass(frozen=True)
class ProducerIdsRecord:
    """The next producer id not yet handed out: ids below it belong to some block."""

    TYPE: ClassVar[str] = "producer_ids"
    broker_id: int
    next_producer_id: int


@dataclass(frozen=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: uuid.UUID
    endpoints: tuple[tuple[str, str, int], ...]  # (listener, host, port)
    rack: str | None = None


MetadataRecord = (TopicRecord | PartitionRecord | ConfigRecord | RemoveTopicRecord
                  | ProducerIdsRecord | RegisterBrokerRecord)
_TYPES: dict[str, type] = {cls.TYPE: cls for cls in (
    TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord, ProducerIdsRecord,
    RegisterBrokerRecord)}


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def encode_record(record: MetadataRecord) -> bytes:
    payload = {"type": record.TYPE, **{k: _plain(v) for k, v in asdict(record).items()}}
    return json.dumps(payload, separators=(",", ":")).encode()


def decode_record(data: bytes) -> MetadataRecord:
    payload = json.loads(data)
    cls = _TYPES[payload.pop("type")]
    values: dict[str, Any] = {}
    for field in fields(cls):
        value = payload[field.name]
        if field.type in ("uuid.UUID",):
            value = uuid.UUID(value)
        elif isinstance(value, list):
            value = tuple(tuple(item) if isinstance(item, list) else item for item in value)
        values[field.name] = value
    return cls(**values)
