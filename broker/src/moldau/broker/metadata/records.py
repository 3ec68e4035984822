"""Metadata records: the facts the controller writes to the metadata log.

Each record is immutable; the image is the fold of every record in log order. Records are
serialized as small JSON objects with a `type` tag: the log is low volume and stays readable
with ordinary tools.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
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
    leader: int  # -1: no leader (every replica of the ISR is fenced)
    leader_epoch: int = 0
    partition_epoch: int = 0
    # KIP-455: replicas being added or removed by an ongoing reassignment.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


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
    fenced: bool = True  # a new registration is fenced until the broker has caught up
    # Told apart from the same broker's earlier lives; -1 (older logs): the record's offset.
    broker_epoch: int = -1


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    """Fences or unfences a broker, or marks it as shutting down (None: unchanged)."""

    TYPE: ClassVar[str] = "broker_change"
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    TYPE: ClassVar[str] = "unregister_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (Kafka's wire type: 1 SHA-256, 2 SHA-512);
    the salt and keys in base64. Never the password."""

    TYPE: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: int
    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass(frozen=True)
class RemoveUserScramCredentialRecord:
    TYPE: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: int


@dataclass(frozen=True)
class AccessControlEntryRecord:
    """An ACL (Kafka's AccessControlEntryRecord), its enums as their wire codes."""

    TYPE: ClassVar[str] = "access_control_entry"
    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class RemoveAccessControlEntryRecord:
    TYPE: ClassVar[str] = "remove_access_control_entry"
    id: uuid.UUID


MetadataRecord = (TopicRecord | PartitionRecord | ConfigRecord | RemoveTopicRecord
                  | ProducerIdsRecord | RegisterBrokerRecord | BrokerRegistrationChangeRecord
                  | UnregisterBrokerRecord | UserScramCredentialRecord
                  | RemoveUserScramCredentialRecord | AccessControlEntryRecord
                  | RemoveAccessControlEntryRecord)
_TYPES: dict[str, type] = {cls.TYPE: cls for cls in (
    TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord, ProducerIdsRecord,
    RegisterBrokerRecord, BrokerRegistrationChangeRecord, UnregisterBrokerRecord,
    UserScramCredentialRecord, RemoveUserScramCredentialRecord, AccessControlEntryRecord,
    RemoveAccessControlEntryRecord)}


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def _to_plain(record: MetadataRecord) -> dict[str, Any]:
    return {"type": record.TYPE, **{k: _plain(v) for k, v in asdict(record).items()}}


def encode_record(record: MetadataRecord) -> bytes:
    return json.dumps(_to_plain(record), separators=(",", ":")).encode()


def encode_records(records: Iterable[MetadataRecord]) -> bytes:
    """Several records as one JSON array: one metadata log entry, applied atomically."""
    return json.dumps([_to_plain(record) for record in records], separators=(",", ":")).encode()


def decode_record(data: bytes) -> MetadataRecord:
    return _from_plain(json.loads(data))


def decode_records(data: bytes) -> list[MetadataRecord]:
    payload = json.loads(data)
    if isinstance(payload, dict):
        return [_from_plain(payload)]
    return [_from_plain(item) for item in payload]


def _from_plain(payload: dict[str, Any]) -> MetadataRecord:
    cls = _TYPES[payload.pop("type")]
    values: dict[str, Any] = {}
    for field in fields(cls):
        if field.name not in payload:
            continue  # written before the field existed: its default
        value = payload[field.name]
        if field.type in ("uuid.UUID",):
            value = uuid.UUID(value)
        elif isinstance(value, list):
            value = tuple(tuple(item) if isinstance(item, list) else item for item in value)
        values[field.name] = value
    return cls(**values)
