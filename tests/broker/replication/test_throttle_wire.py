"""Replication throttling over real loopback sockets. Once the leader quota is used up, a
follower outside the ISR gets no records for the partitions the topic's
leader.replication.throttled.replicas names on the leader, while its other partitions, and
consumers, are served as before; once a follower's own quota is used up, its fetcher leaves
the partitions follower.replication.throttled.replicas names on it out of its fetches."""

from __future__ import annotations

from dataclasses import replace

from replication_helpers import TOPIC, Clock, FakeController, Node, batch, run, wait_until

from moldau.broker.metadata.records import TOPIC_RESOURCE, ConfigRecord
from moldau.client.connection import BrokerConnection
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

VALUE = b"v" * 4000
RATE = 1000  # bytes per second: ten seconds' worth (a young quota) is less than one fetch


async def produce(connection: BrokerConnection, partition: int, count: int) -> None:
    body = build(request_class(0, 9), {"acks": 1, "timeout": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [
            {"index": partition, "records": batch(*[VALUE] * count)}]}]})
    response = await connection.send(0, 9, body)
    assert response.responses[0].partition_responses[0].error_code == 0


async def fetch(connection: BrokerConnection, replica_id: int) -> dict[int, int]:
    """Bytes of records per partition, both read from offset 0."""
    body = build(request_class(1, 12), {
        "replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": 0,
                 "partition_max_bytes": 1 << 20} for p in (0, 1)]}]})
    response = await connection.send(1, 12, body)
    parts = response.responses[0].partitions
    assert all(p.error_code == 0 for p in parts)
    return {p.partition_index: len(p.records or b"") for p in parts}


def test_a_used_up_leader_quota_holds_back_only_the_throttled_partition(tmp_path):
    async def scenario():
        controller = FakeController()
        node = Node(1, tmp_path, controller, Clock(),
                    **{"leader.replication.throttled.rate": str(RATE)})
        await node.start()
        controller.register(2)
        # Replica 2 is being added: not in the ISR.
        await controller.create_topic(replicas=[1, 2], isr=[1], partitions=2)
        controller.publish(ConfigRecord(TOPIC_RESOURCE, TOPIC,
                                        "leader.replication.throttled.replicas", "0:1"))
        connection = BrokerConnection(1, "127.0.0.1", node.port, client_id="test")
        await connection.open()
        try:
            await produce(connection, 0, 5)
            await produce(connection, 1, 5)
            # Within the quota: both partitions, and partition 0's bytes count against it.
            first = await fetch(connection, 2)
            assert first[0] > 10 * RATE and first[1] > 0
            assert node.replicas.leader_quota.throttled_bytes_total == first[0]
            # Used up: partition 0 waits, partition 1 (not throttled) is answered.
            second = await fetch(connection, 2)
            assert second == {0: 0, 1: first[1]}
            # Consumers are not throttled.
            assert await fetch(connection, -1) == first
            # Nor is a follower in the ISR.
            current = controller.record(0)
            controller.publish(replace(current, isr=(1, 2),
                                       partition_epoch=current.partition_epoch + 1))
            await node.replicas.metadata_applied()
            assert (await fetch(connection, 2))[0] == first[0]
        finally:
            connection.close()
            await node.stop()

    run(scenario())


def test_a_used_up_follower_quota_leaves_the_throttled_partition_out(tmp_path):
    async def scenario():
        controller, clock = FakeController(), Clock()
        leader = Node(1, tmp_path, controller, clock)
        # Two batches per fetch and partition; ten seconds of 500 B/s is less than that.
        follower = Node(2, tmp_path, controller, clock,
                        **{"follower.replication.throttled.rate": "500",
                           "replica.fetch.max.bytes": "8000"})
        await leader.start()
        try:
            await controller.create_topic(replicas=[1, 2], isr=[1], partitions=2)
            controller.publish(ConfigRecord(TOPIC_RESOURCE, TOPIC,
                                            "follower.replication.throttled.replicas", "0:2"))
            for partition in (0, 1):
                for _ in range(5):
                    assert (await leader.produce(VALUE, acks=1, partition=partition)).error \
                        .value == 0
            await follower.start()
            await wait_until(lambda: follower.log(1).log_end_offset == 5,
                             "partition 1 copied")
            # Partition 0 got its first fetch, which used the quota up, and no more.
            assert 0 < follower.log(0).log_end_offset < 5
            quota = follower.replicas.follower_quota
            assert quota.is_exceeded() and quota.throttled_bytes_total > 0
        finally:
            await follower.stop()
            await leader.stop()

    run(scenario())
