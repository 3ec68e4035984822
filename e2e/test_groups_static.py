"""Static group membership (KIP-345, group.instance.id) with real clients.

A static member that restarts within its session timeout takes its old place: same
partitions, no rebalance, nothing revoked from anyone. A second process with the same
group.instance.id fences the first, whose requests then fail with FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import time

import pytest

from e2e.support import (
    ck_committed,
    ck_create_topic,
    ck_describe_group,
    ck_produce_numbered,
    unique,
    wait_split,
)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
SESSION_MS = 6000


def topic_with(bootstrap: str, partitions: int) -> tuple[str, set[tuple[str, int]]]:
    topic = unique("static")
    ck_create_topic(bootstrap, topic, partitions)
    return topic, {(topic, p) for p in range(partitions)}


def rebalance_marks(worker) -> list[dict]:
    """Callbacks that only run in a rebalance touching this member."""
    return [e for e in worker.events if e["ev"] in ("revoked", "lost") and e["tps"]]


@pytest.mark.parametrize("client, other, role, assignor", [
    ("ck", "kp", "leader", None),
    ("kp", "ck", "leader", None),
    ("aio", "ck", "follower", None),
    # The sticky assignor's user data (the member's previous partitions) is empty after a
    # restart (it held partitions when it last joined): new metadata, same protocol, which
    # Kafka stores without a rebalance.
    ("kp", "kp", "leader", ["sticky"]),
])
def test_static_member_restart_keeps_assignment_without_rebalance(
        module_broker, group_workers, client, other, role, assignor):
    """A static member closes (no LeaveGroup) and a new process with the same instance id
    joins within the session timeout: it gets the old partitions straight away, the other
    member's partitions are never revoked, and no rebalance follows when the old session
    would have expired."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-static")
    instance = unique("instance")

    def start_static():
        return group_workers.start(client, bootstrap, group, [topic], instance_id=instance,
                                   session_ms=SESSION_MS, assignor=assignor)

    def start_other():
        return group_workers.start(other, bootstrap, group, [topic], session_ms=SESSION_MS,
                                   assignor=assignor)

    # The first member to join leads the group.
    if role == "leader":
        static = start_static()
        wait_split([static], everything, timeout=30, hold=0.3)
        peer = start_other()
    else:
        peer = start_other()
        wait_split([peer], everything, timeout=30, hold=0.3)
        static = start_static()
    held, _ = wait_split([static, peer], everything, timeout=30, hold=1.5)
    before = ck_describe_group(bootstrap, group)
    old_ids = {m.group_instance_id: m.member_id for m in before.members}
    assert set(old_ids) == {instance, None}
    marks = len(rebalance_marks(peer))
    assigned = len(peer.of("assigned"))

    closed_at = time.monotonic()
    static.close()
    # Closing a static member sends no LeaveGroup: it is still a member.
    during = ck_describe_group(bootstrap, group)
    assert during.state.name == "STABLE"
    assert {m.member_id for m in during.members} == set(old_ids.values())

    restarted = start_static()
    got = restarted.wait_assignment(lambda tps: bool(tps), timeout=SESSION_MS / 1000,
                                    what="its old partitions")
    assert {tuple(tp) for tp in got["tps"]} == held
    assert got["t"] - closed_at < SESSION_MS / 1000

    # Past the moment the old incarnation's session would have run out.
    time.sleep(max(0.0, closed_at + SESSION_MS / 1000 + 1.5 - time.monotonic()))
    assert rebalance_marks(peer)[marks:] == [], "the other member had partitions revoked"
    assert len(peer.of("assigned")) == assigned, "the other member went through a rebalance"
    assert restarted.assignment() == held
    assert len(restarted.of("assignment")) == 1, restarted.summary()
    after = ck_describe_group(bootstrap, group)
    assert after.state.name == "STABLE"
    new_ids = {m.group_instance_id: m.member_id for m in after.members}
    assert new_ids[None] == old_ids[None]
    assert new_ids[instance] != old_ids[instance], "the restarted member kept the old id"
    member = next(m for m in after.members if m.group_instance_id == instance)
    assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == held
    restarted.close()
    peer.close()


def test_duplicate_instance_id_fences_librdkafka_member(module_broker, group_workers):
    """A second librdkafka consumer with the same group.instance.id takes over; the first
    is told FENCED_INSTANCE_ID (a fatal error in librdkafka)."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 4)
    group = unique("g-fence")
    instance = unique("instance")
    first = group_workers.start("ck", bootstrap, group, [topic], instance_id=instance,
                                session_ms=SESSION_MS)
    wait_split([first], everything, timeout=30, hold=0.3)
    second = group_workers.start("ck", bootstrap, group, [topic], instance_id=instance,
                                 session_ms=SESSION_MS)
    wait_split([second], everything, timeout=30, hold=0.3)
    fenced = first.wait_for(lambda e: e["ev"] == "error", timeout=10, what="an error")
    assert "fenced" in fenced["detail"].lower(), fenced
    assert rebalance_marks(second) == []
    description = ck_describe_group(bootstrap, group)
    assert [m.group_instance_id for m in description.members] == [instance]
    first.kill()
    second.close()


def test_duplicate_instance_id_fences_kafka_python_member(module_broker, group_workers):
    """kafka-python learns it was fenced when it commits: its commits are refused with
    FENCED_INSTANCE_ID while the new instance reads and commits everything."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 4)
    group = unique("g-fence")
    instance = unique("instance")
    first = group_workers.start("kp", bootstrap, group, [topic], instance_id=instance,
                                session_ms=SESSION_MS)
    wait_split([first], everything, timeout=30, hold=0.3)
    second = group_workers.start("kp", bootstrap, group, [topic], instance_id=instance,
                                 session_ms=SESSION_MS)
    wait_split([second], everything, timeout=30, hold=0.3)
    ck_produce_numbered(bootstrap, topic, range(40), 4)
    failed = first.wait_for(lambda e: e["ev"] == "commit_failed", timeout=15,
                            what="a refused commit")
    assert failed["error"] == "FencedInstanceIdError", failed
    assert not first.of("committed")
    deadline = time.monotonic() + 15
    while ck_committed(bootstrap, group) != {(topic, p): 10 for p in range(4)}:
        assert time.monotonic() < deadline, ck_committed(bootstrap, group)
        time.sleep(0.3)
    first.kill()
    second.close()
