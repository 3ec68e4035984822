"""The leader's side without sockets: follower fetches are reported to the ReplicaManager as
the Fetch handler reports them, AlterPartition goes to a fake controller, and produce
requests wait in the acks=all purgatory."""

from __future__ import annotations

import asyncio
import os

from replication_helpers import TOPIC, Clock, FakeController, Node, batch, run, wait_until

from moldau.broker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, read_epochs
from moldau.broker.metadata.records import BrokerRegistrationChangeRecord
from moldau.broker.replication import manager
from moldau.broker.replication.checkpoint import HIGH_WATERMARK_CHECKPOINT
from moldau.broker.replication.manager import INLINE_NEW_LOGS
from moldau.errors import ErrorCode

LAG_MS = 10_000


async def leader_node(tmp_path, *, replicas=(1, 2), isr=None, **settings) -> tuple[Node, Clock]:
    controller, clock = FakeController(), Clock()
    node = Node(1, tmp_path, controller, clock, **{"replica.lag.time.max.ms": str(LAG_MS),
                                                   **settings})
    node.attach()
    for other in replicas:
        if other != 1:
            controller.register(other)
    await controller.create_topic(replicas=replicas, isr=isr)
    return node, clock


def follower_fetch(node: Node, replica: int, offset: int) -> None:
    partition = node.partition()
    node.replicas.record_follower_fetch(partition, replica, offset, 0,
                                        partition.log.log_end_offset)


async def settle() -> None:
    """Let tasks that are already runnable (AlterPartition round trips) finish."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_acks_all_answers_once_the_follower_has_fetched_past_the_records(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path)
        try:
            produce = asyncio.create_task(node.produce(b"x", b"y"))
            await settle()
            assert not produce.done()  # the follower has nothing yet
            follower_fetch(node, 2, 0)
            await settle()
            assert not produce.done() and node.log().high_watermark == 0
            follower_fetch(node, 2, 2)  # fetching from 2: it has offsets 0 and 1
            result = await produce
            assert result.error is ErrorCode.none and result.base_offset == 0
            assert node.log().high_watermark == 2
            # acks=1 does not wait: the HW stays until the follower fetches again.
            assert (await node.produce(b"z", acks=1)).error is ErrorCode.none
            assert node.log().high_watermark == 2
        finally:
            await node.stop()

    run(scenario())


def test_acks_all_times_out_with_the_records_left_on_the_leader(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path)
        try:
            result = await node.produce(b"x", timeout_ms=50)
            assert result.error is ErrorCode.request_timed_out
            assert node.log().log_end_offset == 1 and node.log().high_watermark == 0
            assert len(node.replicas.purgatory) == 0
        finally:
            await node.stop()

    run(scenario())


def test_not_enough_replicas_is_checked_before_appending(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, isr=(1,), **{"min.insync.replicas": "2"})
        try:
            result = await node.produce(b"x")
            assert result.error is ErrorCode.not_enough_replicas
            assert result.message == ("The size of the current ISR {1} is insufficient to "
                                      "satisfy the min.isr requirement of 2 for partition "
                                      "orders-0")
            assert node.log().log_end_offset == 0
            assert (await node.produce(b"x", acks=1)).error is ErrorCode.none
        finally:
            await node.stop()

    run(scenario())


def test_isr_shrinking_below_min_isr_while_waiting(tmp_path):
    async def scenario():
        node, clock = await leader_node(tmp_path, **{"min.insync.replicas": "2"})
        try:
            produce = asyncio.create_task(node.produce(b"x"))
            await settle()
            clock.advance(LAG_MS + 1)
            node.replicas.maybe_shrink_isr()
            result = await produce
            # The shrink let the HW pass the record, but the ISR is now below min.isr.
            assert result.error is ErrorCode.not_enough_replicas_after_append
            assert node.partition().isr == (1,)
            assert node.controller.alter_calls == [(1, (1,))]
            assert node.log().high_watermark == 1
            # New acks=all requests are refused before appending.
            assert (await node.produce(b"y")).error is ErrorCode.not_enough_replicas
        finally:
            await node.stop()

    run(scenario())


def test_a_retry_after_not_enough_replicas_after_append_is_answered_from_the_log(tmp_path):
    """The chaos suite's seed 109: a batch stored on the leader whose answer was
    NOT_ENOUGH_REPLICAS_AFTER_APPEND is retried, with the same producer id, epoch and
    sequence, once the ISR is back: it is answered with its first offset, not written again.
    Sent under a bumped epoch from sequence 0 (what librdkafka does after an epoch bump), the
    same record is a new batch and is written, as Kafka writes it (ProducerAppendInfo)."""
    async def scenario():
        node, clock = await leader_node(tmp_path, **{"min.insync.replicas": "2"})
        try:
            first = asyncio.create_task(node.produce(b"p0-139", producer=(42, 0, 0)))
            await settle()
            clock.advance(LAG_MS + 1)
            node.replicas.maybe_shrink_isr()
            assert (await first).error is ErrorCode.not_enough_replicas_after_append
            retry = await node.produce(b"p0-139", producer=(42, 0, 0))
            assert retry.error is ErrorCode.not_enough_replicas
            follower_fetch(node, 2, 1)  # caught up: back in the ISR
            await settle()
            assert node.partition().isr == (1, 2)
            retry = await node.produce(b"p0-139", producer=(42, 0, 0))
            assert (retry.error, retry.base_offset) == (ErrorCode.none, 0)
            assert node.log().log_end_offset == 1
            resent = asyncio.create_task(node.produce(b"p0-139", producer=(42, 1, 0)))
            await settle()
            follower_fetch(node, 2, 2)
            resent_result = await resent
            assert (resent_result.error, resent_result.base_offset) == (ErrorCode.none, 1)
            assert node.log().log_end_offset == 2
        finally:
            await node.stop()

    run(scenario())


def test_losing_leadership_fails_waiting_produce_requests(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path)
        try:
            produce = asyncio.create_task(node.produce(b"x"))
            await settle()
            node.controller.elect(2)
            assert (await produce).error is ErrorCode.not_leader_or_follower
            assert node.leadership == [(TOPIC, 0, True, 0), (TOPIC, 0, False, 1)]
            assert (await node.produce(b"y")).error is ErrorCode.not_leader_or_follower
        finally:
            await node.stop()

    run(scenario())


def test_a_caught_up_follower_joins_the_isr(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, isr=(1,))
        try:
            assert (await node.produce(b"a", b"b", b"c")).error is ErrorCode.none
            assert node.log().high_watermark == 3  # the ISR is the leader alone
            follower_fetch(node, 2, 1)
            await settle()
            assert node.controller.alter_calls == []  # below the high watermark
            follower_fetch(node, 2, 3)
            await settle()
            assert node.controller.alter_calls == [(1, (1, 2))]
            assert node.partition().isr == (1, 2)
            assert node.partition().partition_epoch == 1
            # In the ISR now: acks=all waits for it.
            produce = asyncio.create_task(node.produce(b"d"))
            await settle()
            assert not produce.done()
            follower_fetch(node, 2, 4)
            assert (await produce).error is ErrorCode.none
        finally:
            await node.stop()

    run(scenario())


def test_fenced_or_unregistered_brokers_do_not_join_the_isr(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, replicas=(1, 2, 3), isr=(1,))
        controller = node.controller
        try:
            registration = node.image.brokers[2]
            controller.publish(BrokerRegistrationChangeRecord(2, registration.epoch,
                                                              fenced=True))
            del node.image.brokers[3]  # 3 never registered
            follower_fetch(node, 2, 0)
            follower_fetch(node, 3, 0)
            await settle()
            assert controller.alter_calls == []
            controller.publish(BrokerRegistrationChangeRecord(2, registration.epoch,
                                                              fenced=False))
            follower_fetch(node, 2, 0)
            await settle()
            assert controller.alter_calls == [(1, (1, 2))]
        finally:
            await node.stop()

    run(scenario())


def test_one_alter_partition_in_flight_per_partition(tmp_path):
    async def scenario():
        node, clock = await leader_node(tmp_path, replicas=(1, 2, 3), isr=(1, 2))
        controller = node.controller
        controller.alter_gate = asyncio.Event()
        try:
            clock.advance(LAG_MS + 1)
            follower_fetch(node, 3, 0)  # 3 could join, 2 is lagging
            await settle()
            node.replicas.maybe_shrink_isr()
            follower_fetch(node, 3, 0)
            await settle()
            assert controller.alter_calls == [(1, (1, 2, 3))]
            assert node.partition().maximal_isr == {1, 2, 3}
            controller.alter_gate.set()
            await settle()
            assert node.partition().isr == (1, 2, 3)
            node.replicas.maybe_shrink_isr()  # now the shrink may go
            await settle()
            assert controller.alter_calls[-1] == (1, (1, 3))
            assert node.partition().isr == (1, 3)
        finally:
            await node.stop()

    run(scenario())


def test_a_rejected_isr_change_waits_for_metadata(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, isr=(1,))
        controller = node.controller
        try:
            # The controller moved on (partition epoch 1) and we have not heard yet.
            from dataclasses import replace
            newer = replace(controller.record(), partition_epoch=1)
            controller.partitions[(controller.topic_id, 0)] = newer
            follower_fetch(node, 2, 0)
            await settle()
            assert controller.alter_calls == [(1, (1, 2))]  # INVALID_UPDATE_VERSION
            follower_fetch(node, 2, 0)
            await settle()
            assert len(controller.alter_calls) == 1  # not asked again before metadata
            controller.publish(newer)
            follower_fetch(node, 2, 0)
            await settle()
            assert controller.alter_calls[-1] == (1, (1, 2))
            assert node.partition().isr == (1, 2)
        finally:
            await node.stop()

    run(scenario())


def test_unknown_replicas_may_not_fetch(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path)
        try:
            try:
                follower_fetch(node, 7, 0)
            except Exception as exc:  # noqa: BLE001
                assert getattr(exc, "code", None) is ErrorCode.not_leader_or_follower
            else:
                raise AssertionError("replica 7 is not in the replica set")
        finally:
            await node.stop()

    run(scenario())


def test_high_watermark_checkpoint_survives_a_restart_clamped_to_the_log(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path)
        assert (await node.produce(b"a", b"b", b"c", b"d", acks=1)).error is ErrorCode.none
        follower_fetch(node, 2, 2)
        assert node.log().high_watermark == 2
        await node.stop()
        log_dir = node.config.log_dirs[0]
        with open(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT)) as f:
            assert f.read().splitlines() == ["0", "1", "orders 0 2"]

        again = Node(1, tmp_path, node.controller, Clock())
        try:
            # Back as leader: followers' ends are unknown, so the HW stays where it was.
            assert again.log().log_end_offset == 4
            assert again.log().high_watermark == 2
        finally:
            await again.stop()
        with open(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT), "w") as f:
            f.write("0\n1\norders 0 99\n")
        clamped = Node(1, tmp_path, node.controller, Clock())
        try:
            assert clamped.log().high_watermark == 4
        finally:
            await clamped.stop()

    run(scenario())


def test_a_replica_removed_by_reassignment_deletes_its_log(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, replicas=(2, 1))  # node 1 follows 2
        controller = node.controller
        try:
            assert not node.partition().is_leader
            assert node.replicas.fetchers.leader_of((TOPIC, 0)) == 2
            plog = node.log()
            controller.reassign([2, 3])
            assert (TOPIC, 0) not in node.replicas.partitions
            assert node.logs.get(TOPIC, 0) is None and plog.closed
            assert node.replicas.fetchers.leader_of((TOPIC, 0)) is None
            assert node.leadership == [(TOPIC, 0, False, 0), (TOPIC, 0, False, 0)]
        finally:
            await node.stop()

    run(scenario())


def test_no_leader_means_no_fetching(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, replicas=(2, 1))
        try:
            node.controller.elect(-1)
            assert node.replicas.fetchers.leader_of((TOPIC, 0)) is None
            node.controller.elect(1)
            assert node.partition().is_leader
            assert node.partition().leader_epoch_start_offset == 0
            assert node.log().end_offset_for_epoch(2) == (2, 0)
        finally:
            await node.stop()

    run(scenario())


def test_without_alter_partition_a_single_node_keeps_the_high_watermark_at_the_log_end(
        tmp_path):
    from moldau.broker.config import BrokerConfig
    from moldau.broker.log.manager import LogManager
    from moldau.broker.metadata.image import MetadataImage
    from moldau.broker.replication.manager import ReplicaManager

    async def scenario():
        controller = FakeController()
        image = MetadataImage()
        config = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "solo")})
        logs = LogManager(config.log_dirs, default_config=config.log_config({}))
        logs.load({})
        replicas = ReplicaManager(1, config, logs, image, 1)
        await controller.create_topic(replicas=[1])
        for offset, record in enumerate(controller.history):
            image.apply(offset, record)
        replicas.on_metadata(controller.history)
        await replicas.metadata_applied()
        await replicas.start()
        try:
            [result] = await replicas.append([(TOPIC, 0, batch(b"a", b"b"))], acks=-1,
                                             produce_version=9)
            assert result.error is ErrorCode.none
            plog = replicas.partitions[(TOPIC, 0)].log
            assert plog.high_watermark == plog.log_end_offset == 2
            assert not replicas.replication_pending([(TOPIC, 0, b"")], [result])
        finally:
            await replicas.stop()
            replicas.shutdown()
            logs.shutdown()
        assert not os.path.exists(os.path.join(config.log_dirs[0], HIGH_WATERMARK_CHECKPOINT))

    run(scenario())


def test_many_new_logs_are_created_between_requests_and_batches_keep_their_order(
        tmp_path, monkeypatch):
    monkeypatch.setattr(manager, "NEW_LOGS_SLICE_S", 0)  # one log per turn of the loop
    partitions = INLINE_NEW_LOGS + 1

    async def scenario():
        controller, clock = FakeController(), Clock()
        node = Node(1, tmp_path, controller, clock)
        node.attach()
        controller.register(2)
        turns = 0

        async def other_work():
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        created_at: list[int] = []  # the loop turn each log was created in
        create = node.logs.create

        def noted_create(topic, partition, *args, **kwargs):
            if node.logs.get(topic, partition) is None:
                created_at.append(turns)
            return create(topic, partition, *args, **kwargs)

        node.logs.create = noted_create  # type: ignore[method-assign]
        ticker = asyncio.create_task(other_work())
        try:
            await asyncio.sleep(0)
            creating = asyncio.create_task(controller.create_topic(replicas=[1, 2],
                                                                   partitions=partitions))
            await asyncio.sleep(0)  # published: the logs are on their way
            assert not node.replicas.partitions
            # Known to the metadata but not hosted yet: retriable, as Kafka answers.
            assert (await node.produce(b"early")).error is ErrorCode.not_leader_or_follower
            controller.elect(2)  # queued behind the batch that creates the logs
            assert node.leadership == []
            await creating
            await node.replicas.metadata_applied()
            assert len(created_at) == partitions
            assert len(set(created_at)) == partitions  # other work ran between any two
            assert len(node.replicas.partitions) == partitions
            assert [change for change in node.leadership if change[1] == 0] == \
                [(TOPIC, 0, True, 0), (TOPIC, 0, False, 1)]
            # The epoch of the record that created the log, written with it.
            checkpoint = os.path.join(node.log().dir_path, LEADER_EPOCH_CHECKPOINT)
            assert read_epochs(checkpoint) == [(0, 0)]
            assert node.log().log_end_offset == 0
        finally:
            ticker.cancel()
            await node.stop()

    run(scenario())


def test_a_transaction_marker_needs_min_isr_and_moves_the_lso_once_replicated(tmp_path):
    async def scenario():
        node, _ = await leader_node(tmp_path, isr=(1,), **{"min.insync.replicas": "2"})
        replicas = node.replicas
        try:
            refused = replicas.append_txn_marker(TOPIC, 0, 7, 0, 0, commit=True)
            assert refused.error is ErrorCode.not_enough_replicas
            assert node.log().log_end_offset == 0
            node.controller.elect(1, isr=(1, 2))
            await wait_until(lambda: node.partition().isr == (1, 2), "the ISR to grow")
            written = replicas.append_txn_marker(TOPIC, 0, 7, 0, 0, commit=True)
            assert written.error is ErrorCode.none and written.base_offset == 0
            assert node.log().last_stable_offset == 0  # the marker is not replicated yet
            follower_fetch(node, 2, 1)
            assert node.log().high_watermark == node.log().last_stable_offset == 1
        finally:
            await node.stop()

    run(scenario())
