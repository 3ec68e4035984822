"""Transaction markers and read_committed, against Moldau and against Apache Kafka.

The transactions are driven by hand, as a transaction coordinator would (raw Produce of
transactional batches, raw WriteTxnMarkers), so both brokers see the same bytes; Kafka's
Java consumer reads them with isolation.level=read_committed, and the `.txnindex` files
both brokers write must be byte for byte the same.
"""

from __future__ import annotations

import struct

import pytest

from e2e import wire
from e2e.java.oracle import (
    BROKER_SETTINGS,
    Checks,
    rec_from_json,
    run_driver,
    without_transaction_verification,
)
from e2e.kafka_dist import kafka_tool
from e2e.support import kp_create_topic, unique
from e2e.test_transactions import COMMITTED, PLAIN, Scenario, txnindex_files

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS


def test_markers_lso_and_aborted_index_match_kafka(target, tmp_path):
    without_transaction_verification(target)
    topic = unique("java-txn")
    kp_create_topic(target.bootstrap, topic)
    run = Scenario(target.bootstrap, topic)
    denied = wire.produce(run.conn, 3, topic, 0, run.txn_batch(run.p1, [b"x"]))
    run.produce_all()
    open_lso = run.latest(wire.READ_COMMITTED)
    ended = [run.end(run.p1, commit=True, coordinator_epoch=5),
             run.end(run.p2, commit=False, coordinator_epoch=5),
             run.end(run.p1, commit=False, coordinator_epoch=4)]
    fetched = wire.fetch_partition(run.conn, 40, topic, 0, 0, wire.READ_COMMITTED)
    run.conn.close()
    consumed = run_driver(target.bootstrap, [{
        "op": "consume", "group": unique("java-txn-group"), "topics": [topic], "count": 4,
        "linger_ms": 2000, "commit": False,
        "config": {"isolation.level": "read_committed", "auto.offset.reset": "earliest"}}],
        tmp_path)[0]
    # Aborted while the other transaction is still open: the index keeps that one's start
    # as the stable offset of the time.
    second = unique("java-txn-open")
    kp_create_topic(target.bootstrap, second)
    other = Scenario(target.bootstrap, second)
    other.produce_all()
    ended_early = [other.end(other.p2, commit=False), other.end(other.p1, commit=True)]
    other.conn.close()
    index, index_early = (txnindex_files(target.log_dir, name) for name in (topic, second))

    with Checks() as check:
        check.equal("transactional produce without a transactional id", denied.error_code,
                    wire.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        check.equal("ListOffsets latest, read_committed, transactions open", open_lso, 1)
        check.equal("WriteTxnMarkers errors", ended,
                    [wire.NONE, wire.NONE, wire.TRANSACTION_COORDINATOR_FENCED])
        check.equal("Fetch read_committed: LSO and aborted transactions",
                    (fetched.last_stable_offset, fetched.aborted), (9, [(run.p2, 3)]))
        check.equal("Java consumer, read_committed (values, offsets)",
                    [(r.value, r.offset) for r in map(rec_from_json, consumed["records"])],
                    [(PLAIN[0], 0), (COMMITTED[0], 1), (COMMITTED[1], 2), (PLAIN[1], 6)])
        check.equal(".txnindex files", index, {FIRST_INDEX: entry(run.p2, 3, 8, 9)})
        check.equal("abort before the commit: WriteTxnMarkers errors", ended_early,
                    [wire.NONE, wire.NONE])
        check.equal("abort before the commit: .txnindex files", index_early,
                    {FIRST_INDEX: entry(other.p2, 3, 7, 1)})


FIRST_INDEX = f"{0:020d}.txnindex"


def entry(producer_id: int, first: int, last: int, stable: int) -> bytes:
    """One aborted transaction in Kafka's .txnindex layout (version 0)."""
    return struct.pack(">hqqqq", 0, producer_id, first, last, stable)



def test_transactional_java_producer_until_the_coordinator_exists(target):
    """Kafka's ProducerPerformance with a transactional id: Apache Kafka runs it; Moldau, which
    has no transaction coordinator yet, refuses InitProducerId at once with an error the Java
    producer treats as fatal, instead of letting initTransactions() time out."""
    topic = unique("java-txn-producer")
    kp_create_topic(target.bootstrap, topic)
    result = kafka_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", "20",
                        "--record-size", "10", "--throughput", "-1", "--transactional-id",
                        unique("perf-txn"), "--transaction-duration-ms", "100",
                        "--producer-props", f"bootstrap.servers={target.bootstrap}",
                        "max.block.ms=15000", check=False)
    if target.kind == "kafka":
        assert result.returncode == 0, result.describe()
        assert "20 records sent" in result.stdout, result.describe()
        return
    assert result.returncode != 0, result.describe()
    assert "TransactionalIdAuthorizationException" in result.stdout + result.stderr, \
        result.describe()
    assert result.elapsed < 12, result.describe()  # the JVM's start-up, not max.block.ms
