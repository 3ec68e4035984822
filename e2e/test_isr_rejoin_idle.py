"""An idle partition takes a briefly fenced broker back into its ISR.

A broker is paused (SIGSTOP) for longer than broker.session.timeout.ms, so the controller
fences it and moves its leaderships; after SIGCONT it is unfenced and must rejoin the ISR of
every partition it follows, including partitions that receive no records at all. Pausing the
leader twice leaves the second paused leader with a leader epoch (started on its empty log)
that the new leader never had, the case that kept such a follower out of the ISR.
"""

from __future__ import annotations

import signal

from confluent_kafka.admin import AdminClient, NewTopic

from e2e.test_cluster_failover import partition_state
from moldau.cluster.launcher import LocalCluster
from moldau.cluster.probe import ClusterView

TOPIC = "idle-rejoin"
FULL_ISR = [1, 2, 3]


def _isr_full(view: ClusterView) -> bool:
    return any(p.topic == TOPIC and sorted(p.isr) == FULL_ISR for p in view.partitions)


def _pause_leader_until_replaced(cluster: LocalCluster) -> int:
    """SIGSTOP the partition's leader until another broker leads it; then SIGCONT it."""
    paused, _ = partition_state(cluster, TOPIC)
    others = [node for node in FULL_ISR if node != paused]
    cluster.node(paused).signal(signal.SIGSTOP)
    try:
        cluster.wait_until(lambda view: any(
            p.topic == TOPIC and p.leader in others and paused not in p.isr
            for p in view.partitions), 60, f"broker {paused} fenced out of {TOPIC}",
            ask=others)
    finally:
        cluster.node(paused).signal(signal.SIGCONT)
    return paused


def test_idle_partition_takes_a_fenced_broker_back(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[FULL_ISR])])[TOPIC].result(30)
    cluster.wait_until(_isr_full, 30, f"{TOPIC} with a full ISR")

    for _ in range(2):
        paused = _pause_leader_until_replaced(cluster)
        cluster.wait_until(_isr_full, 30,
                           f"broker {paused} back in the ISR of the idle {TOPIC}")
