"""Helpers shared by the Java oracle tests: the broker under test, the Java client driver,
and the normalisation of tool output that legitimately differs between brokers."""

from __future__ import annotations

import base64
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from e2e.kafka_dist import DRIVER_MAIN, kafka_tool, run_java
from e2e.support import Rec, unique

# Settings both brokers run with (Kafka's defaults otherwise). A test module passes these to
# Moldau's module_broker fixture as BROKER_OVERRIDES; the Kafka launcher gets them too.
BROKER_SETTINGS: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}


@dataclass
class Target:
    """A running broker of either kind, as the tests see it."""

    kind: str  # "moldau" or "kafka"
    bootstrap: str
    log_dir: Path


def without_transaction_verification(target: Target) -> None:
    """Transactions driven by hand have no coordinator to verify their partitions with
    (KIP-890): neither broker may ask one. The same dynamic cluster-wide setting on both."""
    kafka_tool("kafka-configs", "--bootstrap-server", target.bootstrap,
               "--entity-type", "brokers", "--entity-default", "--alter",
               "--add-config", "transaction.partition.verification.enable=false")


# --------------------------------------------------------------------------- client driver


def rec_to_json(rec: Rec) -> dict:
    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    return {"partition": rec.partition, "key": b64(rec.key), "value": b64(rec.value),
            "headers": [[name, b64(value)] for name, value in rec.headers],
            "timestamp": rec.timestamp}


def rec_from_json(data: dict) -> Rec:
    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    assert data["timestamp_type"] == "CreateTime", data["timestamp_type"]
    return Rec(data["partition"], raw(data["key"]), raw(data["value"]),
               tuple((name, raw(value)) for name, value in data["headers"]),
               data["timestamp"], data["offset"])


def run_driver(bootstrap: str, steps: list[dict], workdir: Path, timeout: float = 180
               ) -> list[dict]:
    """Run the Java client driver on `steps` in one JVM; return one result per step."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / f"{unique('driver')}.json"
    spec.write_text(json.dumps({"bootstrap": bootstrap, "steps": steps}))
    result = run_java(DRIVER_MAIN, str(spec), timeout=timeout)
    return json.loads(result.lines[-1])["results"]


# --------------------------------------------------------------------------- normalisation

TOPIC_ID = re.compile(r"TopicId: [A-Za-z0-9_-]{22}")


def normalise_topic_ids(text: str) -> str:
    """Topic ids are random on every broker."""
    return TOPIC_ID.sub("TopicId: <id>", text)


def table(lines: list[str]) -> list[list[str]]:
    """Rows of a whitespace-aligned table (the consumer-group tool's output), header first."""
    return [line.split() for line in lines if line.strip()]


class Checks:
    """Soft assertions for a scenario of several tool runs: every mismatch is collected and
    reported together at the end, so one difference does not hide what the later steps do."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def __enter__(self) -> Checks:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.done()

    def equal(self, what: str, actual: object, expected: object) -> None:
        if actual == expected:
            return
        if isinstance(actual, list) and isinstance(expected, list):
            diff = difflib.unified_diff([str(x) for x in expected], [str(x) for x in actual],
                                        "expected", "actual", lineterm="", n=1)
            self.failures.append(f"{what}:\n" + "\n".join(diff))
        else:
            self.failures.append(f"{what}:\n  got:  {actual!r}\n  want: {expected!r}")

    def true(self, what: str, condition: object, detail: str = "") -> None:
        if not condition:
            self.failures.append(f"{what}" + (f": {detail}" if detail else ""))

    def done(self) -> None:
        assert not self.failures, f"{len(self.failures)} mismatch(es):\n" + "\n\n".join(
            self.failures)
