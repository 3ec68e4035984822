"""Dynamic broker configs with Apache Kafka's kafka-configs, against Moldau and against Kafka:
the cluster-wide default and one broker's own settings are set, described (with their
sources and synonyms), seen by a topic without overrides, refused with Kafka's errors when
they cannot change without a restart, and deleted again."""

from __future__ import annotations

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks, Target
from e2e.kafka_dist import ToolResult, kafka_tool
from e2e.support import kp_create_topic, unique

pytestmark = pytest.mark.timeout(300)
BROKER_OVERRIDES = BROKER_SETTINGS

DEFAULT = ["--entity-type", "brokers", "--entity-default"]
BROKER_1 = ["--entity-type", "brokers", "--entity-name", "1"]
DEFAULT_DONE = ["Completed updating default config for brokers in the cluster."]
INVALID_REQUEST = "Caused by: org.apache.kafka.common.errors.InvalidRequestException: "


def configs(target: Target, *args: str, check: bool = True) -> ToolResult:
    return kafka_tool("kafka-configs", "--bootstrap-server", target.bootstrap, *args,
                      check=check)


def caused_by(result: ToolResult) -> str:
    causes = [line for line in (result.stdout + result.stderr).splitlines()
              if line.startswith("Caused by: ")]
    return causes[-1] if causes else result.describe()


def test_cluster_default_and_broker_configs(target):
    topic = unique("java-dyn")
    kp_create_topic(target.bootstrap, topic)
    try:
        with Checks() as check:
            check.equal("--describe of the empty cluster default",
                        configs(target, "--describe", *DEFAULT).lines,
                        ["Default configs for brokers in the cluster are:"])
            added = configs(target, "--alter", *DEFAULT, "--add-config",
                            "log.retention.ms=3600000,log.segment.bytes=2097152")
            check.equal("--alter --entity-default output", added.lines, DEFAULT_DONE)
            check.equal("--describe --entity-default", configs(
                target, "--describe", *DEFAULT).lines, [
                "Default configs for brokers in the cluster are:",
                "  log.retention.ms=3600000 sensitive=false synonyms={"
                "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000}",
                "  log.segment.bytes=2097152 sensitive=false synonyms={"
                "DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=2097152}"])
            # Only the broker's own dynamic settings are listed for it.
            check.equal("--describe of broker 1 with only a cluster default",
                        configs(target, "--describe", *BROKER_1).lines,
                        ["Dynamic configs for broker 1 are:"])

            added = configs(target, "--alter", *BROKER_1, "--add-config",
                            "log.retention.ms=7200000")
            check.equal("--alter of broker 1 output", added.lines,
                        ["Completed updating config for broker 1."])
            check.equal("--describe of broker 1", configs(
                target, "--describe", *BROKER_1).lines, [
                "Dynamic configs for broker 1 are:",
                "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
                "log.retention.ms=7200000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms="
                "3600000, DEFAULT_CONFIG:log.retention.hours=168}"])

            described = configs(target, "--describe", "--all", "--entity-type", "topics",
                                "--entity-name", topic).lines
            check.equal("the topic's inherited retention and segment size", [
                line for line in described
                if line.startswith(("  retention.ms=", "  segment.bytes="))], [
                "  retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
                "log.retention.ms=7200000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms="
                "3600000, DEFAULT_CONFIG:log.retention.hours=168}",
                "  segment.bytes=2097152 sensitive=false synonyms={"
                "DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=2097152, DEFAULT_CONFIG:"
                "log.segment.bytes=1073741824}"])
    finally:
        configs(target, "--alter", *BROKER_1, "--delete-config", "log.retention.ms")
        configs(target, "--alter", *DEFAULT, "--delete-config",
                "log.retention.ms,log.segment.bytes")
    with Checks() as check:
        check.equal("--describe --entity-default after --delete-config",
                    configs(target, "--describe", *DEFAULT).lines,
                    ["Default configs for brokers in the cluster are:"])
        check.equal("--describe of broker 1 after --delete-config",
                    configs(target, "--describe", *BROKER_1).lines,
                    ["Dynamic configs for broker 1 are:"])


@pytest.mark.parametrize(("setting", "cause"), [
    ("log.dirs=/tmp/elsewhere", "Cannot update these configs dynamically: Set(log.dirs)"),
    ("log.retention.ms=abc",
     "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
    ("log.segment.bytes=10",
     "Invalid value 10 for configuration log.segment.bytes: Value must be at least 1048576"),
])
def test_refused_broker_configs(target, setting, cause):
    refused = configs(target, "--alter", *DEFAULT, "--add-config", setting, check=False)
    with Checks() as check:
        check.equal("exit code", refused.returncode, 1)
        check.equal("cause", caused_by(refused), INVALID_REQUEST + cause)
        check.equal("the cluster default after the refused change",
                    configs(target, "--describe", *DEFAULT).lines,
                    ["Default configs for brokers in the cluster are:"])
