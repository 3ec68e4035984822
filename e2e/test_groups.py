"""Consumer groups with real clients in real processes: kafka-python, aiokafka and librdkafka
members sharing partitions, members leaving and dying, exactly accounted record processing
across rebalances, committed offsets across broker restarts, kcat as a group member, and a
member that stops polling.

Each consumer runs in its own process (support.GroupWorker) so it can be killed with SIGKILL;
it reports its assignments, the records it processed and the offsets it committed.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from e2e.support import (
    GroupWorker,
    ck_committed,
    ck_consumer,
    ck_create_topic,
    ck_describe_group,
    ck_produce_numbered,
    forget_clients,
    kcat,
    kp_consumer,
    unique,
    wait_split,
)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
SESSION_MS = 6000


def topic_with(bootstrap: str, partitions: int) -> tuple[str, set[tuple[str, int]]]:
    topic = unique("grp")
    ck_create_topic(bootstrap, topic, partitions)
    return topic, {(topic, p) for p in range(partitions)}


def processed(worker: GroupWorker) -> list[tuple[str, int, int, str]]:
    return [tuple(rec) for batch in worker.of("batch") for rec in batch["recs"]]


def wait_processed(workers: list[GroupWorker], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(processed(w)) for w in workers) < count:
        assert time.monotonic() < deadline, (
            f"{sum(len(processed(w)) for w in workers)} of {count} records processed in "
            f"{timeout} s\n" + "\n".join(w.summary() for w in workers))
        time.sleep(0.1)


def wait_committed(bootstrap: str, group: str, want: dict, workers: list[GroupWorker],
                   timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while (got := ck_committed(bootstrap, group)) != want:
        assert time.monotonic() < deadline, (
            f"committed {got}, want {want}\n" + "\n".join(w.summary() for w in workers))
        time.sleep(0.3)


# --------------------------------------------------------------------------- sharing


def test_three_clients_share_a_topic(module_broker, group_workers):
    """kafka-python, aiokafka and librdkafka in one group: disjoint assignments covering all
    six partitions; each then reads exactly the records of its own partitions."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-three")
    workers = [group_workers.start(client, bootstrap, group, [topic])
               for client in ("kp", "aio", "ck")]
    split = wait_split(workers, everything, timeout=30)
    assert all(len(part) == 2 for part in split), split  # roundrobin, the one common assignor

    produced = ck_produce_numbered(bootstrap, topic, range(120), 6)
    wait_processed(workers, 120, timeout=30)
    time.sleep(0.5)  # nothing beyond the 120 may arrive
    seen = []
    for worker, part in zip(workers, split, strict=True):
        mine = processed(worker)
        assert {(t, p) for t, p, _, _ in mine} <= part, f"{worker.name} read outside {part}"
        seen += mine
    assert sorted((p, o) for _, p, o, _ in seen) == sorted(produced), "records lost or repeated"
    assert all(produced[(p, o)] == int(v) for _, p, o, v in seen)

    description = ck_describe_group(bootstrap, group)
    assert description.state.name == "STABLE"
    assert description.partition_assignor == "roundrobin"
    members = {m.client_id: m for m in description.members}
    assert set(members) == {w.name for w in workers}
    for worker, part in zip(workers, split, strict=True):
        member = members[worker.name]
        assert member.host == "/127.0.0.1"
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == part
    assert ck_committed(bootstrap, group) == {(topic, p): 20 for p in range(6)}
    for worker in workers:
        worker.close()


@pytest.mark.parametrize("leaver, victim, survivor", [("aio", "ck", "kp"), ("kp", "aio", "ck")])
def test_left_and_killed_members_partitions_move_to_survivor(module_broker, group_workers,
                                                             leaver, victim, survivor):
    """One member closes (LeaveGroup: its partitions move at once), one is killed with
    SIGKILL (no goodbye: its partitions move when its session times out), the last one ends
    up with all six partitions and reads what is produced to them."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-takeover")
    workers = {client: group_workers.start(client, bootstrap, group, [topic],
                                           session_ms=SESSION_MS)
               for client in (leaver, victim, survivor)}
    wait_split(list(workers.values()), everything, timeout=30)

    closed_at = time.monotonic()
    workers[leaver].close()
    wait_split([workers[victim], workers[survivor]], everything, timeout=10, hold=0.5)
    assert time.monotonic() - closed_at < 5, "a member that left was not replaced at once"

    # The victim must have heartbeaten since the last rebalance, so its session is fresh.
    time.sleep(1.0)
    killed_at = time.monotonic()
    workers[victim].kill()
    taken = workers[survivor].wait_assignment(lambda tps: tps == everything, timeout=20,
                                              what="all six partitions", after=killed_at)
    elapsed = taken["t"] - killed_at
    # Kafka waits out the session (minus at most one heartbeat interval), then rebalances.
    assert SESSION_MS / 1000 - 1.0 <= elapsed <= SESSION_MS / 1000 + 4.0, (
        f"survivor took over {elapsed:.1f} s after the kill (session {SESSION_MS} ms)")

    before = len(processed(workers[survivor]))
    produced = ck_produce_numbered(bootstrap, topic, range(1000, 1060), 6)
    wait_processed([workers[survivor]], before + 60, timeout=20)
    got = {(p, o) for _, p, o, _ in processed(workers[survivor])}
    assert set(produced) <= got
    description = ck_describe_group(bootstrap, group)
    assert [m.client_id for m in description.members] == [workers[survivor].name]
    workers[survivor].close()


# --------------------------------------------------------------------------- exactly accounted


def account(workers: list[GroupWorker]) -> tuple[dict, dict, list[str]]:
    """Replay each worker's events. A processing of a record is *committed* when the same
    worker later committed an offset past it for that partition without having lost the
    partition in between. Returns ({(p, o): [committed processings as (worker, t, commit t)]},
    {(p, o): [uncommitted processings as (worker, t)]}, commit failure reasons)."""
    committed: dict[tuple[int, int], list] = defaultdict(list)
    uncommitted: dict[tuple[int, int], list] = defaultdict(list)
    failures = []
    for worker in workers:
        pending: dict[int, list[tuple[int, float]]] = defaultdict(list)

        def drop(partitions: list, pending: dict = pending, worker: GroupWorker = worker
                 ) -> None:
            for _, partition in partitions:
                for offset, t in pending.pop(partition, []):
                    uncommitted[(partition, offset)].append((worker.name, t))

        for event in worker.events:
            if event["ev"] == "batch":
                for _, partition, offset, _ in event["recs"]:
                    pending[partition].append((offset, event["t"]))
            elif event["ev"] == "committed":
                for _, partition, next_offset in event["offsets"]:
                    keep = []
                    for offset, t in pending[partition]:
                        if offset < next_offset:
                            committed[(partition, offset)].append((worker.name, t, event["t"]))
                        else:
                            keep.append((offset, t))
                    pending[partition] = keep
            elif event["ev"] == "commit_failed":
                failures.append(f"{worker.name}: {event['error']}")
            elif event["ev"] in ("revoked", "lost"):
                drop(event["tps"])
        drop([(None, partition) for partition in list(pending)])
    return committed, uncommitted, failures


def test_no_record_lost_or_committed_twice_across_rebalances(module_broker, group_workers):
    """Members of three clients join, leave and die while a producer writes numbered records;
    every member commits synchronously after each batch. In the end every record was
    processed and committed exactly once; records were processed again only where the
    earlier processing was never committed, and the member killed between processing a
    batch and committing it had that batch redone by another member."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-exact")
    total = 2400
    produced: dict[tuple[int, int], int] = {}
    stop = threading.Event()
    producer = threading.Thread(target=lambda: produced.update(
        ck_produce_numbered(bootstrap, topic, range(total), 6, rate=200, stop=stop)))
    try:
        run_exactness_scenario(bootstrap, topic, everything, group, group_workers, producer,
                               produced, total)
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(30)


def run_exactness_scenario(bootstrap: str, topic: str, everything: set, group: str,
                           group_workers, producer: threading.Thread, produced: dict,
                           total: int) -> None:

    def start(client: str) -> GroupWorker:
        return group_workers.start(client, bootstrap, group, [topic], session_ms=SESSION_MS)

    first, second = start("ck"), start("kp")
    wait_split([first, second], everything, timeout=30, hold=0.2)
    producer.start()
    time.sleep(2)
    third = start("aio")
    time.sleep(2)
    second.close()
    time.sleep(2)
    first.send("die-after-batch")
    first.wait_for(lambda e: e["ev"] == "exit", timeout=15, what="its own SIGKILL")
    assert first.proc.wait(5) == -9
    time.sleep(1)
    fourth = start("kp")
    producer.join(60)
    assert not producer.is_alive() and len(produced) == total

    ends = {(topic, p): 1 + max(o for q, o in produced if q == p) for p in range(6)}
    wait_committed(bootstrap, group, ends, [third, fourth])
    third.close()
    fourth.close()

    workers = [first, second, third, fourth]
    committed, uncommitted, failures = account(workers)
    for worker in workers:
        for _, partition, offset, value in processed(worker):
            assert produced[(partition, offset)] == int(value), (
                f"{worker.name} read {value!r} at {partition}/{offset}")
    missing = sorted(set(produced) - set(committed))
    assert not missing, f"{len(missing)} records never processed and committed: {missing[:10]}"
    twice = {key: runs for key, runs in committed.items() if len(runs) > 1}
    assert not twice, f"{len(twice)} records processed and committed twice: " \
                      f"{sorted(twice.items())[:5]}"
    # A record is processed again only when its earlier processing was never committed,
    # and never after another member committed it.
    late = [(key, run) for key, runs in uncommitted.items() for run in runs
            if run[1] > committed[key][0][2]]
    assert not late, f"records processed after being committed elsewhere: {late[:5]}"
    # The batch processed by the killed member just before it died was redone elsewhere.
    last_batch = first.of("batch")[-1]["recs"]
    for _, partition, offset, _ in last_batch:
        assert committed[(partition, offset)][0][0] != first.name
    assert set(uncommitted) >= {(p, o) for _, p, o, _ in last_batch}
    print(f"uncommitted processings: {sum(map(len, uncommitted.values()))}, "
          f"commit failures: {failures}")


# --------------------------------------------------------------------------- restarts


def ck_group_consumer(bootstrap: str, group: str, topic: str, timeout: float = 30):
    """A librdkafka group member that has received its assignment."""
    assigned = threading.Event()
    consumer = ck_consumer(bootstrap, **{"group.id": group, "session.timeout.ms": SESSION_MS})
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.set())
    deadline = time.monotonic() + timeout
    while not assigned.is_set():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.2)
    return consumer


def kp_first_offsets(bootstrap: str, group: str, topic: str, partitions: int,
                     expect: int) -> dict[int, int]:
    """Join the group with kafka-python and report the first offset read per partition."""
    consumer = kp_consumer(bootstrap, group_id=group, session_timeout_ms=SESSION_MS)
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    count = 0
    deadline = time.monotonic() + 30
    try:
        while count < expect:
            assert time.monotonic() < deadline, f"read {count} of {expect}: {first}"
            for tp, msgs in consumer.poll(timeout_ms=300).items():
                first.setdefault(tp.partition, msgs[0].offset)
                count += len(msgs)
        assert not consumer.poll(timeout_ms=500), "read more than was left after the commit"
    finally:
        consumer.close(autocommit=False)
    return first


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_committed_offsets_survive_broker_restart(broker_factory, how):
    """Offsets committed by a member of one client are where a member of another client
    resumes after the broker restarts, whether it stopped cleanly or was killed."""
    from confluent_kafka import TopicPartition

    broker = broker_factory(BROKER_OVERRIDES)
    topic = unique("restart")
    ck_create_topic(broker.bootstrap, topic, 3)
    ck_produce_numbered(broker.bootstrap, topic, range(30), 3)  # 10 per partition
    group = unique("g-restart")
    consumer = ck_group_consumer(broker.bootstrap, group, topic)
    try:
        result = consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7),
                                          TopicPartition(topic, 2, 10)], asynchronous=False)
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()

    if how == "stop":
        broker.stop()
    else:
        broker.kill()
    broker.start()

    assert ck_committed(broker.bootstrap, group) == {(topic, 0): 4, (topic, 1): 7, (topic, 2): 10}
    description = ck_describe_group(broker.bootstrap, group)
    assert description.state.name == "EMPTY" and not description.members
    first = kp_first_offsets(broker.bootstrap, group, topic, 3, expect=6 + 3)
    assert first == {0: 4, 1: 7}


def test_member_keeps_consuming_through_broker_kill(broker_factory, group_workers):
    """A member that commits after every batch rides out a kill -9 and restart of the broker:
    it reconnects, is still (or again) a member, and nothing is lost."""
    broker = broker_factory(BROKER_OVERRIDES)
    topic, everything = topic_with(broker.bootstrap, 3)
    group = unique("g-crash")
    worker = group_workers.start("kp", broker.bootstrap, group, [topic], session_ms=SESSION_MS)
    wait_split([worker], everything, timeout=30, hold=0.2)
    before = ck_produce_numbered(broker.bootstrap, topic, range(90), 3)
    wait_processed([worker], 90, timeout=20)
    wait_committed(broker.bootstrap, group, {(topic, p): 30 for p in range(3)}, [worker])
    broker.kill()
    broker.start()
    # The checks' cached librdkafka admin client re-bootstraps after the kill and can keep
    # a handle for node 1 in TRY_CONNECT that never sends the next request; the member under
    # test is the kafka-python worker, so the checks go through a new admin client.
    forget_clients(broker.bootstrap)
    after = ck_produce_numbered(broker.bootstrap, topic, range(90, 150), 3)
    wait_committed(broker.bootstrap, group, {(topic, p): 50 for p in range(3)}, [worker])
    got = {(p, o) for _, p, o, _ in processed(worker)}
    assert got == set(before) | set(after)
    worker.close()


# --------------------------------------------------------------------------- kcat


def test_kcat_consumes_as_a_group_member(module_broker):
    """`kcat -G` joins a group, reads every record, commits on exit; a second run of the same
    group starts from those commits and reads nothing old."""
    bootstrap = module_broker.bootstrap
    topic, _ = topic_with(bootstrap, 3)
    produced = ck_produce_numbered(bootstrap, topic, range(45), 3)
    group = unique("g-kcat")
    # No -o: with -G, kcat would force that offset on every assigned partition.
    args = ["-G", group, topic, "-e", "-f", "%p %o %s\\n", "-X", "auto.offset.reset=earliest",
            "-X", "session.timeout.ms=6000"]
    out = kcat(bootstrap, *args, timeout=60).stdout.decode().split("\n")
    rows = sorted(tuple(map(int, line.split())) for line in out if line.strip())
    assert rows == sorted((p, o, n) for (p, o), n in produced.items())
    assert ck_committed(bootstrap, group) == {(topic, p): 15 for p in range(3)}

    more = ck_produce_numbered(bootstrap, topic, range(45, 48), 3)
    out = kcat(bootstrap, *args, timeout=60).stdout.decode().split("\n")
    rows = sorted(tuple(map(int, line.split())) for line in out if line.strip())
    assert rows == sorted((p, o, n) for (p, o), n in more.items())


# --------------------------------------------------------------------------- max.poll.interval


def test_member_that_stops_polling_is_replaced(module_broker, group_workers):
    """A member that stops calling poll for longer than max.poll.interval.ms (its heartbeats
    go on) is out of the group and its partitions go to the other member; when it polls
    again it rejoins and gets a share back."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-maxpoll")
    max_poll_ms = 7000
    staller = group_workers.start("kp", bootstrap, group, [topic], session_ms=SESSION_MS,
                                  max_poll_ms=max_poll_ms)
    other = group_workers.start("ck", bootstrap, group, [topic], session_ms=SESSION_MS,
                                max_poll_ms=max_poll_ms)
    wait_split([staller, other], everything, timeout=30)
    staller.send("stall 10")
    stalled = staller.wait_for(lambda e: e["ev"] == "stalled", timeout=5, what="stall")
    taken = other.wait_assignment(lambda tps: tps == everything, timeout=20,
                                  what="all partitions", after=stalled["t"])
    elapsed = taken["t"] - stalled["t"]
    assert max_poll_ms / 1000 - 0.5 <= elapsed <= max_poll_ms / 1000 + 4, elapsed
    description = ck_describe_group(bootstrap, group)
    assert [m.client_id for m in description.members] == [other.name]
    assert description.state.name == "STABLE"

    staller.wait_for(lambda e: e["ev"] == "resumed", timeout=15, what="resume")
    wait_split([staller, other], everything, timeout=20)
    staller.close()
    other.close()
