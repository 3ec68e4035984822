"""One committed and one aborted transaction in a fresh topic, and what each isolation level
must read of it through a Spark source."""

from __future__ import annotations

from e2e.support import kp_create_topic, unique
from e2e.test_transactions import ABORTED, COMMITTED, PLAIN, UNVERIFIED, Scenario

# The transactions are written by hand, with no coordinator to verify their partitions
# with: a module using them runs its broker with these settings (BROKER_OVERRIDES).
BROKER_SETTINGS = UNVERIFIED

EXPECTED = {"read_committed": [PLAIN[0], *COMMITTED, PLAIN[1]],
            "read_uncommitted": [PLAIN[0], *COMMITTED, *ABORTED, PLAIN[1]]}


def finished_transactions(bootstrap: str) -> str:
    topic = unique("spark-txn")
    kp_create_topic(bootstrap, topic)
    scenario = Scenario(bootstrap, topic)
    scenario.produce_all()
    scenario.end(scenario.p1, commit=True)
    scenario.end(scenario.p2, commit=False)
    scenario.conn.close()
    return topic


def assert_isolation_levels(spark, fmt: str, bootstrap: str) -> None:  # noqa: ANN001
    topic = finished_transactions(bootstrap)
    for isolation, want in EXPECTED.items():
        df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("kafka.isolation.level", isolation).load())
        got = [bytes(row.value) for row in df.orderBy("offset").collect()]
        assert got == want, f"{fmt} with {isolation}"
