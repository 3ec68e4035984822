"""The consumer's fetch rules against a scripted broker, where every Fetch request can be
seen and answered at will: one fetch per node at a time, none for partitions with buffered
data, the next fetch sent as soon as poll() returns records, paused data kept without a
refetch, partition errors raised after the records before them, and CRC checks."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from fake_broker import FakeBroker, FakeRequest

from moldau.client import AsyncConsumer, TopicPartition
from moldau.client.errors import CorruptMessageError, TopicAuthorizationFailedError
from moldau.records.batch import CRC_OFFSET
from moldau.records.codec import build_batch

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
VERSIONS = {0: (3, 12), FETCH: (4, 12), LIST_OFFSETS: (1, 7), METADATA: (0, 12), 18: (0, 4)}
TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED = 6, 29


def metadata(port: int, partitions: int = 2) -> dict[str, Any]:
    return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": TOPIC, "topic_id": uuid.uuid4(),
                        "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 1,
                                        "leader_epoch": 0, "replica_nodes": [1],
                                        "isr_nodes": [1], "offline_replicas": []}
                                       for p in range(partitions)]}]}


def batch(base_offset: int, count: int, *, corrupt: bool = False) -> bytes:
    data = bytearray(build_batch(
        [(None, b"v%d" % (base_offset + i), [], 1000 + i) for i in range(count)],
        base_offset=base_offset))
    if corrupt:
        data[CRC_OFFSET + 10] ^= 0xFF  # a byte under the CRC, not the CRC itself
    return bytes(data)


def fetch_response(parts: dict[int, tuple[int, bytes]]) -> dict[str, Any]:
    """partition -> (error code, records)."""
    return {"error_code": 0, "session_id": 0, "responses": [{"topic": TOPIC, "partitions": [
        {"partition_index": p, "error_code": code, "high_watermark": 100,
         "last_stable_offset": 100, "log_start_offset": 0, "aborted_transactions": None,
         "preferred_read_replica": -1, "records": records}
        for p, (code, records) in parts.items()]}]}


def fetched(request: FakeRequest) -> dict[int, int]:
    """partition -> fetch offset of a Fetch request."""
    return {p.partition: p.fetch_offset for t in request.body.topics for p in t.partitions}


class Script:
    """Answers metadata by itself, hands Fetch requests to the test, and keeps responses
    in request order per connection as a broker does (a metadata request behind an
    unanswered fetch waits for it)."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.fetches: asyncio.Queue[FakeRequest] = asyncio.Queue()
        self.pending: dict[int, list[FakeRequest]] = {}
        self.metadata_requests = 0
        self.task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            request = await self.broker.requests.get()
            line = self.pending.setdefault(id(request.conn), [])
            self.metadata_requests += request.api_key == METADATA
            if request.api_key == METADATA and not line:
                await request.reply(metadata(self.broker.port))
                continue
            line.append(request)
            if request.api_key == FETCH:
                await self.fetches.put(request)

    async def answer(self, request: FakeRequest, data: dict[str, Any]) -> None:
        line = self.pending[id(request.conn)]
        assert line[0] is request, "answer fetches in the order they were sent"
        await request.reply(data)
        line.pop(0)
        while line and line[0].api_key == METADATA:
            await line.pop(0).reply(metadata(self.broker.port))

    async def next_fetch(self, timeout: float = 5) -> FakeRequest:
        return await asyncio.wait_for(self.fetches.get(), timeout)

    async def no_fetch(self, wait: float = 0.3) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(self.fetches.get(), wait)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def started_consumer(broker: FakeBroker, **settings: Any) -> AsyncConsumer:
    consumer = AsyncConsumer({"bootstrap.servers": broker.address, **settings})
    await consumer.start()
    consumer.assign([TP0, TP1])
    consumer.seek(TP0, 0)
    consumer.seek(TP1, 0)
    return consumer


def test_one_fetch_per_node_and_the_next_sent_when_records_are_returned():
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            script = Script(broker)
            consumer = await started_consumer(broker, **{"max.poll.records": 3})
            poll = asyncio.ensure_future(consumer.poll(5))
            first = await script.next_fetch()
            assert fetched(first) == {0: 0, 1: 0}
            await script.no_fetch()  # nothing more while that one is in flight
            await script.answer(first, fetch_response({0: (0, batch(0, 5)), 1: (0, b"")}))
            records = await poll
            assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1), (0, 2)]
            # Pipelining: the next fetch left with the records, for partition 1 only,
            # since partition 0 still has buffered data.
            second = await script.next_fetch()
            assert fetched(second) == {1: 0}
            records = await consumer.poll(0)
            assert [r.offset for r in records] == [3, 4]
            await script.answer(second, fetch_response({1: (0, b"")}))
            # Fetches are sent from poll(): the next one asks for both again.
            poll = asyncio.ensure_future(consumer.poll(5))
            third = await script.next_fetch()
            assert fetched(third) == {0: 5, 1: 0}
            await script.answer(third, fetch_response({0: (0, batch(5, 1)), 1: (0, b"")}))
            assert [r.offset for r in await poll] == [5]
            await consumer.close(0)
            script.task.cancel()
    run(main())


def test_paused_partition_keeps_its_buffered_records_without_refetching():
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            script = Script(broker)
            consumer = await started_consumer(broker)
            consumer.pause(TP0)
            consumer.resume(TP0)
            poll = asyncio.ensure_future(consumer.poll(5))
            request = await script.next_fetch()
            consumer.pause(TP1)
            await script.answer(request, fetch_response({0: (0, batch(0, 2)),
                                                         1: (0, batch(0, 3))}))
            records = await poll
            assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1)]
            request = await script.next_fetch()
            assert fetched(request) == {0: 2}  # not the paused partition
            assert not await consumer.poll(0)
            consumer.resume(TP1)
            records = await consumer.poll(0)
            assert [(r.partition, r.offset) for r in records] == [(1, 0), (1, 1), (1, 2)]
            await consumer.close(0)
            script.task.cancel()
    run(main())


def test_partition_error_comes_after_the_records_before_it():
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            script = Script(broker)
            consumer = await started_consumer(broker)
            poll = asyncio.ensure_future(consumer.poll(5))
            request = await script.next_fetch()
            await script.answer(request, fetch_response({0: (0, batch(0, 2)),
                                                         1: (TOPIC_AUTHORIZATION_FAILED, b"")}))
            records = await poll
            assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1)]
            with pytest.raises(TopicAuthorizationFailedError):
                await consumer.poll(0)
            # NOT_LEADER_OR_FOLLOWER is not the caller's problem: fresh metadata, retry.
            poll = asyncio.ensure_future(consumer.poll(1))
            request = await script.next_fetch()
            before = script.metadata_requests
            await script.answer(request, fetch_response({0: (0, b""),
                                                         1: (NOT_LEADER_OR_FOLLOWER, b"")}))
            assert not await poll
            assert script.metadata_requests > before
            await consumer.close(0)
            script.task.cancel()
    run(main())


@pytest.mark.parametrize("check_crcs", [True, False])
def test_corrupt_batch_is_an_error_after_the_good_ones_when_crcs_are_checked(check_crcs):
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            script = Script(broker)
            consumer = await started_consumer(broker, **{"check.crcs": check_crcs})
            consumer.assign([TP0])
            consumer.seek(TP0, 0)
            poll = asyncio.ensure_future(consumer.poll(5))
            request = await script.next_fetch()
            data = batch(0, 2) + batch(2, 2, corrupt=True)
            await script.answer(request, fetch_response({0: (0, data)}))
            records = await poll
            if not check_crcs:
                assert [r.offset for r in records] == [0, 1, 2, 3]
            else:
                assert [r.offset for r in records] == [0, 1]
                with pytest.raises(CorruptMessageError, match="CRC"):
                    await consumer.poll(0)
                assert await consumer.position(TP0) == 2  # stays before the bad batch
            await consumer.close(0)
            script.task.cancel()
    run(main())


def test_read_committed_skips_aborted_transactions_and_control_batches():
    def txn(base: int, pid: int, count: int) -> bytes:
        return build_batch([(None, b"p%d-%d" % (pid, base + i), [], 1000)
                            for i in range(count)], base_offset=base, producer_id=pid,
                           producer_epoch=0, base_sequence=base, is_transactional=True)

    def marker(offset: int, pid: int, commit: bool) -> bytes:
        key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
        value = (0).to_bytes(2, "big") + (0).to_bytes(4, "big")
        return build_batch([(key, value, [], 1000)], base_offset=offset, producer_id=pid,
                           producer_epoch=0, is_transactional=True, is_control=True)

    # pid 7 aborts offsets 0-1, pid 8 commits 2-3, pid 7 commits 6 later.
    log = (txn(0, 7, 2) + txn(2, 8, 2) + marker(4, 7, False) + marker(5, 8, True)
           + txn(6, 7, 1) + marker(7, 7, True))

    async def main(level: str) -> list[tuple[int, bytes]]:
        async with FakeBroker(VERSIONS) as broker:
            script = Script(broker)
            consumer = await started_consumer(broker, **{"isolation.level": level})
            consumer.assign([TP0])
            consumer.seek(TP0, 0)
            poll = asyncio.ensure_future(consumer.poll(5))
            request = await script.next_fetch()
            response = fetch_response({0: (0, log)})
            response["responses"][0]["partitions"][0]["aborted_transactions"] = [
                {"producer_id": 7, "first_offset": 0}]
            await script.answer(request, response)
            records = [(r.offset, r.value) for r in await poll]
            assert await consumer.position(TP0) == 8  # past the trailing control batch
            await consumer.close(0)
            script.task.cancel()
            return records

    assert asyncio.run(main("read_committed")) == [(2, b"p8-2"), (3, b"p8-3"), (6, b"p7-6")]
    assert [o for o, _ in asyncio.run(main("read_uncommitted"))] == [0, 1, 2, 3, 6]
