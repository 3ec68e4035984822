"""`kafka-transactions.sh describe-producers`, Kafka's own tool, against Moldau and against
Apache Kafka: the same table for the same producer state (producer ids and timestamps aside).

The state comes from raw transactional Produce and WriteTxnMarkers (as in
test_java_transactions.py), so both brokers see the same bytes.
"""

from __future__ import annotations

import pytest

from e2e.java.oracle import (
    BROKER_SETTINGS,
    Checks,
    Target,
    table,
    without_transaction_verification,
)
from e2e.kafka_dist import kafka_tool
from e2e.support import kp_create_topic, unique
from e2e.test_transactions import Scenario

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS

HEADER = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
          "LastTimestamp", "CurrentTransactionStartOffset"]


def describe_producers(target: Target, topic: str, *options: str) -> list[list[str]]:
    result = kafka_tool("kafka-transactions", "--bootstrap-server", target.bootstrap,
                        "describe-producers", "--topic", topic, "--partition", "0", *options)
    assert result.returncode == 0, result.describe()
    return table(result.stdout.splitlines())


def named(rows: list[list[str]], names: dict[int, str]) -> list[list[str]]:
    """Rows with producer ids by name and timestamps checked and blanked (both vary)."""
    out = []
    for producer_id, epoch, coordinator_epoch, sequence, timestamp, start in rows:
        assert int(timestamp) > 0
        out.append([names.get(int(producer_id), producer_id), epoch, coordinator_epoch,
                    sequence, "<ts>", start])
    return sorted(out)


def test_describe_producers_matches_kafka(target):
    without_transaction_verification(target)
    topic = unique("java-dp")
    kp_create_topic(target.bootstrap, topic)
    empty = describe_producers(target, topic)
    run = Scenario(target.bootstrap, topic)
    run.produce_all()
    names = {run.p1: "P1", run.p2: "P2"}
    both_open = describe_producers(target, topic)
    run.end(run.p1, commit=True, coordinator_epoch=5)
    one_open = describe_producers(target, topic)
    on_replica = describe_producers(target, topic, "--broker-id", "1")
    run.conn.close()

    with Checks() as check:
        check.equal("no producer yet", empty, [HEADER])
        check.equal("two open transactions (header)", both_open[0], HEADER)
        check.equal("two open transactions", named(both_open[1:], names),
                    [["P1", "0", "-1", "1", "<ts>", "1"], ["P2", "0", "-1", "2", "<ts>", "3"]])
        check.equal("P1 committed by coordinator epoch 5", named(one_open[1:], names),
                    [["P1", "0", "5", "1", "<ts>", "None"], ["P2", "0", "-1", "2", "<ts>", "3"]])
        check.equal("asking broker 1 by id", on_replica, one_open)
