"""The Moldau producer: AsyncProducer (asyncio) and Producer (threads)."""

from moldau.client.producer.batch import RecordFuture
from moldau.client.producer.producer import AsyncProducer
from moldau.client.producer.sync import Producer

__all__ = ["AsyncProducer", "Producer", "RecordFuture"]
