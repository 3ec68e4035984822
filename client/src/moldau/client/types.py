"""Small value types shared by the producer, the admin client and the consumer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as metadata describes it. Bootstrap addresses get negative ids until the
    first metadata response names the real brokers."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class RecordMetadata(NamedTuple):
    """Where a record was written. `offset` is -1 when acks=0 (nothing comes back)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership, as Kafka's ConsumerGroupMetadata: what a transactional
    producer sends with the offsets it commits, so that the group coordinator rejects them
    from a member the group has moved on from."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A transaction its producer flushed and left open (`prepare_transaction()`), for
    another process to commit or abort (`Admin.complete_transactions`): the two phases of
    a commit split between processes, as Kafka's KIP-939 does it, over transaction version 1
    requests. The producer id and epoch tell exactly this transaction from a later one of
    the same transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
