"""The in-memory metadata image: the fold of the metadata log, read by request handlers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from moldau.broker.metadata.acls import acl_of, record_of
from moldau.broker.metadata.records import (
    TOPIC_RESOURCE,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from moldau.broker.security.acl_index import AclIndex


@dataclass(frozen=True)
class BrokerRegistration:
    """A registered broker. Its epoch is the offset of its registration record (as Kafka's),
    so a restarted broker's heartbeats are told apart from its previous life's."""

    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[tuple[str, str, int], ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


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
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    # (user, mechanism wire type) -> credential, as stored
    scram: dict[tuple[str, int], UserScramCredentialRecord] = field(default_factory=dict)
    # Every ACL, indexed for the authorizer.
    acls: AclIndex = field(default_factory=AclIndex)
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
                epoch = record.broker_epoch if record.broker_epoch >= 0 else offset
                self.brokers[broker_id] = BrokerRegistration(
                    broker_id, epoch, record.incarnation_id, record.endpoints, record.rack,
                    record.fenced)
            case BrokerRegistrationChangeRecord(broker_id=broker_id):
                current = self.brokers.get(broker_id)
                if current is not None and current.epoch == record.broker_epoch:
                    self.brokers[broker_id] = replace(
                        current,
                        fenced=current.fenced if record.fenced is None else record.fenced,
                        in_controlled_shutdown=(
                            current.in_controlled_shutdown
                            if record.in_controlled_shutdown is None
                            else record.in_controlled_shutdown))
            case UnregisterBrokerRecord(broker_id=broker_id):
                current = self.brokers.get(broker_id)
                if current is not None and current.epoch == record.broker_epoch:
                    del self.brokers[broker_id]
            case UserScramCredentialRecord(name=name, mechanism=mechanism):
                self.scram[(name, mechanism)] = record
            case RemoveUserScramCredentialRecord(name=name, mechanism=mechanism):
                self.scram.pop((name, mechanism), None)
            case AccessControlEntryRecord(id=acl_id):
                self.acls.add(acl_id, acl_of(record))
            case RemoveAccessControlEntryRecord(id=acl_id):
                self.acls.remove(acl_id)
        self.offset = offset

    def clear(self) -> None:
        """Forget everything (before loading a snapshot): handlers keep this same object."""
        self.topics.clear()
        self.topics_by_id.clear()
        self.configs.clear()
        self.brokers.clear()
        self.scram.clear()
        self.acls.clear()
        self.next_producer_id = 0
        self.offset = -1

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from nothing: the content of a snapshot."""
        records: list[MetadataRecord] = []
        for broker in self.brokers.values():
            records.append(RegisterBrokerRecord(
                broker.broker_id, broker.incarnation_id, broker.endpoints, broker.rack,
                broker.fenced, broker.epoch))
            if broker.in_controlled_shutdown:
                records.append(BrokerRegistrationChangeRecord(
                    broker.broker_id, broker.epoch, in_controlled_shutdown=True))
        for topic in self.topics.values():
            records.append(TopicRecord(topic.name, topic.topic_id))
            records.extend(topic.partitions.values())
        for (kind, name), overrides in self.configs.items():
            records += [ConfigRecord(kind, name, key, value)
                        for key, value in overrides.items()]
        records.extend(self.scram.values())
        records += [record_of(acl_id, acl) for acl_id, acl in self.acls.by_id.items()]
        if self.next_producer_id:
            records.append(ProducerIdsRecord(-1, self.next_producer_id))
        return records

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), {})

    def live_brokers(self) -> list[int]:
        """Registered, unfenced brokers that are not shutting down: where new replicas and
        leaders may go."""
        return sorted(broker_id for broker_id, broker in self.brokers.items()
                      if not broker.fenced and not broker.in_controlled_shutdown)
