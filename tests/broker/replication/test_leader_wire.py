"""The leader's handlers on the wire, spoken to with the client's BrokerConnection: Produce
with acks=all (answered only once the ISR has the records), Fetch from replicas (errors,
diverging epoch) and OffsetForLeaderEpoch from a replica."""

from __future__ import annotations

import asyncio

from replication_helpers import (
    TOPIC,
    Clock,
    FakeController,
    Node,
    batch,
    run,
    wait_until,
)

from moldau.client.connection import BrokerConnection
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import request_class


async def connect(node: Node) -> BrokerConnection:
    connection = BrokerConnection(node.node_id, "127.0.0.1", node.port, client_id="test")
    await connection.open()
    return connection


async def produce(connection: BrokerConnection, *values: bytes, acks: int = -1,
                  timeout_ms: int = 10000) -> tuple[ErrorCode, str | None]:
    body = build(request_class(0, 9), {
        "acks": acks, "timeout": timeout_ms, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": batch(*values)}]}]})
    response = await connection.send(0, 9, body)
    [partition] = response.responses[0].partition_responses
    return ErrorCode(partition.error_code), partition.error_message


async def replica_fetch(connection: BrokerConnection, replica_id: int, *, offset: int,
                        current_epoch: int = -1, last_fetched_epoch: int = -1,
                        max_wait: int = 0):
    body = build(request_class(1, 12), {
        "replica_id": replica_id, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [{
            "partition": 0, "current_leader_epoch": current_epoch, "fetch_offset": offset,
            "last_fetched_epoch": last_fetched_epoch, "log_start_offset": 0,
            "partition_max_bytes": 1 << 20}]}]})
    response = await connection.send(1, 12, body)
    return response.responses[0].partitions[0]


def leader(tmp_path, **settings) -> tuple[Node, FakeController]:
    controller = FakeController()
    return Node(1, tmp_path, controller, Clock(), **settings), controller


def test_acks_all_answer_waits_for_the_follower_without_holding_a_handler(tmp_path):
    async def scenario():
        node, controller = leader(tmp_path)  # 4 request handlers
        await node.start()
        controller.register(2)
        await controller.create_topic(replicas=[1, 2])
        producers = [await connect(node) for _ in range(6)]
        other = await connect(node)
        try:
            answers = [asyncio.create_task(produce(c, b"a", b"b")) for c in producers]
            await wait_until(lambda: node.log().log_end_offset == 12, "the appends")
            # More acks=all requests wait than there are handlers, yet others are served.
            assert (await asyncio.wait_for(produce(other, b"c", acks=1), 10))[0] \
                is ErrorCode.none
            assert not any(answer.done() for answer in answers)
            # Replica 2 fetches past everything: the HW moves and the answers go out.
            await replica_fetch(other, 2, offset=node.log().log_end_offset)
            assert await asyncio.gather(*answers) == [(ErrorCode.none, None)] * 6
        finally:
            for connection in (*producers, other):
                connection.close()
            await node.stop()

    run(scenario())


def test_acks_all_refused_and_timed_out_on_the_wire(tmp_path):
    async def scenario():
        node, controller = leader(tmp_path, **{"min.insync.replicas": "2"})
        await node.start()
        controller.register(2)
        await controller.create_topic(replicas=[1, 2], isr=[1])
        connection = await connect(node)
        try:
            code, message = await produce(connection, b"x")
            assert code is ErrorCode.not_enough_replicas
            assert message is not None and "{1}" in message
            controller.publish(controller.record().__class__(
                controller.topic_id, 0, (1, 2), (1, 2), 1, 0, 1))
            assert await produce(connection, b"x", timeout_ms=50) == \
                (ErrorCode.request_timed_out, None)
        finally:
            connection.close()
            await node.stop()

    run(scenario())


def test_replica_fetch_errors_and_diverging_epoch(tmp_path):
    async def scenario():
        node, controller = leader(tmp_path)
        await node.start()
        controller.register(2)
        await controller.create_topic(replicas=[1, 2], isr=[1])
        connection = await connect(node)
        try:
            for value in (b"a", b"b", b"c"):
                assert (await node.produce(value)).error is ErrorCode.none
            controller.elect(1)  # epoch 1 starts at offset 3
            assert (await node.produce(b"d")).error is ErrorCode.none

            stranger = await replica_fetch(connection, 7, offset=0)
            assert stranger.error_code == ErrorCode.not_leader_or_follower
            ahead = await replica_fetch(connection, 2, offset=0, current_epoch=5)
            assert ahead.error_code == ErrorCode.unknown_leader_epoch
            behind = await replica_fetch(connection, 2, offset=0, current_epoch=0)
            assert behind.error_code == ErrorCode.fenced_leader_epoch

            # A follower with epoch 0 up to offset 4: epoch 0 ends at 3 here.
            diverged = await replica_fetch(connection, 2, offset=4, current_epoch=1,
                                           last_fetched_epoch=0)
            assert diverged.error_code == ErrorCode.none
            assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) \
                == (0, 3)
            assert not diverged.records

            # Replicas read past the high watermark (consumers would not).
            fine = await replica_fetch(connection, 2, offset=0, current_epoch=1,
                                       last_fetched_epoch=-1)
            assert fine.error_code == ErrorCode.none and fine.records
            assert fine.diverging_epoch.epoch == -1
        finally:
            connection.close()
            await node.stop()

    run(scenario())


def test_offset_for_leader_epoch_serves_replicas(tmp_path):
    async def scenario():
        node, controller = leader(tmp_path)
        await node.start()
        controller.register(2)
        await controller.create_topic(replicas=[1, 2], isr=[1])
        connection = await connect(node)
        try:
            assert (await node.produce(b"a", b"b")).error is ErrorCode.none
            controller.elect(1)
            body = build(request_class(23, 4), {"replica_id": 2, "topics": [
                {"topic": TOPIC, "partitions": [
                    {"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0}]}]})
            response = await connection.send(23, 4, body)
            [answer] = response.topics[0].partitions
            assert (answer.error_code, answer.leader_epoch, answer.end_offset) == \
                (ErrorCode.none, 0, 2)
        finally:
            connection.close()
            await node.stop()

    run(scenario())
