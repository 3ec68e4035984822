"""The consumer: AsyncConsumer (asyncio) and Consumer (threads), the Fetcher, group
membership with the classic protocol, and the partition assignors."""

from moldau.client.consumer.consumer import (
    AsyncConsumer,
    ConsumerRebalanceListener,
    OffsetAndTimestamp,
)
from moldau.client.consumer.records import ConsumerRecord, ConsumerRecords, FetchedBatch
from moldau.client.consumer.sync import Consumer

__all__ = ["AsyncConsumer", "Consumer", "ConsumerRebalanceListener", "ConsumerRecord",
           "ConsumerRecords", "FetchedBatch", "OffsetAndTimestamp"]
