"""kafka-metadata-quorum, Apache Kafka's own tool, against Moldau and against Kafka: both are
single nodes that are the only voter of their controller quorum."""

from __future__ import annotations

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks, Target
from e2e.kafka_dist import kafka_tool

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS


def quorum(target: Target, *args: str) -> list[str]:
    result = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", target.bootstrap,
                        "describe", *args)
    return result.stdout.splitlines()


def test_describe_status_and_replication(target):
    status = dict(line.split(":", 1) for line in quorum(target, "--status") if ":" in line)
    fields = {key.strip(): value.strip() for key, value in status.items()}
    replication = [line.split() for line in quorum(target, "--replication")]
    with Checks() as check:
        check.equal("status fields", sorted(fields), sorted([
            "ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
            "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]))
        check.equal("the leader", fields.get("LeaderId"), "1")
        check.true("a leader epoch", int(fields.get("LeaderEpoch", "0")) >= 1)
        check.true("a high watermark", int(fields.get("HighWatermark", "-1")) > 0)
        check.true("node 1 votes", '"id": 1' in fields.get("CurrentVoters", ""))
        check.equal("no observers", fields.get("CurrentObservers"), "[]")
        check.equal("lag", fields.get("MaxFollowerLag"), "0")
        check.equal("replication header", replication[0][:3],
                    ["NodeId", "DirectoryId", "LogEndOffset"])
        check.equal("one replica row, the leader", [(row[0], row[-1]) for row in replication[1:]],
                    [("1", "Leader")])
