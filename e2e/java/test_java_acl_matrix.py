"""Every API against the ACL it needs, on Moldau and on Apache Kafka with the same outcome.

Each case is one user with no ACLs: its request is refused with Kafka's authorization error;
then the super user grants what the API needs, one ACL at a time where several are needed, and
after each grant the same request gets the next expected outcome, the last one an answer that
is no longer an authorization error. Requests are sent with kafka-python's protocol classes
over its own SASL connection, so every error code is read from the wire. Grants take effect
as the broker learns them from the metadata log (at once on Moldau, moments later on Kafka), so
each step polls until its outcome shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.java.acl_bed import ADMIN, USERS, AclBed
from e2e.java.acl_wire import (
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_AUTH,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ELECTION_NOT_NEEDED,
    GROUP,
    GROUP_AUTH,
    IDEMPOTENT_WRITE,
    LITERAL,
    NONE,
    READ,
    TOPIC,
    TOPIC_AUTH,
    TXN,
    TXN_AUTH,
    WRITE,
    Check,
    Grant,
    Names,
    Session,
    add_offsets,
    add_partitions,
    alter_configs,
    alter_reassignments_request,
    alter_scram_request,
    cluster_request,
    coordinators,
    create_acls_request,
    create_partitions,
    create_topic,
    create_topics,
    delete_acls_request,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls_request,
    describe_configs,
    describe_groups,
    describe_log_dirs_request,
    describe_producers,
    describe_quorum_request,
    describe_quotas_request,
    describe_scram_request,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders_request,
    election_error,
    end_txn,
    fetch,
    find_coordinator,
    group_joined,
    group_listed,
    group_with_offsets,
    heartbeat,
    in_transaction,
    init_producer_id,
    join_group,
    leave_group,
    list_offsets,
    list_reassignments_request,
    listed_topics,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    offsets_in_transaction,
    partitions_in_transaction,
    produce,
    sync_group,
    top_level,
    transaction_listed,
    transactional_produce,
    txn_offset_commit,
    with_coordinators,
    with_topic,
    write_txn_markers,
)
from e2e.support import unique, wait_until

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def bed(acls_target: AclBed) -> AclBed:
    return acls_target


@dataclass
class Case:
    name: str
    check: Check
    # The outcome with no ACL, then after each grant (a set: any of these outcomes).
    steps: list[tuple[list[Grant], int | set[int]]]
    setup: Callable[[Session, Names], None] | None = None


CASES = [
    Case("Produce", produce, [([], TOPIC_AUTH), ([(TOPIC, WRITE)], NONE)], with_topic),
    Case("Fetch", fetch, [([], TOPIC_AUTH), ([(TOPIC, READ)], NONE)], with_topic),
    Case("ListOffsets", list_offsets, [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], NONE)],
         with_topic),
    Case("Metadata", metadata, [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], NONE)], with_topic),
    Case("Metadata auto-creation", lambda s, n: metadata(s, n, create=True),
         [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], TOPIC_AUTH),
          ([(TOPIC, CREATE)], {NONE, 5})]),  # 5: LEADER_NOT_AVAILABLE while it is created
    Case("OffsetCommit", offset_commit, [([], GROUP_AUTH), ([(GROUP, READ)], TOPIC_AUTH),
                                         ([(TOPIC, READ)], NONE)], with_coordinators),
    Case("OffsetFetch", offset_fetch, [([], GROUP_AUTH), ([(GROUP, DESCRIBE)], TOPIC_AUTH),
                                       ([(TOPIC, DESCRIBE)], NONE)], group_with_offsets),
    Case("FindCoordinator (group)", find_coordinator(0),
         [([], GROUP_AUTH), ([(GROUP, DESCRIBE)], NONE)], coordinators),
    Case("FindCoordinator (transaction)", find_coordinator(1),
         [([], TXN_AUTH), ([(TXN, DESCRIBE)], NONE)], coordinators),
    Case("JoinGroup and SyncGroup", join_group, [([], GROUP_AUTH), ([(GROUP, READ)], NONE)],
         coordinators),
    Case("SyncGroup", sync_group, [([], GROUP_AUTH), ([(GROUP, READ)], {25, 16, 69})],
         coordinators),
    Case("Heartbeat", heartbeat, [([], GROUP_AUTH), ([(GROUP, READ)], NONE)], group_joined),
    Case("LeaveGroup", leave_group, [([], GROUP_AUTH), ([(GROUP, READ)], NONE)], group_joined),
    Case("DescribeGroups", describe_groups, [([], GROUP_AUTH), ([(GROUP, DESCRIBE)], NONE)],
         group_with_offsets),
    Case("ListGroups (by group)", group_listed,
         [([], GROUP_AUTH), ([(GROUP, DESCRIBE)], NONE)], group_with_offsets),
    Case("ListGroups (by cluster)", group_listed,
         [([], GROUP_AUTH), ([(CLUSTER, DESCRIBE)], NONE)], group_with_offsets),
    Case("DeleteGroups", delete_groups, [([], GROUP_AUTH), ([(GROUP, DELETE)], NONE)],
         group_with_offsets),
    Case("OffsetDelete", offset_delete, [([], GROUP_AUTH), ([(GROUP, DELETE)], TOPIC_AUTH),
                                         ([(TOPIC, READ)], NONE)], group_with_offsets),
    Case("CreateTopics", create_topics, [([], TOPIC_AUTH), ([(TOPIC, CREATE)], NONE)]),
    Case("CreateTopics (cluster)", create_topics, [([], TOPIC_AUTH), ([(CLUSTER, CREATE)], NONE)]),
    Case("DeleteTopics", delete_topics, [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], TOPIC_AUTH),
                                         ([(TOPIC, DELETE)], NONE)], with_topic),
    Case("DeleteRecords", delete_records, [([], TOPIC_AUTH), ([(TOPIC, DELETE)], NONE)],
         with_topic),
    Case("CreatePartitions", create_partitions, [([], TOPIC_AUTH), ([(TOPIC, ALTER)], NONE)],
         with_topic),
    Case("DescribeConfigs (topic)", describe_configs(2),
         [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE_CONFIGS)], NONE)], with_topic),
    Case("DescribeConfigs (broker)", describe_configs(4),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE_CONFIGS)], NONE)]),
    Case("AlterConfigs (topic)", alter_configs(2, incremental=False),
         [([], TOPIC_AUTH), ([(TOPIC, ALTER_CONFIGS)], NONE)], with_topic),
    Case("IncrementalAlterConfigs (topic)", alter_configs(2, incremental=True),
         [([], TOPIC_AUTH), ([(TOPIC, ALTER_CONFIGS)], NONE)], with_topic),
    Case("IncrementalAlterConfigs (broker)", alter_configs(4, incremental=True),
         [([], CLUSTER_AUTH)]),
    Case("InitProducerId (idempotent, cluster)", init_producer_id(False),
         [([], CLUSTER_AUTH), ([(CLUSTER, IDEMPOTENT_WRITE)], NONE)]),
    Case("InitProducerId (idempotent, a topic)", init_producer_id(False),
         [([], CLUSTER_AUTH), ([(TOPIC, WRITE)], NONE)]),
    Case("InitProducerId (transactional)", init_producer_id(True),
         [([], TXN_AUTH), ([(TXN, WRITE)], NONE)], coordinators),
    Case("AddPartitionsToTxn", add_partitions, [([], TXN_AUTH), ([(TXN, WRITE)], TOPIC_AUTH),
                                                ([(TOPIC, WRITE)], NONE)], in_transaction),
    Case("AddOffsetsToTxn", add_offsets, [([], TXN_AUTH), ([(TXN, WRITE)], GROUP_AUTH),
                                          ([(GROUP, READ)], NONE)], in_transaction),
    Case("TxnOffsetCommit", txn_offset_commit,
         [([], TXN_AUTH), ([(TXN, WRITE)], GROUP_AUTH), ([(GROUP, READ)], TOPIC_AUTH),
          ([(TOPIC, READ)], NONE)], offsets_in_transaction),
    Case("Produce (transactional)", transactional_produce,
         [([], TXN_AUTH), ([(TXN, WRITE)], TOPIC_AUTH), ([(TOPIC, WRITE)], NONE)],
         partitions_in_transaction),
    Case("EndTxn", end_txn, [([], TXN_AUTH), ([(TXN, WRITE)], NONE)],
         partitions_in_transaction),
    Case("WriteTxnMarkers", write_txn_markers,
         [([], CLUSTER_AUTH), ([(CLUSTER, CLUSTER_ACTION)], NONE)], partitions_in_transaction),
    Case("OffsetForLeaderEpoch", offset_for_leader_epoch,
         [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], NONE)], with_topic),
    Case("DescribeProducers", describe_producers, [([], TOPIC_AUTH), ([(TOPIC, READ)], NONE)],
         with_topic),
    Case("DescribeTransactions", describe_transactions,
         [([], TXN_AUTH), ([(TXN, DESCRIBE)], NONE)], in_transaction),
    Case("ListTransactions", transaction_listed, [([], TXN_AUTH), ([(TXN, DESCRIBE)], NONE)],
         in_transaction),
    Case("DescribeTopicPartitions", describe_topic_partitions,
         [([], TOPIC_AUTH), ([(TOPIC, DESCRIBE)], NONE)], with_topic),
    Case("DescribeAcls", cluster_request(describe_acls_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE)], NONE)]),
    Case("CreateAcls",
         cluster_request(create_acls_request, lambda a: a.results[0].error_code),
         [([], CLUSTER_AUTH), ([(CLUSTER, ALTER)], NONE)]),
    Case("DeleteAcls",
         cluster_request(delete_acls_request, lambda a: a.filter_results[0].error_code),
         [([], CLUSTER_AUTH), ([(CLUSTER, ALTER)], NONE)]),
    Case("DescribeLogDirs", cluster_request(describe_log_dirs_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE)], NONE)]),
    Case("ElectLeaders", cluster_request(elect_leaders_request, election_error),
         [([], CLUSTER_AUTH), ([(CLUSTER, ALTER)], ELECTION_NOT_NEEDED)], with_topic),
    Case("AlterPartitionReassignments", cluster_request(
        alter_reassignments_request,
        lambda a: a.error_code or a.responses[0].partitions[0].error_code),
        [([], CLUSTER_AUTH), ([(CLUSTER, ALTER)], {NONE, 85})], with_topic),
    Case("ListPartitionReassignments", cluster_request(list_reassignments_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE)], NONE)]),
    Case("DescribeQuorum", cluster_request(describe_quorum_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE)], NONE)]),
    Case("DescribeUserScramCredentials", cluster_request(describe_scram_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE)], NONE)]),
    Case("AlterUserScramCredentials",
         cluster_request(alter_scram_request, lambda a: a.results[0].error_code),
         [([], CLUSTER_AUTH), ([(CLUSTER, ALTER)], NONE)]),
    Case("DescribeClientQuotas", cluster_request(describe_quotas_request, top_level),
         [([], CLUSTER_AUTH), ([(CLUSTER, DESCRIBE_CONFIGS)], NONE)]),
]
assert len(CASES) <= len(USERS)


def grant(admin: Session, names: Names, grants: list[Grant]) -> None:
    from kafka.protocol.admin import CreateAclsRequest

    creations = [CreateAclsRequest.AclCreation(
        resource_type=kind, resource_name=names.resource(kind), resource_pattern_type=LITERAL,
        principal=f"User:{names.user}", host="*", operation=operation, permission_type=ALLOW)
        for kind, operation in grants]
    answer = admin(CreateAclsRequest(creations=creations))
    assert [result.error_code for result in answer.results] == [NONE] * len(creations)


@pytest.fixture(scope="module")
def admin(bed: AclBed) -> Iterator[Session]:
    session = Session(bed, ADMIN)
    yield session
    session.close()


@pytest.mark.parametrize("position", range(len(CASES)), ids=[case.name for case in CASES])
def test_api_needs_its_acl(bed: AclBed, admin: Session, position: int) -> None:
    case = CASES[position]
    names = Names(USERS[position])
    if case.setup is not None:
        case.setup(admin, names)
    user = Session(bed, names.user)
    try:
        for step, (grants, expected) in enumerate(case.steps):
            if grants:
                grant(admin, names, grants)
            wanted = expected if isinstance(expected, set) else {expected}
            seen: list[int] = []

            def outcome(wanted: set[int] = wanted, seen: list[int] = seen) -> bool:
                seen.append(case.check(user, names))
                return seen[-1] in wanted

            try:
                wait_until(outcome, 20, f"{case.name} step {step}", interval=0.3)
            except AssertionError:
                raise AssertionError(f"{case.name} on {bed.kind}, step {step} (after granting "
                                     f"{grants}): got {seen[-3:]}, want {sorted(wanted)}"
                                     ) from None
    finally:
        user.close()


def test_listings_hide_what_a_user_may_not_describe(bed: AclBed, admin: Session) -> None:
    names = Names(USERS[len(CASES)])
    create_topic(admin, names.topic)
    user = Session(bed, names.user)
    try:
        assert names.topic not in listed_topics(user)
        grant(admin, names, [(TOPIC, READ)])  # READ implies DESCRIBE
        wait_until(lambda: names.topic in listed_topics(user), 20, "the topic listed")
        assert listed_topics(user) <= listed_topics(admin)
    finally:
        user.close()


def _codes(operations: Any) -> set[int]:
    """kafka-python reads an authorized-operations bit field as a set of operations."""
    return {int(operation) for operation in operations or ()}


def test_authorized_operations_are_computed(bed: AclBed, admin: Session) -> None:
    """Metadata's, DescribeGroups' and DescribeCluster's authorized-operations fields."""
    from kafka.protocol.admin import DescribeClusterRequest, DescribeGroupsRequest
    from kafka.protocol.metadata import MetadataRequest

    names = Names(USERS[len(CASES) + 1])
    group_with_offsets(admin, names)
    user = Session(bed, names.user)

    def topic_operations() -> set[int]:
        answer = user(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=names.topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=True,
            max_version=12))
        return _codes(answer.topics[0].authorized_operations)

    def group_operations() -> set[int]:
        return _codes(user(DescribeGroupsRequest(
            groups=[names.group], include_authorized_operations=True,
            max_version=5)).groups[0].authorized_operations)

    def cluster_operations() -> set[int]:
        return _codes(user(DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                  max_version=1)).authorized_operations)

    try:
        assert cluster_operations() == set()  # no DESCRIBE on the cluster: nothing said
        grant(admin, names, [(TOPIC, READ), (TOPIC, ALTER_CONFIGS), (GROUP, DELETE),
                             (CLUSTER, ALTER), (CLUSTER, IDEMPOTENT_WRITE)])
        wait_until(lambda: topic_operations() == {READ, DESCRIBE, DESCRIBE_CONFIGS,
                                                  ALTER_CONFIGS}, 20, "the topic's operations")
        assert group_operations() == {DELETE, DESCRIBE}
        assert cluster_operations() == {ALTER, DESCRIBE, IDEMPOTENT_WRITE}
    finally:
        user.close()


def _creation(**fields: Any) -> Any:
    from kafka.protocol.admin import CreateAclsRequest

    acl = {"resource_type": TOPIC, "resource_name": unique("checked"),
           "resource_pattern_type": LITERAL, "principal": "User:someone", "host": "*",
           "operation": READ, "permission_type": ALLOW, **fields}
    return CreateAclsRequest.AclCreation(**acl)


def test_acl_requests_are_checked_as_kafka_checks_them(bed: AclBed, admin: Session) -> None:
    from kafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

    unknown_server_error, invalid = -1, 42
    cases = {
        # A filter's value in an ACL to create: Kafka cannot build the ACL at all.
        "pattern MATCH": (_creation(resource_pattern_type=2), unknown_server_error, None),
        "type ANY": (_creation(resource_type=1), unknown_server_error, None),
        "operation ANY": (_creation(operation=1), unknown_server_error, None),
        "permission ANY": (_creation(permission_type=1), unknown_server_error, None),
        # Codes Kafka does not know read as UNKNOWN, which its controller refuses.
        "pattern 99": (_creation(resource_pattern_type=99), invalid,
                       "Invalid patternType UNKNOWN"),
        "type 99": (_creation(resource_type=99), invalid, "Invalid resourceType UNKNOWN"),
        "operation 99": (_creation(operation=99), invalid, "Invalid operation UNKNOWN"),
        "permission 99": (_creation(permission_type=99), invalid,
                          "Invalid permissionType UNKNOWN"),
        "cluster not named kafka-cluster": (
            _creation(resource_type=CLUSTER, resource_name="x"), invalid,
            "The only valid name for the CLUSTER resource is kafka-cluster"),
        "empty name": (_creation(resource_name=""), invalid, "Invalid empty resource name"),
        "principal without a type": (
            _creation(principal="someone"), invalid, "Could not parse principal from "
            "`someone` (no colon is present separating the principal type from the principal "
            "name)"),
        "valid": (_creation(), NONE, None),
    }
    for name, (creation, code, message) in cases.items():
        [result] = admin(CreateAclsRequest(creations=[creation])).results
        assert result.error_code == code, (name, result)
        if code:
            assert result.error_message == message, (name, result)
    # One bad ACL among good ones fails the request when Kafka cannot build it...
    answer = admin(CreateAclsRequest(creations=[_creation(), cases["type ANY"][0]]))
    assert [r.error_code for r in answer.results] == [unknown_server_error] * 2
    # ...and only itself otherwise.
    answer = admin(CreateAclsRequest(creations=[_creation(), cases["type 99"][0]]))
    assert [r.error_code for r in answer.results] == [NONE, invalid]
    # A filter of codes Kafka does not know matches nothing.
    for fields in ({"resource_type_filter": 99}, {"operation": 99},
                   {"pattern_type_filter": 99}):
        spec = {"resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1, **fields}
        described = admin(DescribeAclsRequest(**spec))
        assert (described.error_code, len(described.resources)) == (NONE, 0), fields

    def delete_filter(**fields: Any) -> Any:
        spec = {"resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": "User:nobody-at-all",
                "host_filter": None, "operation": 1, "permission_type": 1, **fields}
        return DeleteAclsRequest.DeleteAclsFilter(**spec)

    answer = admin(DeleteAclsRequest(filters=[
        delete_filter(), delete_filter(resource_type_filter=99),
        delete_filter(operation=99)]))
    assert [(r.error_code, r.error_message) for r in answer.filter_results] == [
        (NONE, None), (42, "Unknown patternFilter."), (42, "Unknown entryFilter.")]

    # An UNKNOWN (0) code does not even parse: Kafka closes the connection.
    from kafka.errors import KafkaConnectionError, RequestTimedOutError
    user = Session(bed, USERS[len(CASES) + 2])
    try:
        with pytest.raises((KafkaConnectionError, RequestTimedOutError)):
            user(DescribeAclsRequest(resource_type_filter=0, resource_name_filter=None,
                                     pattern_type_filter=1, principal_filter=None,
                                     host_filter=None, operation=1, permission_type=1))
    finally:
        user.close()
