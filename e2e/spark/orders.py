"""Orders for spark/jobs/windowed_counts.py and the counts it must write: two runs over one
checkpoint, with a watermark that drops a late order in the second (e2e/spark/test_jobs.py on
local[2], e2e/kube/test_spark_on_kubernetes.py on Kubernetes)."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from e2e.support import Rec, kp_consume_all

# The records carry timestamps of fixed past days: retention must not delete them.
KEEP = {"retention.ms": "-1"}


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def order(ts: str, store: str, amount: str) -> Rec:
    value = json.dumps({"store": store, "amount": float(amount), "ts": f"2026-01-01T{ts}Z"})
    return Rec(0, store.encode(), value.encode(), (), ms(f"2026-01-01T{ts}Z"))


# Two runs of the job over the same checkpoint. After the first, the watermark is the latest
# event time minus 30 s: 10:03:20 - 30 s = 10:02:50, so the windows of 10:00 and 10:01 close.
FIRST_RUN = [order("10:00:05", "s1", "10.00"), order("10:00:40", "s2", "5.25"),
             order("10:00:59", "s1", "2.50"), order("10:01:10", "s1", "1.00"),
             order("10:01:30", "s2", "7.75"), order("10:02:20", "s1", "3.00"),
             order("10:03:20", "s2", "4.00"),
             # Out of order, but within the first run's batch: counted.
             order("10:00:30", "s2", "1.00")]
# In the second: 10:01:30 is older than the watermark (dropped), 10:02:55 is not; the
# watermark moves to 10:05:40 - 30 s = 10:05:10, closing the windows up to 10:04.
SECOND_RUN = [order("10:01:30", "s1", "100.00"), order("10:02:55", "s2", "6.00"),
              order("10:04:10", "s1", "8.00"), order("10:05:40", "s2", "9.00")]
# (store, window start, orders, amount); 10:05's window stays open.
EXPECTED = [("s1", "10:00", 2, "12.50"), ("s1", "10:01", 1, "1.00"), ("s1", "10:02", 1, "3.00"),
            ("s1", "10:04", 1, "8.00"), ("s2", "10:00", 2, "6.25"), ("s2", "10:01", 1, "7.75"),
            ("s2", "10:02", 1, "6.00"), ("s2", "10:03", 1, "4.00")]


def window_rows(bootstrap: str, topic: str) -> list[tuple[str, str, int, Decimal]]:
    rows = []
    for rec in kp_consume_all(bootstrap, topic, isolation_level="read_committed"):
        value = json.loads(rec.value, parse_float=Decimal)
        start = datetime.fromisoformat(value["window_start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(value["window_end"].replace("Z", "+00:00"))
        assert (end - start).total_seconds() == 60 and rec.key == value["store"].encode()
        rows.append((value["store"], start.strftime("%H:%M"), value["orders"],
                     value["amount"]))
    return sorted(rows)


def expected_rows() -> list[tuple[str, str, int, Decimal]]:
    """EXPECTED as window_rows gives it."""
    return [(store, start, n, Decimal(amount)) for store, start, n, amount in EXPECTED]
