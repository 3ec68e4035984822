"""Transactions against Moldau and against Apache Kafka.

The first test drives transactions by hand, as a transaction coordinator would (raw Produce
of transactional batches, raw WriteTxnMarkers), so both brokers see the same bytes; Kafka's
Java consumer reads them with isolation.level=read_committed, and the `.txnindex` files
both brokers write must be byte for byte the same. The others go through each broker's
transaction coordinator: Kafka's transactional producer, ProducerPerformance with a
transactional id, and the kafka-transactions tool.
"""

from __future__ import annotations

import base64
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


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def test_java_transactional_producer_commits_aborts_and_is_fenced(target, tmp_path):
    """Kafka's producer through initTransactions, commit and abort; a second producer with
    the same transactional id fences the first, whose open transaction is aborted."""
    topic = unique("java-txn-producer")
    kp_create_topic(target.bootstrap, topic)

    def act(producer: int, do: str, *values: bytes) -> dict:
        return {"producer": producer, "do": do, "values": [b64(v) for v in values]}

    steps = [{"op": "transactions", "topic": topic, "transactional_id": unique("java-txn-id"),
              "producers": 2, "config": {"max.block.ms": "30000"}, "actions": [
                  act(0, "init"), act(0, "begin"), act(0, "send", b"c1", b"c2"),
                  act(0, "commit"), act(0, "begin"), act(0, "send", b"a1"), act(0, "abort"),
                  act(0, "begin"), act(0, "send", b"zombie"),
                  act(1, "init"), act(1, "begin"), act(1, "send", b"live"), act(1, "commit"),
                  act(0, "commit")]}]
    for isolation, count in (("read_committed", 3), ("read_uncommitted", 5)):
        steps.append({"op": "consume", "group": unique("java-txn-read"), "topics": [topic],
                      "count": count, "linger_ms": 1500, "commit": False,
                      "config": {"isolation.level": isolation,
                                 "auto.offset.reset": "earliest"}})
    produced, committed, uncommitted = run_driver(target.bootstrap, steps, tmp_path)

    def seen(result: dict) -> list[bytes]:
        return [rec.value for rec in map(rec_from_json, result["records"])]

    with Checks() as check:
        check.equal("outcomes", produced["outcomes"], ["ok"] * 13 + ["ProducerFencedException"])
        check.equal("read_committed", seen(committed), [b"c1", b"c2", b"live"])
        check.equal("read_uncommitted", seen(uncommitted),
                    [b"c1", b"c2", b"a1", b"zombie", b"live"])


def test_producer_performance_with_a_transactional_id(target):
    topic = unique("java-txn-perf")
    kp_create_topic(target.bootstrap, topic)
    result = kafka_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", "20",
                        "--record-size", "10", "--throughput", "-1", "--transactional-id",
                        unique("perf-txn"), "--transaction-duration-ms", "100",
                        "--producer-props", f"bootstrap.servers={target.bootstrap}",
                        "max.block.ms=30000", check=False)
    assert result.returncode == 0, result.describe()
    assert "20 records sent" in result.stdout, result.describe()


def tool_rows(bootstrap: str, *args: str) -> list[list[str]]:
    """A kafka-transactions table: the header, then one row per line, split on whitespace."""
    result = kafka_tool("kafka-transactions", "--bootstrap-server", bootstrap, *args)
    return [line.split() for line in result.lines if line.strip()]


def test_kafka_transactions_tool_lists_and_describes(target):
    from confluent_kafka import Producer

    topic = unique("java-txn-tool")
    kp_create_topic(target.bootstrap, topic)
    transactional_id = unique("tool-txn")
    producer = Producer({"bootstrap.servers": target.bootstrap,
                         "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(60)
    listed = tool_rows(target.bootstrap, "list")
    described = tool_rows(target.bootstrap, "describe", "--transactional-id", transactional_id)
    producer.commit_transaction(60)
    after = tool_rows(target.bootstrap, "describe", "--transactional-id", transactional_id)
    mine = [row for row in listed[1:] if row[0] == transactional_id]
    with Checks() as check:
        check.equal("list header", listed[0],
                    ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"])
        check.equal("list: the open transaction", [row[3] for row in mine], ["Ongoing"])
        check.equal("describe header", described[0], DESCRIBE_HEADER)
        row = dict(zip(described[0], described[1], strict=False))
        check.equal("describe: id, state, timeout, partitions",
                    [row.get("TransactionalId"), row.get("TransactionState"),
                     row.get("TransactionTimeoutMs"), row.get("TopicPartitions")],
                    [transactional_id, "Ongoing", "60000", f"{topic}-0"])
        check.equal("describe after the commit: state",
                    dict(zip(after[0], after[1], strict=False)).get("TransactionState"),
                    "CompleteCommit")


DESCRIBE_HEADER = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                   "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                   "TransactionDurationMs", "TopicPartitions"]
