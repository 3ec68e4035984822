"""A single-voter metadata quorum on a real directory, a Controller on it, and brokers that
are registered and unfenced the way BrokerLifecycle does it."""

import asyncio
import time
import uuid

from moldau.broker.config import BrokerConfig
from moldau.broker.metadata.controller import Controller
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.quorum import MetadataQuorum

CLUSTER_ID = "metadata-test-cluster"


async def wait_until(predicate, what, timeout=15.0):
    """Poll until `predicate()` holds; fail (not hang) when it never does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def open_quorum(path, **settings):
    """A single-voter quorum (node 1, no controller listener) in `path`, once active."""
    config = BrokerConfig({"node.id": "1", "log.dirs": str(path), **settings})
    assert config.voters == {1: None}
    quorum = MetadataQuorum(config, MetadataImage(), CLUSTER_ID)
    await quorum.start()
    await wait_until(lambda: quorum.is_active, "the single voter to become active")
    return quorum


def make_controller(quorum, *, partitions=1, replication_factor=1, session_timeout_ms=9000,
                    unclean=False):
    return Controller(quorum.node_id, quorum, default_partitions=partitions,
                      default_replication_factor=replication_factor,
                      session_timeout_ms=session_timeout_ms, unclean_leader_election=unclean)


def endpoints(broker_id):
    return [("PLAINTEXT", "127.0.0.1", 9090 + broker_id)]


async def register(controller, broker_id, incarnation=None):
    """Register a broker (fenced); returns (epoch, incarnation id)."""
    incarnation = incarnation or uuid.uuid4()
    epoch = await controller.register_broker(broker_id, incarnation, endpoints(broker_id), None)
    return epoch, incarnation


async def register_live(controller, broker_id):
    """Register and heartbeat with the caught-up offset: the broker ends up unfenced."""
    epoch, _ = await register(controller, broker_id)
    caught_up, fenced, _ = await controller.heartbeat(broker_id, epoch,
                                                      controller.image.offset)
    assert caught_up and not fenced
    assert broker_id in controller.image.live_brokers()
    return epoch


def partition(controller, topic, index=0):
    return controller.image.topics[topic].partitions[index]
