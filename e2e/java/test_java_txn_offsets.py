"""Offsets committed in transactions, against Moldau and against Apache Kafka: the same raw
requests (InitProducerId, TxnOffsetCommit, WriteTxnMarkers into the group's
`__consumer_offsets` partition) must get the same answers, and Kafka's own tools must show
the same offsets and producer state.
"""

from __future__ import annotations

import pytest

from e2e import txn_wire, wire
from e2e.java.oracle import (
    BROKER_SETTINGS,
    Checks,
    Target,
    table,
    without_transaction_verification,
)
from e2e.kafka_dist import kafka_tool
from e2e.support import kp_create_topic, unique
from e2e.test_txn_offsets import Txn
from e2e.txn_wire import TxnCommit

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS


def current_offset(target: Target, group: str, topic: str) -> str:
    """CURRENT-OFFSET of the partition as `kafka-consumer-groups.sh --describe` shows it."""
    result = kafka_tool("kafka-consumer-groups", "--bootstrap-server", target.bootstrap,
                        "--describe", "--group", group, check=False)
    rows = table(result.stdout.splitlines())
    header = next((row for row in rows if "CURRENT-OFFSET" in row), None)
    assert header is not None, result.describe()
    for row in rows:
        if topic in row:
            return row[header.index("CURRENT-OFFSET")]
    return "(no row)"


def open_transactions(txn: Txn) -> list[tuple[int, int]]:
    """(epoch, transaction start) of the producers of the group's offsets partition."""
    error, producers = txn_wire.describe_producers(txn.conn, 11, "__consumer_offsets",
                                                   txn.offsets_partition)
    assert error == wire.NONE
    return sorted((p.epoch, p.txn_start_offset) for p in producers)


def test_transactional_offsets_match_kafka(target):
    without_transaction_verification(target)
    topic = unique("java-txn-offsets")
    kp_create_topic(target.bootstrap, topic)
    txn = Txn(target.bootstrap, topic, unique("java-txn-group"))
    first, second, third = txn.producer(), txn.producer(), txn.producer()
    seen: dict[str, object] = {}

    seen["first commit"] = txn.commit_offsets(first, 5)
    seen["first marker"] = txn.end(first, commit=True)
    seen["second commit (v0)"] = txn.commit_offsets(second, 9, version=0)
    seen["pending: fetch"] = txn.fetch(require_stable=False)
    seen["pending: fetch stable"] = txn.fetch(require_stable=True)
    seen["pending: fetch all, stable"] = txn_wire.offset_fetch(txn.conn, 14, txn.group, None,
                                                              require_stable=True)
    seen["pending: tool"] = current_offset(target, txn.group, topic)
    seen["pending: producers"] = open_transactions(txn)
    seen["second abort"] = txn.end(second, commit=False)
    seen["aborted: fetch stable"] = txn.fetch(require_stable=True)
    seen["third commit"] = txn.commit_offsets(third, 12)
    seen["third marker"] = txn.end(third, commit=True)
    seen["committed: fetch stable"] = txn.fetch(require_stable=True)
    seen["committed: tool"] = current_offset(target, txn.group, topic)
    seen["committed: producers"] = open_transactions(txn)
    seen["older epoch"] = (txn.commit_offsets(third, 13, epoch=1),
                           txn.commit_offsets(third, 14, epoch=0))
    seen["unknown topic"] = txn_wire.txn_offset_commit(txn.conn, 12, TxnCommit(
        "txn-id", txn.group, first, 0, {("no-such-topic-here", 0): 1}))
    seen["member of a group that does not exist"] = txn_wire.txn_offset_commit(
        txn.conn, 13, TxnCommit("txn-id", unique("java-no-group"), first, 0,
                                {(topic, 0): 1}, generation=2, member_id="m"))
    txn.conn.close()

    with Checks() as check:
        check.equal("answers", seen, {
            "first commit": wire.NONE, "first marker": wire.NONE,
            "second commit (v0)": wire.NONE,
            "pending: fetch": (5, wire.NONE),
            "pending: fetch stable": (-1, txn_wire.UNSTABLE_OFFSET_COMMIT),
            "pending: fetch all, stable":
                (wire.NONE, {(topic, 0): (-1, txn_wire.UNSTABLE_OFFSET_COMMIT, "")}),
            "pending: tool": "5",
            "pending: producers": [(0, -1), (0, 2)],
            "second abort": wire.NONE,
            "aborted: fetch stable": (5, wire.NONE),
            "third commit": wire.NONE, "third marker": wire.NONE,
            "committed: fetch stable": (12, wire.NONE),
            "committed: tool": "12",
            "committed: producers": [(0, -1), (0, -1), (0, -1)],
            "older epoch": (wire.NONE, txn_wire.INVALID_PRODUCER_EPOCH),
            "unknown topic": {("no-such-topic-here", 0): wire.UNKNOWN_TOPIC_OR_PARTITION},
            "member of a group that does not exist":
                {(topic, 0): txn_wire.ILLEGAL_GENERATION},
        })
