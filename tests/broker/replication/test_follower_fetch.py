"""The follower path over real loopback sockets: a leader Node serves the real handlers, a
follower Node's fetcher truncates (OffsetForLeaderEpoch), fetches and appends."""

from __future__ import annotations

import asyncio

from replication_helpers import (
    TOPIC,
    Clock,
    FakeController,
    Node,
    log_bytes,
    run,
    wait_until,
)

from moldau.errors import ErrorCode


def test_follower_log_is_byte_identical_and_high_watermarks_move(tmp_path):
    async def scenario():
        controller, clock = FakeController(), Clock()
        leader, follower = Node(1, tmp_path, controller, clock), \
            Node(2, tmp_path, controller, clock)
        await leader.start()
        await follower.start()
        try:
            await controller.create_topic(replicas=[1, 2])
            for round_ in range(5):
                result = await leader.produce(b"a%d" % round_, b"b%d" % round_)
                assert result.error is ErrorCode.none, result
                # acks=all returned: the follower has the records, so the HW passed them.
                assert leader.log().high_watermark >= result.last_offset + 1
            await wait_until(lambda: follower.log().log_end_offset == 10, "follower catch-up")
            assert log_bytes(follower) == log_bytes(leader)
            # The follower learns the leader's high watermark with its next fetch.
            await wait_until(lambda: follower.log().high_watermark == 10, "follower HW")
            assert leader.log().high_watermark == 10
            assert follower.log().latest_epoch == leader.log().latest_epoch == 0
            assert follower.leadership == [(TOPIC, 0, False, 0)]
            assert leader.leadership == [(TOPIC, 0, True, 0)]
        finally:
            await follower.stop()
            await leader.stop()

    run(scenario())


LAG_MS = 10_000


async def cluster(tmp_path, **settings):
    controller, clock = FakeController(), Clock()
    nodes = [Node(i, tmp_path, controller, clock, **{"replica.lag.time.max.ms": str(LAG_MS),
                                                      **settings}) for i in (1, 2)]
    for node in nodes:
        await node.start()
    return controller, clock, nodes


def test_kip101_double_failover_truncates_the_divergent_tail(tmp_path):
    """KIP-101's "replica divergence after multiple hard failures": the old leader comes
    back with a record the new leader never had, at an offset the new leader has since
    filled differently, and with a high watermark that would not remove it."""
    async def scenario():
        controller, clock, (a, b) = await cluster(tmp_path)
        await controller.create_topic(replicas=[1, 2])
        assert (await a.produce(b"m0")).error is ErrorCode.none
        await b.replicas.fetchers.stop()  # b stalls...
        assert (await a.produce(b"m1", acks=1)).error is ErrorCode.none
        clock.advance(LAG_MS + 1)
        a.replicas.maybe_shrink_isr()  # ...and leaves the ISR: m1 is committed on a alone
        await wait_until(lambda: a.log().high_watermark == 2, "a's HW past m1")
        await a.stop()
        await b.stop()  # both down

        controller.elect(2, isr=[2])  # b comes back first and leads (unclean)
        b = Node(2, tmp_path, controller, clock)
        await b.start()
        assert (await b.produce(b"m1-prime")).error is ErrorCode.none
        a = Node(1, tmp_path, controller, clock)
        # a's checkpointed HW covers m1: truncating to the HW would keep it.
        assert a.log().high_watermark == a.log().log_end_offset == 2
        await a.start()
        try:
            await wait_until(lambda: log_bytes(a) == log_bytes(b), "a to match b")
            assert a.log().end_offset_for_epoch(0) == (0, 1)
            assert a.log().latest_epoch == 1
            # Caught up: a rejoins the ISR and the HW covers everything.
            await wait_until(lambda: b.partition().isr == (2, 1), "a back in the ISR")
            await wait_until(lambda: a.log().high_watermark == 2, "a's HW")
        finally:
            await a.stop()
            await b.stop()

    run(scenario())


def test_an_empty_follower_drops_the_epoch_it_led_without_records(tmp_path):
    """b leads epoch 1 of an empty partition, then follows a in epoch 2. a never had epoch 1:
    truncating to where a says it diverges (b's log end, 0) removes no batch but must forget
    epoch 1, or each fetch of b names it again, diverges again and b never rejoins the ISR."""
    async def scenario():
        controller, _, (a, b) = await cluster(tmp_path)
        try:
            await controller.create_topic(replicas=[1, 2])
            controller.elect(2, isr=[2])
            await wait_until(lambda: b.partition().isr == (2, 1), "a in b's ISR")
            controller.elect(1, isr=[1])
            await wait_until(lambda: a.partition().isr == (1, 2), "b back in a's ISR")
            assert b.log().latest_epoch is None
        finally:
            await b.stop()
            await a.stop()

    run(scenario())


def test_a_lagging_follower_is_shrunk_out_and_comes_back(tmp_path):
    async def scenario():
        controller, clock, (a, b) = await cluster(tmp_path)
        try:
            await controller.create_topic(replicas=[1, 2])
            assert (await a.produce(b"one")).error is ErrorCode.none
            await b.replicas.fetchers.stop()
            waiting = asyncio.create_task(a.produce(b"two", b"three"))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            clock.advance(LAG_MS + 1)
            a.replicas.maybe_shrink_isr()
            assert (await waiting).error is ErrorCode.none  # min.insync.replicas is 1
            assert a.partition().isr == (1,)
            assert a.log().high_watermark == 3
            await b.replicas.fetchers.start()
            await wait_until(lambda: a.partition().isr == (1, 2), "b back in the ISR")
            assert log_bytes(a) == log_bytes(b)
        finally:
            await b.stop()
            await a.stop()

    run(scenario())


def test_a_new_follower_starts_at_the_leaders_log_start(tmp_path):
    async def scenario():
        controller, clock = FakeController(), Clock()
        a = Node(1, tmp_path, controller, clock)
        await a.start()
        controller.register(2)
        await controller.create_topic(replicas=[1, 2], isr=[1])
        for i in range(10):
            assert (await a.produce(b"r%d" % i)).error is ErrorCode.none
        a.log().delete_records(5)
        b = Node(2, tmp_path, controller, clock)
        await b.start()
        try:
            await wait_until(lambda: b.log().log_end_offset == 10, "b to catch up")
            assert b.log().log_start_offset == 5
            assert log_bytes(b) == log_bytes(a)
            await wait_until(lambda: a.partition().isr == (1, 2), "b in the ISR")
            a.log().delete_records(7)
            await wait_until(lambda: b.log().log_start_offset == 7, "b's log start to follow")
        finally:
            await b.stop()
            await a.stop()

    run(scenario())
