"""Admin: the synchronous face of AsyncAdmin, on a private event-loop thread."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from moldau.client.admin.client import AsyncAdmin
from moldau.client.admin.types import (
    AclBinding,
    AclBindingFilter,
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ElectionType,
    GroupDescription,
    GroupListing,
    ListedOffset,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionReassignment,
    QuorumInfo,
    ScramCredentialInfo,
    TopicDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.errors import KafkaError
from moldau.client.loop_thread import LoopThread
from moldau.client.types import PreparedTransaction, TopicPartition


class Admin:
    """Kafka admin client for threads; every method blocks until its call completes.
    See AsyncAdmin for the semantics of each."""

    def __init__(self, config: Mapping[str, Any] | None = None, **settings: Any) -> None:
        self._core = AsyncAdmin(config, **settings)
        self._thread = LoopThread(name="moldau-admin")
        self._thread.run(self._core.start())

    @property
    def async_admin(self) -> AsyncAdmin:
        return self._core

    def close(self) -> None:
        if self._thread.loop.is_closed():
            return
        try:
            self._thread.run(self._core.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Topics

    def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout: float | None = None) -> None:
        self._thread.run(self._core.create_topics(new_topics, validate_only=validate_only,
                                                  timeout=timeout))

    def create_topics_each(self, new_topics: Iterable[NewTopic], *,
                           validate_only: bool = False, timeout: float | None = None
                           ) -> dict[str, KafkaError | None]:
        return self._thread.run(self._core.create_topics_each(
            new_topics, validate_only=validate_only, timeout=timeout))

    def create_topic(self, name: str, num_partitions: int | None = None,
                     replication_factor: int | None = None,
                     configs: Mapping[str, str] | None = None, *,
                     timeout: float | None = None) -> None:
        self._thread.run(self._core.create_topic(name, num_partitions, replication_factor,
                                                 configs, timeout=timeout))

    def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        self._thread.run(self._core.delete_topics(names, timeout=timeout))

    def delete_topics_each(self, names: Iterable[str], *, timeout: float | None = None
                           ) -> dict[str, KafkaError | None]:
        return self._thread.run(self._core.delete_topics_each(names, timeout=timeout))

    def list_topics(self, *, include_internal: bool = False,
                    timeout: float | None = None) -> list[str]:
        return self._thread.run(self._core.list_topics(include_internal=include_internal,
                                                       timeout=timeout))

    def describe_topics(self, names: Iterable[str] | None = None, *,
                        timeout: float | None = None) -> dict[str, TopicDescription]:
        return self._thread.run(self._core.describe_topics(names, timeout=timeout))

    def describe_topics_each(self, names: Iterable[str], *, timeout: float | None = None
                             ) -> dict[str, TopicDescription | KafkaError]:
        return self._thread.run(self._core.describe_topics_each(names, timeout=timeout))

    def create_partitions(self, new_partitions: Mapping[str, NewPartitions | int], *,
                          validate_only: bool = False, timeout: float | None = None) -> None:
        self._thread.run(self._core.create_partitions(new_partitions,
                                                      validate_only=validate_only,
                                                      timeout=timeout))

    def create_partitions_each(self, new_partitions: Mapping[str, NewPartitions | int], *,
                               validate_only: bool = False, timeout: float | None = None
                               ) -> dict[str, KafkaError | None]:
        return self._thread.run(self._core.create_partitions_each(
            new_partitions, validate_only=validate_only, timeout=timeout))

    # Replicas

    def elect_leaders(self, election_type: ElectionType | int,
                      partitions: Iterable[TopicPartition] | None = None, *,
                      timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        return self._thread.run(self._core.elect_leaders(election_type, partitions,
                                                         timeout=timeout))

    def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout: float | None = None) -> None:
        self._thread.run(self._core.alter_partition_reassignments(reassignments,
                                                                  timeout=timeout))

    def alter_partition_reassignments_each(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        return self._thread.run(self._core.alter_partition_reassignments_each(
            reassignments, timeout=timeout))

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None,
                                     *, timeout: float | None = None
                                     ) -> dict[TopicPartition, PartitionReassignment]:
        return self._thread.run(self._core.list_partition_reassignments(partitions,
                                                                        timeout=timeout))

    # Configs

    def describe_configs(self, resources: Iterable[ConfigResource], *,
                         include_synonyms: bool = False, include_documentation: bool = False,
                         timeout: float | None = None
                         ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._thread.run(self._core.describe_configs(
            resources, include_synonyms=include_synonyms,
            include_documentation=include_documentation, timeout=timeout))

    def describe_configs_each(self, resources: Iterable[ConfigResource], *,
                              include_synonyms: bool = False,
                              include_documentation: bool = False,
                              timeout: float | None = None
                              ) -> dict[ConfigResource, dict[str, ConfigEntry] | KafkaError]:
        return self._thread.run(self._core.describe_configs_each(
            resources, include_synonyms=include_synonyms,
            include_documentation=include_documentation, timeout=timeout))

    def incremental_alter_configs(self, changes: Mapping[ConfigResource,
                                                         Iterable[AlterConfigOp]], *,
                                  validate_only: bool = False,
                                  timeout: float | None = None) -> None:
        self._thread.run(self._core.incremental_alter_configs(
            changes, validate_only=validate_only, timeout=timeout))

    def incremental_alter_configs_each(
            self, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
            validate_only: bool = False, timeout: float | None = None
            ) -> dict[ConfigResource, KafkaError | None]:
        return self._thread.run(self._core.incremental_alter_configs_each(
            changes, validate_only=validate_only, timeout=timeout))

    # ACLs and SCRAM credentials

    def create_acls(self, bindings: Iterable[AclBinding], *,
                    timeout: float | None = None) -> None:
        self._thread.run(self._core.create_acls(bindings, timeout=timeout))

    def create_acls_each(self, bindings: Iterable[AclBinding], *,
                         timeout: float | None = None) -> dict[AclBinding, KafkaError | None]:
        return self._thread.run(self._core.create_acls_each(bindings, timeout=timeout))

    def describe_acls(self, acl_filter: AclBindingFilter, *,
                      timeout: float | None = None) -> list[AclBinding]:
        return self._thread.run(self._core.describe_acls(acl_filter, timeout=timeout))

    def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                    timeout: float | None = None) -> list[AclBinding]:
        return self._thread.run(self._core.delete_acls(filters, timeout=timeout))

    def delete_acls_each(self, filters: Iterable[AclBindingFilter], *,
                         timeout: float | None = None
                         ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        return self._thread.run(self._core.delete_acls_each(filters, timeout=timeout))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None, *,
                                        timeout: float | None = None
                                        ) -> dict[str, list[ScramCredentialInfo]]:
        return self._thread.run(self._core.describe_user_scram_credentials(users,
                                                                           timeout=timeout))

    def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout: float | None = None) -> None:
        self._thread.run(self._core.alter_user_scram_credentials(alterations,
                                                                 timeout=timeout))

    def alter_user_scram_credentials_each(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout: float | None = None) -> dict[str, KafkaError | None]:
        return self._thread.run(self._core.alter_user_scram_credentials_each(
            alterations, timeout=timeout))

    # Cluster, records, log dirs

    def describe_cluster(self, *, include_fenced_brokers: bool = False,
                         timeout: float | None = None) -> ClusterDescription:
        return self._thread.run(self._core.describe_cluster(
            include_fenced_brokers=include_fenced_brokers, timeout=timeout))

    def unregister_broker(self, broker_id: int, *, timeout: float | None = None) -> None:
        self._thread.run(self._core.unregister_broker(broker_id, timeout=timeout))

    def describe_metadata_quorum(self, *, timeout: float | None = None) -> QuorumInfo:
        return self._thread.run(self._core.describe_metadata_quorum(timeout=timeout))

    def describe_log_dirs(self, broker_ids: Iterable[int] | None = None, *,
                          timeout: float | None = None
                          ) -> dict[int, dict[str, LogDirDescription]]:
        return self._thread.run(self._core.describe_log_dirs(broker_ids, timeout=timeout))

    def delete_records(self, before: Mapping[TopicPartition, int], *,
                       timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._thread.run(self._core.delete_records(before, timeout=timeout))

    def list_offsets(self, specs: Mapping[TopicPartition, int], *, isolation_level: int = 0,
                     timeout: float | None = None) -> dict[TopicPartition, ListedOffset]:
        return self._thread.run(self._core.list_offsets(
            specs, isolation_level=isolation_level, timeout=timeout))

    # Groups

    def list_groups(self, *, timeout: float | None = None) -> list[GroupListing]:
        return self._thread.run(self._core.list_groups(timeout=timeout))

    def describe_groups(self, group_ids: Iterable[str], *,
                        timeout: float | None = None) -> dict[str, GroupDescription]:
        return self._thread.run(self._core.describe_groups(group_ids, timeout=timeout))

    def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        self._thread.run(self._core.delete_groups(group_ids, timeout=timeout))

    def list_group_offsets(self, group_id: str,
                           partitions: Iterable[TopicPartition] | None = None, *,
                           timeout: float | None = None
                           ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._thread.run(self._core.list_group_offsets(group_id, partitions,
                                                              timeout=timeout))

    def alter_group_offsets(self, group_id: str,
                            offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *,
                            timeout: float | None = None) -> None:
        self._thread.run(self._core.alter_group_offsets(group_id, offsets, timeout=timeout))

    def complete_transactions(self, prepared: Iterable[PreparedTransaction], *,
                              commit: bool = True, timeout: float | None = None) -> None:
        self._thread.run(self._core.complete_transactions(prepared, commit=commit,
                                                          timeout=timeout))
