"""kafka-python's protocol classes as a wire client for the ACL tests: one user's SASL
connection, the resources of a test case, and one small function per Kafka API that sends a
request and returns the error code it was answered with (or sets up what a case needs as the
super user)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.java.acl_bed import ADMIN, AclBed
from e2e.support import unique, wait_until

# Error codes.
NONE = 0
TOPIC_AUTH = 29
GROUP_AUTH = 30
CLUSTER_AUTH = 31
TXN_AUTH = 53
MEMBER_ID_REQUIRED = 79
ELECTION_NOT_NEEDED = 84

# Resource types, pattern types, operations and permissions (Kafka's wire codes).
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL = 3
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
ALLOW = 3
CLUSTER_NAME = "kafka-cluster"


class Session:
    """One user's kafka-python connection to the (single) broker."""

    def __init__(self, bed: AclBed, user: str) -> None:
        from kafka.net.compat import KafkaNetClient

        self.client = KafkaNetClient(bootstrap_servers=bed.bootstrap, request_timeout_ms=30000,
                                     **bed.kp(user))
        self.client.check_version()
        self.node = next(iter(self.client.cluster.brokers())).node_id

    def __call__(self, request: Any) -> Any:
        return self.client.send_and_receive(self.node, request, timeout_ms=30000)

    def close(self) -> None:
        self.client.close()


@dataclass
class Names:
    """The resources of one case."""

    user: str
    topic: str = field(default_factory=lambda: unique("acl-t"))
    group: str = field(default_factory=lambda: unique("acl-g"))
    txn: str = field(default_factory=lambda: unique("acl-x"))
    state: dict[str, Any] = field(default_factory=dict)

    def resource(self, resource_type: int) -> str:
        return {TOPIC: self.topic, GROUP: self.group, TXN: self.txn,
                CLUSTER: CLUSTER_NAME}[resource_type]


Grant = tuple[int, int]  # (resource type, operation), on the case's own resource
Check = Callable[[Session, Names], int]


# --------------------------------------------------------------------------- requests


def _records(producer_id: int = -1, epoch: int = -1, transactional: bool = False) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, 0, 1 << 16, transactional=transactional,
                                   producer_id=producer_id, producer_epoch=epoch,
                                   base_sequence=0 if producer_id >= 0 else -1)
    builder.append(0, None, b"value", [])
    builder.close()
    return builder.buffer()


def create_topic(admin: Session, name: str, partitions: int = 1) -> None:
    from kafka.protocol.admin import CreateTopicsRequest

    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                               replication_factor=1, assignments=[],
                                               configs=[])
    code = admin(CreateTopicsRequest(topics=[topic], timeout_ms=30000,
                                     validate_only=False)).topics[0].error_code
    assert code == NONE, code
    wait_until(lambda: metadata(admin, Names(ADMIN, topic=name)) == NONE, 30,
               f"topic {name} known")


def produce(session: Session, names: Names, transactional_id: str | None = None,
            records: bytes | None = None) -> int:
    from kafka.protocol.producer import ProduceRequest

    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=transactional_id, acks=1, timeout_ms=10000,
                             topic_data=[data(name=names.topic, partition_data=[
                                 data.PartitionProduceData(index=0,
                                                           records=records or _records())])],
                             max_version=12)
    return session(request).responses[0].partition_responses[0].error_code


def fetch(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import FetchRequest

    topic = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[
                               topic(topic=names.topic, partitions=[topic.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=0,
                                   log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="", max_version=12)
    return session(request).responses[0].partitions[0].error_code


def list_offsets(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import ListOffsetsRequest

    topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[topic(
        name=names.topic, partitions=[topic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])], max_version=9)
    return session(request).topics[0].partitions[0].error_code


def metadata(session: Session, names: Names, create: bool = False) -> int:
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=names.topic)],
                              allow_auto_topic_creation=create, max_version=12)
    return session(request).topics[0].error_code


def listed_topics(session: Session) -> set[str]:
    from kafka.protocol.metadata import MetadataRequest

    response = session(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       max_version=12))
    return {topic.name for topic in response.topics}


def offset_commit(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import OffsetCommitRequest

    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(
        group_id=names.group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=[topic(name=names.topic, partitions=[
            topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                               committed_leader_epoch=-1,
                                               committed_metadata="")])],
        max_version=9)
    return session(request).topics[0].partitions[0].error_code


def offset_fetch(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import OffsetFetchRequest

    group = OffsetFetchRequest.OffsetFetchRequestGroup
    request = OffsetFetchRequest(groups=[group(group_id=names.group, topics=[
        group.OffsetFetchRequestTopics(name=names.topic, partition_indexes=[0])])],
        require_stable=False, min_version=8, max_version=9)
    answer = session(request).groups[0]
    if answer.error_code:
        return answer.error_code
    return answer.topics[0].partitions[0].error_code


def find_coordinator(key_type: int) -> Check:
    def check(session: Session, names: Names) -> int:
        from kafka.protocol.metadata import FindCoordinatorRequest

        key = names.group if key_type == 0 else names.txn
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key],
                                         min_version=4, max_version=5)
        return session(request).coordinators[0].error_code
    return check


def join_group(session: Session, names: Names) -> int:
    """Join (twice: the first answer gives the member id), then SyncGroup; the member's id
    and generation are kept for the heartbeat and leave cases."""
    from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest

    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    member_id = ""
    for _ in range(2):
        answer = session(JoinGroupRequest(
            group_id=names.group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
            member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[protocol], reason=None, max_version=9))
        if answer.error_code != MEMBER_ID_REQUIRED:
            break
        member_id = answer.member_id
    if answer.error_code:
        return answer.error_code
    names.state.update(member=answer.member_id, generation=answer.generation_id)
    sync = session(SyncGroupRequest(
        group_id=names.group, generation_id=answer.generation_id, member_id=answer.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=answer.member_id, assignment=b"")], max_version=5))
    return sync.error_code


def sync_group(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import SyncGroupRequest

    return session(SyncGroupRequest(
        group_id=names.group, generation_id=1, member_id="someone", group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=[],
        max_version=5)).error_code


def heartbeat(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import HeartbeatRequest

    return session(HeartbeatRequest(
        group_id=names.group, generation_id=names.state.get("generation", 1),
        member_id=names.state.get("member", "someone"), group_instance_id=None,
        max_version=4)).error_code


def leave_group(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import LeaveGroupRequest

    member = LeaveGroupRequest.MemberIdentity(
        member_id=names.state.get("member", "someone"), group_instance_id=None, reason=None)
    answer = session(LeaveGroupRequest(group_id=names.group, members=[member],
                                       min_version=3, max_version=5))
    return answer.error_code or answer.members[0].error_code


def coordinators(admin: Session, names: Names) -> None:
    """The group's and the transactional id's coordinators are up (the first FindCoordinator
    creates `__consumer_offsets` and `__transaction_state`)."""
    for key_type in (0, 1):
        wait_until(lambda key_type=key_type: find_coordinator(key_type)(admin, names) == NONE,
                   60, "the coordinators")


def with_coordinators(admin: Session, names: Names) -> None:
    create_topic(admin, names.topic)
    coordinators(admin, names)


def group_joined(admin: Session, names: Names) -> None:
    """A member joins the group as the super user, so that heartbeats and leaves find it."""
    coordinators(admin, names)
    assert join_group(admin, names) == NONE


def group_with_offsets(admin: Session, names: Names) -> None:
    """An empty group with a committed offset, made by the super user."""
    with_coordinators(admin, names)
    wait_until(lambda: offset_commit(admin, names) == NONE, 30, "an offset committed")


def describe_groups(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DescribeGroupsRequest

    return session(DescribeGroupsRequest(groups=[names.group], include_authorized_operations=True,
                                         max_version=5)).groups[0].error_code


def group_listed(session: Session, names: Names) -> int:
    from kafka.protocol.admin import ListGroupsRequest

    answer = session(ListGroupsRequest(states_filter=[], types_filter=[], max_version=4))
    listed = {group.group_id for group in answer.groups}
    return answer.error_code if answer.error_code else (NONE if names.group in listed
                                                         else GROUP_AUTH)


def delete_groups(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DeleteGroupsRequest

    return session(DeleteGroupsRequest(groups_names=[names.group])).results[0].error_code


def offset_delete(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import OffsetDeleteRequest

    topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    answer = session(OffsetDeleteRequest(group_id=names.group, topics=[topic(
        name=names.topic, partitions=[topic.OffsetDeleteRequestPartition(partition_index=0)])]))
    return answer.error_code or answer.topics[0].partitions[0].error_code


def create_topics(session: Session, names: Names) -> int:
    from kafka.protocol.admin import CreateTopicsRequest

    topic = CreateTopicsRequest.CreatableTopic(name=names.topic, num_partitions=1,
                                               replication_factor=1, assignments=[],
                                               configs=[])
    return session(CreateTopicsRequest(topics=[topic], timeout_ms=30000,
                                       validate_only=True)).topics[0].error_code


def delete_topics(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DeleteTopicsRequest

    request = DeleteTopicsRequest(topic_names=[names.topic], timeout_ms=30000, max_version=5)
    return session(request).responses[0].error_code


def delete_records(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DeleteRecordsRequest

    topic = DeleteRecordsRequest.DeleteRecordsTopic
    answer = session(DeleteRecordsRequest(topics=[topic(name=names.topic, partitions=[
        topic.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=30000))
    return answer.topics[0].partitions[0].error_code


def create_partitions(session: Session, names: Names) -> int:
    from kafka.protocol.admin import CreatePartitionsRequest

    topic = CreatePartitionsRequest.CreatePartitionsTopic(name=names.topic, count=2,
                                                          assignments=None)
    return session(CreatePartitionsRequest(topics=[topic], timeout_ms=30000,
                                           validate_only=True)).results[0].error_code


def describe_configs(resource_type: int) -> Check:
    def check(session: Session, names: Names) -> int:
        from kafka.protocol.admin import DescribeConfigsRequest

        name = names.topic if resource_type == 2 else "1"
        resource = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=None)
        return session(DescribeConfigsRequest(resources=[resource], include_synonyms=False,
                                              include_documentation=False)
                       ).results[0].error_code
    return check


def alter_configs(resource_type: int, incremental: bool) -> Check:
    def check(session: Session, names: Names) -> int:
        from kafka.protocol.admin import AlterConfigsRequest, IncrementalAlterConfigsRequest

        # A broker's default for the whole cluster (empty name).
        name = names.topic if resource_type == 2 else ""
        key = "retention.ms" if resource_type == 2 else "log.retention.ms"
        if incremental:
            resource = IncrementalAlterConfigsRequest.AlterConfigsResource
            request: Any = IncrementalAlterConfigsRequest(resources=[resource(
                resource_type=resource_type, resource_name=name, configs=[
                    resource.AlterableConfig(name=key, config_operation=0, value="60000")])],
                validate_only=True)
        else:
            resource = AlterConfigsRequest.AlterConfigsResource
            request = AlterConfigsRequest(resources=[resource(
                resource_type=resource_type, resource_name=name, configs=[
                    resource.AlterableConfig(name=key, value="60000")])], validate_only=True)
        return session(request).responses[0].error_code
    return check


def init_producer_id(transactional: bool) -> Check:
    def check(session: Session, names: Names) -> int:
        from kafka.protocol.producer import InitProducerIdRequest

        answer = session(InitProducerIdRequest(
            transactional_id=names.txn if transactional else None,
            transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1, max_version=5))
        names.state.update(producer_id=answer.producer_id, epoch=answer.producer_epoch)
        return answer.error_code
    return check


def in_transaction(admin: Session, names: Names) -> None:
    """The case's transactional id with a producer id, and its topic."""
    with_coordinators(admin, names)
    wait_until(lambda: init_producer_id(True)(admin, names) == NONE, 30, "a producer id")


def add_partitions(session: Session, names: Names) -> int:
    from kafka.protocol.producer import AddPartitionsToTxnRequest

    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=names.topic, partitions=[0])
    answer = session(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=names.txn,
        v3_and_below_producer_id=names.state["producer_id"],
        v3_and_below_producer_epoch=names.state["epoch"], v3_and_below_topics=[topic],
        max_version=3))
    return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def add_offsets(session: Session, names: Names) -> int:
    from kafka.protocol.producer import AddOffsetsToTxnRequest

    return session(AddOffsetsToTxnRequest(
        transactional_id=names.txn, producer_id=names.state["producer_id"],
        producer_epoch=names.state["epoch"], group_id=names.group, max_version=3)).error_code


def txn_offset_commit(session: Session, names: Names) -> int:
    from kafka.protocol.producer import TxnOffsetCommitRequest

    topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    answer = session(TxnOffsetCommitRequest(
        transactional_id=names.txn, group_id=names.group,
        producer_id=names.state["producer_id"], producer_epoch=names.state["epoch"],
        generation_id=-1, member_id="", group_instance_id=None, topics=[topic(
            name=names.topic, partitions=[topic.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                committed_metadata="")])]))
    return answer.topics[0].partitions[0].error_code


def offsets_in_transaction(admin: Session, names: Names) -> None:
    in_transaction(admin, names)
    assert add_offsets(admin, names) == NONE


def end_txn(session: Session, names: Names) -> int:
    from kafka.protocol.producer import EndTxnRequest

    return session(EndTxnRequest(transactional_id=names.txn,
                                 producer_id=names.state["producer_id"],
                                 producer_epoch=names.state["epoch"], committed=False,
                                 max_version=4)).error_code


def partitions_in_transaction(admin: Session, names: Names) -> None:
    in_transaction(admin, names)
    assert add_partitions(admin, names) == NONE


def transactional_produce(session: Session, names: Names) -> int:
    records = _records(names.state["producer_id"], names.state["epoch"], transactional=True)
    return produce(session, names, transactional_id=names.txn, records=records)


def write_txn_markers(session: Session, names: Names) -> int:
    from kafka.protocol.producer import WriteTxnMarkersRequest

    marker = WriteTxnMarkersRequest.WritableTxnMarker
    answer = session(WriteTxnMarkersRequest(markers=[marker(
        producer_id=names.state["producer_id"], producer_epoch=names.state["epoch"],
        transaction_result=False, coordinator_epoch=0, topics=[marker.WritableTxnMarkerTopic(
            name=names.topic, partition_indexes=[0])])], max_version=1))
    return answer.markers[0].topics[0].partitions[0].error_code


def offset_for_leader_epoch(session: Session, names: Names) -> int:
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest

    topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    answer = session(OffsetForLeaderEpochRequest(replica_id=-1, topics=[topic(
        topic=names.topic, partitions=[topic.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0)])]))
    return answer.topics[0].partitions[0].error_code


def describe_producers(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DescribeProducersRequest

    answer = session(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=names.topic, partition_indexes=[0])]))
    return answer.topics[0].partitions[0].error_code


def describe_transactions(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DescribeTransactionsRequest

    answer = session(DescribeTransactionsRequest(transactional_ids=[names.txn]))
    return answer.transaction_states[0].error_code


def transaction_listed(session: Session, names: Names) -> int:
    from kafka.protocol.admin import ListTransactionsRequest

    answer = session(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                             max_version=1))
    listed = {state.transactional_id for state in answer.transaction_states}
    return answer.error_code or (NONE if names.txn in listed else TXN_AUTH)


def describe_topic_partitions(session: Session, names: Names) -> int:
    from kafka.protocol.admin import DescribeTopicPartitionsRequest

    answer = session(DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=names.topic)],
        response_partition_limit=2000, cursor=None))
    return answer.topics[0].error_code


def cluster_request(build: Callable[[Names], Any], error: Callable[[Any], int]) -> Check:
    def check(session: Session, names: Names) -> int:
        return error(session(build(names)))
    return check


def describe_acls_request(names: Names) -> Any:
    from kafka.protocol.admin import DescribeAclsRequest

    return DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                               pattern_type_filter=1, principal_filter=None, host_filter=None,
                               operation=1, permission_type=1)


def create_acls_request(names: Names) -> Any:
    from kafka.protocol.admin import CreateAclsRequest

    return CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=TOPIC, resource_name=names.topic, resource_pattern_type=LITERAL,
        principal="User:nobody", host="*", operation=READ, permission_type=ALLOW)])


def delete_acls_request(names: Names) -> Any:
    from kafka.protocol.admin import DeleteAclsRequest

    return DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=TOPIC, resource_name_filter=names.topic, pattern_type_filter=1,
        principal_filter="User:nobody", host_filter=None, operation=1, permission_type=1)])


def describe_log_dirs_request(names: Names) -> Any:
    from kafka.protocol.admin import DescribeLogDirsRequest

    return DescribeLogDirsRequest(topics=None, max_version=4)


def elect_leaders_request(names: Names) -> Any:
    from kafka.protocol.admin import ElectLeadersRequest

    return ElectLeadersRequest(election_type=0, timeout_ms=30000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=names.topic, partitions=[0])])


def election_error(answer: Any) -> int:
    return answer.error_code or answer.replica_election_results[0].partition_result[0].error_code


def list_reassignments_request(names: Names) -> Any:
    from kafka.protocol.admin import ListPartitionReassignmentsRequest

    return ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None)


def alter_reassignments_request(names: Names) -> Any:
    from kafka.protocol.admin import AlterPartitionReassignmentsRequest

    topic = AlterPartitionReassignmentsRequest.ReassignableTopic
    return AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[topic(
        name=names.topic, partitions=[topic.ReassignablePartition(partition_index=0,
                                                                  replicas=None)])],
        max_version=0)


def describe_quorum_request(names: Names) -> Any:
    from kafka.protocol.admin import DescribeQuorumRequest

    topic = DescribeQuorumRequest.TopicData
    return DescribeQuorumRequest(topics=[topic(topic_name="__cluster_metadata", partitions=[
        topic.PartitionData(partition_index=0)])], max_version=1)


def describe_scram_request(names: Names) -> Any:
    from kafka.protocol.admin import DescribeUserScramCredentialsRequest

    # Kafka does not answer a refused request for every user (users null): name one.
    return DescribeUserScramCredentialsRequest(users=[
        DescribeUserScramCredentialsRequest.UserName(name=names.user)])


def alter_scram_request(names: Names) -> Any:
    from kafka.protocol.admin import AlterUserScramCredentialsRequest

    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    return AlterUserScramCredentialsRequest(deletions=[], upsertions=[
        AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=names.topic, mechanism=2, iterations=4096, salt=salt, salted_password=salted)])


def describe_quotas_request(names: Names) -> Any:
    from kafka.protocol.admin import DescribeClientQuotasRequest

    return DescribeClientQuotasRequest(components=[], strict=False)


def top_level(answer: Any) -> int:
    return answer.error_code


def with_topic(admin: Session, names: Names) -> None:
    create_topic(admin, names.topic)


# The cases: what each API needs, as Kafka's authorizer table has it.
