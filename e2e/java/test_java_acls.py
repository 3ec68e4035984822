"""ACLs managed with Apache Kafka's kafka-acls, against Moldau and against Kafka: the same
commands print the same outcome. Listings are compared as sets of resources and entries,
because brokers answer DescribeAcls in no particular order (Kafka's from hash maps)."""

from __future__ import annotations

import re

import pytest

from e2e.java.acl_bed import ADMIN, USERS, AclBed
from e2e.kafka_dist import ToolResult, kafka_tool
from e2e.support import unique

pytestmark = pytest.mark.timeout(300)

_RESOURCE = re.compile(r"^(?:Current ACLs|Adding ACLs) for resource `(.*)`:\s*$")


@pytest.fixture(scope="module")
def bed(acls_target: AclBed) -> AclBed:
    return acls_target


def acls(bed: AclBed, *args: str, user: str = ADMIN) -> ToolResult:
    return kafka_tool("kafka-acls", "--bootstrap-server", bed.bootstrap, "--command-config",
                      str(bed.command_config(user)), *args, check=False)


def blocks(stdout: str) -> dict[str, set[str]]:
    """What kafka-acls printed: each resource pattern with its entries."""
    found: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in stdout.splitlines():
        header = _RESOURCE.match(line)
        if header:
            current = found.setdefault(header.group(1), set())
        elif line.strip().startswith("(principal=") and current is not None:
            current.add(line.strip())
    return found


def pattern(kind: str, name: str, pattern_type: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern_type})"


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (f"(principal={principal}, host={host}, operation={operation}, "
            f"permissionType={permission})")


def test_add_list_and_remove(bed: AclBed) -> None:
    topic, prefix, group = unique("orders"), unique("pay"), unique("billing")
    alice, bob = f"User:{unique('alice')}", f"User:{unique('bob')}"
    added = acls(bed, "--add", "--allow-principal", alice, "--operation", "Read",
                 "--operation", "Describe", "--topic", topic)
    assert added.returncode == 0, added.describe()
    assert blocks(added.stdout) == {pattern("TOPIC", topic): {
        entry(alice, "READ"), entry(alice, "DESCRIBE")}}, added.describe()
    assert acls(bed, "--add", "--allow-principal", bob, "--allow-host", "10.0.0.1",
                "--operation", "Write", "--topic", prefix, "--resource-pattern-type",
                "prefixed").returncode == 0
    assert acls(bed, "--add", "--deny-principal", bob, "--operation", "All", "--group",
                group).returncode == 0

    listed = acls(bed, "--list", "--topic", topic)
    assert listed.returncode == 0, listed.describe()
    assert blocks(listed.stdout) == {pattern("TOPIC", topic): {
        entry(alice, "READ"), entry(alice, "DESCRIBE")}}, listed.describe()
    by_principal = acls(bed, "--list", "--principal", bob)
    assert f"ACLs for principal `{bob}`" in by_principal.stdout, by_principal.describe()
    assert blocks(by_principal.stdout) == {
        pattern("TOPIC", prefix, "PREFIXED"): {entry(bob, "WRITE", host="10.0.0.1")},
        pattern("GROUP", group): {entry(bob, "ALL", "DENY")}}, by_principal.describe()
    # MATCH: the ACLs that apply to one topic name, prefixed ones included.
    matching = acls(bed, "--list", "--topic", prefix + "-eu", "--resource-pattern-type",
                    "match")
    assert blocks(matching.stdout) == {
        pattern("TOPIC", prefix, "PREFIXED"): {entry(bob, "WRITE", host="10.0.0.1")}
    }, matching.describe()
    everything = blocks(acls(bed, "--list").stdout)
    assert {pattern("TOPIC", topic), pattern("TOPIC", prefix, "PREFIXED"),
            pattern("GROUP", group)} <= set(everything)

    removed = acls(bed, "--remove", "--force", "--allow-principal", alice, "--operation", "Read",
                   "--topic", topic)
    assert removed.returncode == 0, removed.describe()
    assert blocks(acls(bed, "--list", "--topic", topic).stdout) == {
        pattern("TOPIC", topic): {entry(alice, "DESCRIBE")}}
    assert acls(bed, "--remove", "--force", "--topic", prefix, "--resource-pattern-type",
                "prefixed").returncode == 0
    assert blocks(acls(bed, "--list", "--principal", bob).stdout) == {
        pattern("GROUP", group): {entry(bob, "ALL", "DENY")}}
    nothing = acls(bed, "--list", "--topic", unique("nothing-here"))
    assert (nothing.returncode, nothing.stdout.strip()) == (0, ""), nothing.describe()


def test_producer_and_consumer_shortcuts(bed: AclBed) -> None:
    topic, group, txn = unique("t"), unique("cg"), unique("tx")
    carol = f"User:{unique('carol')}"
    producer = acls(bed, "--add", "--producer", "--allow-principal", carol, "--topic", topic,
                    "--transactional-id", txn)
    assert producer.returncode == 0, producer.describe()
    consumer = acls(bed, "--add", "--consumer", "--allow-principal", carol, "--topic", topic,
                    "--group", group)
    assert consumer.returncode == 0, consumer.describe()
    listed = blocks(acls(bed, "--list", "--principal", carol).stdout)
    assert listed == {
        pattern("TRANSACTIONAL_ID", txn): {entry(carol, "WRITE"), entry(carol, "DESCRIBE")},
        pattern("TOPIC", topic): {entry(carol, op) for op in ("CREATE", "WRITE", "DESCRIBE",
                                                               "READ")},
        pattern("GROUP", group): {entry(carol, "READ")}}


def test_cluster_and_wildcard_resources(bed: AclBed) -> None:
    dave = f"User:{unique('dave')}"
    for args in (["--operation", "Describe", "--cluster"], ["--operation", "Read", "--topic", "*"],
                 ["--operation", "Describe", "--transactional-id", "*"]):
        result = acls(bed, "--add", "--allow-principal", dave, *args)
        assert result.returncode == 0, result.describe()
    assert blocks(acls(bed, "--list", "--principal", dave).stdout) == {
        pattern("CLUSTER", "kafka-cluster"): {entry(dave, "DESCRIBE")},
        pattern("TOPIC", "*"): {entry(dave, "READ")},
        pattern("TRANSACTIONAL_ID", "*"): {entry(dave, "DESCRIBE")}}
    assert acls(bed, "--remove", "--force", "--allow-principal", dave, "--operation",
                "Describe", "--cluster").returncode == 0
    assert blocks(acls(bed, "--list", "--principal", dave).stdout) == {
        pattern("TOPIC", "*"): {entry(dave, "READ")},
        pattern("TRANSACTIONAL_ID", "*"): {entry(dave, "DESCRIBE")}}


@pytest.mark.parametrize(("args", "operation"), [
    (["--list"], "DESCRIBE"),
    (["--add", "--allow-principal", "User:x", "--operation", "Read", "--topic", "q"], "ALTER"),
    (["--remove", "--force", "--topic", "q"], "ALTER"),
])
def test_a_user_without_rights_on_the_cluster_is_refused(bed: AclBed, args: list[str],
                                                          operation: str) -> None:
    result = acls(bed, *args, user=USERS[-1])
    assert result.returncode == 1, result.describe()
    output = result.stdout + result.stderr
    assert "ClusterAuthorizationException" in output, result.describe()
    assert f"needs {operation} permission." in output, result.describe()
