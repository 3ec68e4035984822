"""The Moldau consumer against a real broker process: positions, resets, commits, groups,
rebalance listeners, static membership and the synchronous face's thread rules."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from e2e.support import kp_create_topic, unique, wait_until
from moldau.client import (
    Admin,
    AsyncConsumer,
    Consumer,
    ConsumerRebalanceListener,
    Producer,
    TopicPartition,
)
from moldau.client.errors import (
    ClientClosedError,
    CommitFailedError,
    ConcurrentModificationError,
    IllegalStateError,
    InvalidGroupIdError,
    NoOffsetForPartitionError,
    WakeupError,
)
from moldau.records.batch import HEADER_SIZE
from moldau.records.codec import decode_records

pytestmark = pytest.mark.timeout(120)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def bootstrap(module_broker) -> str:
    return module_broker.bootstrap


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int,
         timestamps: list[int] | None = None) -> None:
    """`per_partition` records in each partition, values "p<partition>-<index>"."""
    kp_create_topic(bootstrap, topic, partitions)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2}) as producer:
        for p in range(partitions):
            for i in range(per_partition):
                ts = timestamps[i] if timestamps else None
                producer.send(topic, f"p{p}-{i}".encode(), partition=p, timestamp_ms=ts)
        producer.flush(30)


def consumer(bootstrap: str, **settings) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                     "fetch.max.wait.ms": 100, **settings}, value_deserializer="str")


def drain(c: Consumer, want: int, timeout: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(c.poll(0.5))
    return got


def test_assign_reads_every_record_in_order_and_respects_max_poll_records(bootstrap):
    topic = unique("cons")
    fill(bootstrap, topic, 3, 400)
    with consumer(bootstrap, **{"max.poll.records": 250}) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 1200 and time.monotonic() < deadline:
            batch = c.poll(1.0)
            assert len(batch) <= 250
            got.extend(batch)
        assert len(got) == 1200
        for p in range(3):
            mine = [r for r in got if r.partition == p]
            assert [r.offset for r in mine] == list(range(400))
            assert [r.value for r in mine] == [f"p{p}-{i}" for i in range(400)]
            assert c.position(TopicPartition(topic, p)) == 400
        assert not c.poll(0.2), "nothing more to read"


def batch_values(batches) -> list[tuple[int, str]]:
    """(offset, value) of every record of FetchedBatches from each one's first offset."""
    out = []
    for batch in batches:
        # Uncompressed: the section lies in the fetched bytes, right after its header.
        assert batch.header.compression == 0
        whole = batch.records[batch.start - HEADER_SIZE:batch.end]
        for record in decode_records(whole):
            offset = batch.header.base_offset + record.offset_delta
            if offset >= batch.first_offset:
                out.append((offset, record.value.decode()))
    return out


def test_poll_batches_hands_over_whole_batches_after_what_poll_returned(bootstrap):
    topic = unique("cons-batches")
    fill(bootstrap, topic, 1, 300)
    tp = TopicPartition(topic, 0)
    with consumer(bootstrap, **{"max.poll.records": 7}) as c:
        c.assign([tp])
        # poll() takes the first records of a batch; poll_batches() goes on after them.
        first = drain(c, 1)
        assert [r.offset for r in first] == list(range(7))
        got: list[tuple[int, str]] = []
        rest = c.poll_batches(5.0, max_records=100)
        # The batch poll() began, whole, with its first offset after what poll() returned.
        assert (rest[0].header.base_offset, rest[0].first_offset) == (0, 7)
        got.extend(batch_values(rest))
        deadline = time.monotonic() + 20
        while c.position(tp) < 300 and time.monotonic() < deadline:
            batches = c.poll_batches(0.5, max_records=100)
            assert all(b.topic == topic and b.partition == 0 for b in batches)
            got.extend(batch_values(batches))
            if got:
                assert c.position(tp) == got[-1][0] + 1
        assert got == [(i, f"p0-{i}") for i in range(len(first), 300)]
        assert not c.poll_batches(0.2)


def test_seek_positions_and_offset_lookups(bootstrap):
    topic = unique("seek")
    base = int(time.time() * 1000) - 100_000
    fill(bootstrap, topic, 1, 50, timestamps=[base + i * 1000 for i in range(50)])
    tp = TopicPartition(topic, 0)
    with consumer(bootstrap, **{"auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        assert c.position(tp) == 50  # latest
        c.seek(tp, 10)
        assert c.position(tp) == 10
        first = drain(c, 1)
        assert first[0].offset == 10 and first[0].value == "p0-10"
        assert first[0].timestamp == base + 10_000
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0
        c.seek_to_end()
        assert c.position(tp) == 50
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 50}
        found = c.offsets_for_times({tp: base + 20_500})
        assert found[tp].offset == 21 and found[tp].timestamp == base + 21_000
        assert c.offsets_for_times({tp: base + 10_000_000})[tp] is None
        with pytest.raises(ValueError):
            c.seek(tp, -1)


def test_topics_first_thing_after_start_lists_every_topic(bootstrap):
    """The update in flight at start-up lists no topics; topics() waits for its own."""
    names = {unique("listed-a"), unique("listed-b")}
    for name in names:
        kp_create_topic(bootstrap, name)
    for _ in range(3):
        with consumer(bootstrap) as c:
            assert names <= c.topics()


def test_out_of_range_position_resets_by_policy(bootstrap):
    topic = unique("oor")
    fill(bootstrap, topic, 1, 20)
    tp = TopicPartition(topic, 0)
    with consumer(bootstrap) as c:  # earliest
        c.assign([tp])
        c.seek(tp, 5000)
        got = drain(c, 20)
        assert [r.offset for r in got] == list(range(20))
    with consumer(bootstrap, **{"auto.offset.reset": "none"}) as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(5)
        c.seek(tp, 5000)
        with pytest.raises(Exception) as caught:
            for _ in range(20):
                c.poll(0.5)
        assert type(caught.value).__name__ == "OffsetOutOfRangeError"


def test_paused_partitions_return_nothing_until_resumed(bootstrap):
    topic = unique("pause")
    fill(bootstrap, topic, 2, 30)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with consumer(bootstrap) as c:
        c.assign([tp0, tp1])
        c.pause(tp1)
        assert c.paused() == {tp1}
        got = drain(c, 30, timeout=10)
        got.extend(c.poll(0.5))
        assert {r.partition for r in got} == {0} and len(got) == 30
        c.resume(tp1)
        assert c.paused() == set()
        rest = drain(c, 30)
        assert [r.offset for r in rest] == list(range(30)) and {r.partition for r in rest} == {1}


def test_group_commits_resume_where_the_last_member_stopped(bootstrap):
    topic, group = unique("grp"), unique("g")
    fill(bootstrap, topic, 2, 100)
    with consumer(bootstrap, **{"group.id": group, "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        got = drain(c, 200)
        assert len(got) == 200
        c.commit({TopicPartition(topic, 0): 60, TopicPartition(topic, 1): 100})
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert {tp: om.offset for tp, om in committed.items()} == {
            TopicPartition(topic, 0): 60, TopicPartition(topic, 1): 100}
    with consumer(bootstrap, **{"group.id": group}) as c:  # auto commit on close
        c.subscribe([topic])
        got = drain(c, 40)
        assert sorted((r.partition, r.offset) for r in got) == [(0, o) for o in range(60, 100)]
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_group_offsets(group)
    assert {tp: om.offset for tp, om in offsets.items()} == {
        TopicPartition(topic, 0): 100, TopicPartition(topic, 1): 100}


def test_without_group_id_group_calls_fail_clearly(bootstrap):
    with consumer(bootstrap) as c:
        with pytest.raises(InvalidGroupIdError, match="group.id"):
            c.subscribe(["x"])
        with pytest.raises(InvalidGroupIdError):
            c.commit()
        with pytest.raises(IllegalStateError, match="not subscribed"):
            c.poll(0)


class Recorder(ConsumerRebalanceListener):
    def __init__(self, consumer_ref: list) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.consumer_ref = consumer_ref
        self.thread_ids: set[int] = set()

    def on_partitions_revoked(self, revoked):
        self.thread_ids.add(threading.get_ident())
        self.events.append(("revoked", list(revoked)))
        if revoked:
            self.consumer_ref[0].commit()  # allowed from inside poll, on the caller thread

    def on_partitions_assigned(self, assigned):
        self.thread_ids.add(threading.get_ident())
        self.events.append(("assigned", list(assigned)))


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_two_members_split_partitions_and_listeners_run_in_poll(bootstrap, strategy):
    topic, group = unique("reb"), unique("g")
    fill(bootstrap, topic, 4, 10)
    settings = {"group.id": group, "partition.assignment.strategy": strategy,
                "heartbeat.interval.ms": 200}
    ref_a: list = []
    listener_a = Recorder(ref_a)
    with consumer(bootstrap, **settings) as a:
        ref_a.append(a)
        a.subscribe([topic], listener=listener_a)
        wait_until(lambda: len(a.poll(0.2)) >= 0 and len(a.assignment()) == 4, 20,
                   "the first member owns every partition")
        assert listener_a.events[-1] == ("assigned", [TopicPartition(topic, p)
                                                      for p in range(4)])
        stop = threading.Event()
        seen_by_a: list[set[TopicPartition]] = [set()]

        def keep_polling() -> None:  # `a` now belongs to this thread
            while not stop.is_set():
                a.poll(0.1)
                seen_by_a[0] = a.assignment()

        with consumer(bootstrap, **settings) as b:
            b.subscribe([topic])
            poller = threading.Thread(target=keep_polling)
            poller.start()
            try:
                wait_until(lambda: (b.poll(0.1) is not None and len(b.assignment()) == 2 and
                                    len(seen_by_a[0]) == 2), 30, "two partitions each")
            finally:
                stop.set()
                poller.join()
            assert a.assignment() | b.assignment() == {TopicPartition(topic, p)
                                                       for p in range(4)}
        revoked = [e for e in listener_a.events if e[0] == "revoked" and e[1]]
        assert revoked, listener_a.events
        if strategy == "cooperative-sticky":
            # Only what moves is revoked, and nothing is assigned twice.
            assert all(len(e[1]) == 2 for e in revoked), listener_a.events
        else:
            assert any(len(e[1]) == 4 for e in revoked), listener_a.events
        assert listener_a.thread_ids == {threading.get_ident(), poller.ident}


def test_static_member_restart_keeps_its_assignment_without_rebalance(bootstrap):
    topic, group = unique("static"), unique("g")
    fill(bootstrap, topic, 2, 5)
    settings = {"group.id": group, "group.instance.id": "worker-1",
                "session.timeout.ms": 30000}
    with consumer(bootstrap, **settings) as c:
        c.subscribe([topic])
        drain(c, 10)
        generation = c.async_consumer.coordinator.generation.generation_id
    with consumer(bootstrap, **settings) as c:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.2) is not None and len(c.assignment()) == 2, 20,
                   "the static member is back")
        assert c.async_consumer.coordinator.generation.generation_id == generation
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        described = admin.describe_groups([group])[group]
    # A static member does not leave on close: it is still a member.
    assert [m.group_instance_id for m in described.members] == ["worker-1"]


def test_poll_interval_expiry_leaves_the_group_and_commit_fails(bootstrap):
    topic, group = unique("slow"), unique("g")
    fill(bootstrap, topic, 1, 5)
    with consumer(bootstrap, **{"group.id": group, "max.poll.interval.ms": 1500,
                                "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                                "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        drain(c, 5)
        time.sleep(3)  # longer than max.poll.interval.ms: the member leaves
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            assert admin.describe_groups([group])[group].members == ()
        with pytest.raises(CommitFailedError, match="max.poll.interval.ms"):
            c.commit({TopicPartition(topic, 0): 5})
        wait_until(lambda: c.poll(0.2) is not None and len(c.assignment()) == 1, 20,
                   "rejoined on the next polls")


def test_sync_consumer_thread_rules_wakeup_and_close(bootstrap):
    topic = unique("threads")
    kp_create_topic(bootstrap, topic, 1)
    c = consumer(bootstrap)
    c.assign([TopicPartition(topic, 0)])
    errors: list[BaseException] = []
    started = threading.Event()

    def long_poll() -> None:
        started.set()
        try:
            c.poll(10)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    worker = threading.Thread(target=long_poll)
    worker.start()
    started.wait()
    time.sleep(0.3)
    with pytest.raises(ConcurrentModificationError, match="multi-threaded"):
        c.poll(0)
    t0 = time.monotonic()
    c.wakeup()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - t0 < 2
    assert len(errors) == 1 and isinstance(errors[0], WakeupError)
    c.wakeup()  # no call in progress: the next blocking one raises
    with pytest.raises(WakeupError):
        c.poll(1)
    assert not c.poll(0.1)  # and only that one
    c.close()
    with pytest.raises(ClientClosedError, match="already been closed"):
        c.poll(0)
    c.close()  # closing twice is fine


def test_async_consumer_group_round_trip(bootstrap):
    topic, group = unique("aio"), unique("g")
    fill(bootstrap, topic, 2, 50)

    async def main() -> list:
        async with AsyncConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest"},
                                 value_deserializer="str") as c:
            c.subscribe([topic])
            got: list = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                got.extend(await c.poll(0.5))
            await c.commit()
            committed = await c.committed([TopicPartition(topic, 0),
                                           TopicPartition(topic, 1)])
            assert {om.offset for om in committed.values()} == {50}
            return got

    got = asyncio.run(main())
    assert sorted((r.partition, r.offset) for r in got) == [
        (p, o) for p in range(2) for o in range(50)]
