"""SCRAM users managed with Apache Kafka's kafka-configs, against Moldau and against Kafka:
the same commands print the same outcome, errors included."""

from __future__ import annotations

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Target
from e2e.kafka_dist import ToolResult, kafka_tool
from e2e.support import unique

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS


def users(target: Target, *args: str) -> ToolResult:
    return kafka_tool("kafka-configs", "--bootstrap-server", target.bootstrap,
                      "--entity-type", "users", *args, check=False)


def credential_configs(stdout: str, user: str) -> set[str]:
    """The mechanisms kafka-configs lists for one user. Their order is not part of the
    outcome: Kafka's broker lists them from a hash map keyed by mechanism, whose order changes
    from one JVM start to the next."""
    prefix = f"SCRAM credential configs for user-principal '{user}' are "
    line = stdout.strip()
    assert line.startswith(prefix), line
    return set(line[len(prefix):].split(", "))


def test_add_describe_and_delete_scram_credentials(target: Target) -> None:
    alice = unique("alice")
    for config in ("SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
                   "SCRAM-SHA-256=[password=other-secret]"):
        added = users(target, "--alter", "--entity-name", alice, "--add-config", config)
        assert (added.returncode, added.stdout.strip()) == (
            0, f"Completed updating config for user {alice}."), added.describe()
    described = users(target, "--describe", "--entity-name", alice)
    assert described.returncode == 0, described.describe()
    assert credential_configs(described.stdout, alice) == {
        "SCRAM-SHA-256=iterations=4096", "SCRAM-SHA-512=iterations=8192"}, described.describe()
    deleted = users(target, "--alter", "--entity-name", alice, "--delete-config",
                    "SCRAM-SHA-256")
    assert deleted.returncode == 0, deleted.describe()
    described = users(target, "--describe", "--entity-name", alice)
    assert described.stdout.strip() == (
        f"SCRAM credential configs for user-principal '{alice}' are "
        "SCRAM-SHA-512=iterations=8192"), described.describe()


@pytest.mark.parametrize(("args", "expected"), [
    (["--add-config", "SCRAM-SHA-512=[iterations=1024,password=pw]"],
     "Iterations 1024 is less than the minimum 4096 required for SCRAM-SHA-512"),
    (["--add-config", "SCRAM-SHA-512=[password=a],SCRAM-SHA-256=[password=b]"],
     "DuplicateResourceException: A user credential cannot be altered twice in the same "
     "request"),
    (["--delete-config", "SCRAM-SHA-256"], "Attempt to delete a user credential that does "
                                           "not exist"),
])
def test_refused_changes_say_why(target: Target, args: list[str], expected: str) -> None:
    result = users(target, "--alter", "--entity-name", unique("bob"), *args)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr, result.describe()
