"""Clock jumps: a node's wall clock steps while its monotonic clock runs on, and retention
deletes nothing whose retention.ms has not passed on the node's clock (as in Kafka, a jump
past retention.ms does delete: the second half shows the check can see a deletion)."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import TopicPartition

from e2e.chaos.clocks import NodeClocks
from e2e.chaos.faults import Faults
from e2e.chaos.net import TestNetwork
from e2e.support import ck_consume_all, ck_consumer, ck_produce, make_records, wait_until
from e2e.test_cluster_failover import create_topic
from moldau.cluster.launcher import LocalCluster

HOUR = 3600.0
SMALL_BATCHES = {"batch.size": 16000}  # below segment.bytes


def test_the_shift_moves_the_wall_clock_only(chaos_clocks: NodeClocks) -> None:
    script = ("import sys, time\n"
              "for line in sys.stdin:\n"
              "    print(time.time(), time.monotonic(), flush=True)\n")
    with subprocess.Popen([*chaos_clocks.prefix(1), sys.executable, "-c", script],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None and child.stdout is not None

        def read() -> tuple[float, float]:
            child.stdin.write("\n")
            child.stdin.flush()
            wall, mono = map(float, child.stdout.readline().split())
            return wall - time.time(), mono - time.monotonic()

        wall, mono = read()
        assert abs(wall) < 1
        chaos_clocks.set(1, 2 * HOUR)
        assert abs(read()[0] - 2 * HOUR) < 1
        chaos_clocks.set(1, -10 * 60)
        shifted_wall, shifted_mono = read()
        assert abs(shifted_wall + 600) < 1
        assert abs(shifted_mono - mono) < 1  # the monotonic clock did not move
        child.stdin.close()


def segment_files(cluster: LocalCluster, node_id: int, topic: str) -> list[str]:
    return sorted(path.name for path in
                  (cluster.node(node_id).data_dir / f"{topic}-0").glob("*.log"))


def test_retention_deletes_nothing_younger_than_retention_ms_across_jumps(
        chaos_cluster: LocalCluster, chaos_net: TestNetwork, chaos_clocks: NodeClocks) -> None:
    bootstrap = chaos_cluster.bootstrap_servers
    create_topic(bootstrap, "retained", 1, 3, {
        "min.insync.replicas": "2", "retention.ms": str(int(2 * HOUR * 1000)),
        "segment.bytes": "60000"})
    records = make_records(200, ts_base=int(time.time() * 1000) - 200)
    ck_produce(bootstrap, "retained", records, acks="all", **SMALL_BATCHES)
    chaos_cluster.wait_until(lambda view: not view.under_replicated, 30, "full ISRs")
    before = {node: segment_files(chaos_cluster, node, "retained") for node in (1, 2, 3)}
    assert all(len(files) > 3 for files in before.values()), before
    faults = Faults(chaos_cluster, chaos_net, clocks=chaos_clocks)
    # Forward by an hour (retention.ms is two), then back by an hour from the real time:
    # each node runs several retention checks (every 2 s) on the jumped clock.
    for seconds in (HOUR, -HOUR):
        jumps = [faults.clock_jump(node, seconds) for node in (1, 2, 3)]
        more = make_records(20, ts_base=int(time.time() * 1000))
        if seconds > 0:  # behind by an hour, the leader refuses timestamps an hour ahead
            ck_produce(bootstrap, "retained", more, acks="all", **SMALL_BATCHES)
            records += more
        time.sleep(8)  # four retention checks; the second half shows they do run
        for node in (1, 2, 3):
            assert segment_files(chaos_cluster, node, "retained")[:len(before[node])] == \
                before[node]
        for jump in jumps:
            faults.heal(jump)
    assert len(ck_consume_all(bootstrap, "retained")) == len(records)
    # Three hours ahead, past retention.ms: the closed segments go, as they would in Kafka.
    for node in (1, 2, 3):
        faults.clock_jump(node, 3 * HOUR)
    wait_until(lambda: all(before[node][0] not in segment_files(chaos_cluster, node, "retained")
                           for node in (1, 2, 3)), 60, "retention past retention.ms")
    consumer = ck_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("retained", 0), timeout=15)
    finally:
        consumer.close()
    assert high == len(records) and low > int(before[1][1].split(".")[0])
