"""The Moldau admin client: AsyncAdmin (asyncio) and Admin (threads)."""

from moldau.client.admin.client import AsyncAdmin
from moldau.client.admin.sync import Admin
from moldau.client.admin.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    GroupDescription,
    GroupListing,
    ListedOffset,
    LogDirDescription,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    PartitionDescription,
    ReplicaInfo,
    ResourceType,
    TopicDescription,
)

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncAdmin",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "GroupDescription",
    "GroupListing",
    "ListedOffset",
    "LogDirDescription",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionDescription",
    "ReplicaInfo",
    "ResourceType",
    "TopicDescription",
]
