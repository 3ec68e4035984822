"""Three metadata quorum voters on loopback TCP, each with its Controller, in one event loop:
one becomes active, its commits reach every image, and when it goes away another takes over."""

import asyncio
import contextlib
import socket
import uuid

import pytest
from quorum_helpers import CLUSTER_ID, make_controller, wait_until

from moldau.broker.config import BrokerConfig
from moldau.broker.metadata.controller import CreatedTopic, NewTopic
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.quorum import MetadataQuorum
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(90)

VOTERS = (1, 2, 3)


def free_ports(count):
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def voter_config(node_id, base, controller_ports, broker_port):
    voters = ",".join(f"{n}@127.0.0.1:{controller_ports[n]}" for n in VOTERS)
    return BrokerConfig({
        "node.id": str(node_id),
        "log.dirs": str(base / f"node{node_id}"),
        "process.roles": "broker,controller",
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},"
                     f"CONTROLLER://127.0.0.1:{controller_ports[node_id]}",
        "controller.quorum.election.timeout.ms": "200",
        "controller.quorum.election.backoff.max.ms": "200",
        "controller.quorum.fetch.timeout.ms": "1000",
        "controller.quorum.request.timeout.ms": "1500",
        "controller.quorum.append.linger.ms": "5",
    })


async def start_voter(config):
    quorum = MetadataQuorum(config, MetadataImage(), CLUSTER_ID)
    await quorum.start()
    return quorum, make_controller(quorum)


def active(quorums):
    return [node for node, (quorum, _) in quorums.items() if quorum.is_active]


def test_three_voters_commit_and_fail_over(tmp_path):
    ports = free_ports(6)
    controller_ports = dict(zip(VOTERS, ports[:3], strict=True))
    broker_ports = dict(zip(VOTERS, ports[3:], strict=True))
    configs = {n: voter_config(n, tmp_path, controller_ports, broker_ports[n]) for n in VOTERS}
    assert configs[1].voters[2] == ("127.0.0.1", controller_ports[2])
    assert configs[1].controller_listener.port == controller_ports[1]

    async def main():
        quorums = {}
        try:
            for node in VOTERS:
                quorums[node] = await start_voter(configs[node])
            await wait_until(lambda: len(active(quorums)) == 1, "one active controller")
            [first] = active(quorums)
            quorum, controller = quorums[first]
            for node, (other, other_controller) in quorums.items():
                if node != first:
                    await wait_until(lambda q=other: q.leader_id == first,
                                     f"node {node} to know the leader")
                    assert not other.is_active
                    with pytest.raises(KafkaError) as refused:
                        await other_controller.allocate_producer_ids(node)
                    assert refused.value.code is ErrorCode.not_controller

            # Broker 1 registers and is unfenced, then a topic is created: all through the
            # active controller, all replicated.
            epoch = await controller.register_broker(
                1, uuid.uuid4(), [("PLAINTEXT", "127.0.0.1", broker_ports[1])], None)
            _, fenced, _ = await controller.heartbeat(1, epoch, quorum.image.offset)
            assert not fenced
            [created] = await controller.create_topics([NewTopic("orders", num_partitions=2)],
                                                       validate_only=False)
            assert isinstance(created, CreatedTopic)
            first_block, size = await controller.allocate_producer_ids(1)
            offset = quorum.image.offset
            await wait_until(lambda: all(q.image.offset >= offset for q, _ in quorums.values()),
                             "every voter to apply the topic")
            for q, _ in quorums.values():
                assert q.image.topics["orders"].topic_id == created.topic_id
                assert sorted(q.image.topics["orders"].partitions) == [0, 1]
                assert q.image.live_brokers() == [1]

            # The active controller goes away: another voter takes over and commits.
            closed_config = configs[first]
            await quorum.close()
            del quorums[first]
            await wait_until(lambda: len(active(quorums)) == 1, "a new active controller")
            [second] = active(quorums)
            assert second != first
            new_quorum, new_controller = quorums[second]
            assert new_quorum.epoch > 0
            assert "orders" in new_quorum.image.topics
            [later] = await new_controller.create_topics([NewTopic("later")],
                                                         validate_only=False)
            assert isinstance(later, CreatedTopic)
            block, _ = await new_controller.allocate_producer_ids(1)
            assert block >= first_block + size
            offset = new_quorum.image.offset
            await wait_until(lambda: all(q.image.offset >= offset for q, _ in quorums.values()),
                             "both remaining voters to apply the new topic")
            for q, _ in quorums.values():
                assert set(q.image.topics) == {"orders", "later"}
                assert q.image.next_producer_id == new_quorum.image.next_producer_id

            # The old leader comes back as a follower and catches up from its own log.
            quorums[first] = await start_voter(closed_config)
            back = quorums[first][0]
            await wait_until(lambda: back.image.offset >= offset, "the old leader to catch up")
            assert set(back.image.topics) == {"orders", "later"}
            assert back.image.topics["later"].topic_id == later.topic_id
            assert not back.is_active
        finally:
            for q, _ in quorums.values():
                await q.close()

    asyncio.run(main())
