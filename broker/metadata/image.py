"""The in-memory metadata image: the fold of the metadata log, read by request handlers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from moldau.broker.metadata.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRecord] = field(default_factory=dict)


@dataclass
class MetadataImage:
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    # (resource type, resource name) -> {config name: value}
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    brokers: dict[int, RegisterBrokerRecord] = field(default_factory=dict)
    next_producer_id: int = 0
    offset: int = -1

    def apply(self, offset: int, record: MetadataRecord) -> None:
        match record:
            case TopicRecord(name=name, topic_id=topic_id):
                topic = TopicImage(name, topic_id)
                self.topics[name] = topic
                self.topics_by_id[topic_id] = topic
            case PartitionRecord():
                self.topics_by_id[record.topic_id].partitions[record.partition] = record
            case ConfigRecord(resource_type=kind, resource_name=name, name=key, value=value):
                overrides = self.configs.setdefault((kind, name), {})
                if value is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = value
            case RemoveTopicRecord(topic_id=topic_id):
                removed = self.topics_by_id.pop(topic_id)
                del self.topics[removed.name]
                self.configs.pop((TOPIC_RESOURCE, removed.name), None)
            case ProducerIdsRecord(next_producer_id=next_id):
                self.next_producer_id = next_id
            case RegisterBrokerRecord(broker_id=broker_id):
                self.brokers[broker_id] = record
        self.offset = offset

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), {})
