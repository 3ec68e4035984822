"""Access control entries in Kafka's vocabulary: resource types, pattern types, operations
and permissions with their wire codes, an ACL binding, and the filters DescribeAcls and
DeleteAcls take (Kafka's AclBinding and AclBindingFilter).

The four enums are the admin client's (their `of` reads a code Kafka does not know as
UNKNOWN, as Kafka's `fromCode` reads it), under the broker's shorter names.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.client.admin.types import AclOperation as Operation
from moldau.client.admin.types import AclPatternType as PatternType
from moldau.client.admin.types import AclPermissionType as Permission
from moldau.client.admin.types import AclResourceType as ResourceType

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # a literal resource name, or a host, matching every one
WILDCARD_PRINCIPAL = "User:*"


# The operations each resource type has (Kafka's AclEntry.supportedOperations): what the
# authorized-operations bit fields of Metadata, DescribeGroups and DescribeCluster cover.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                           Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE,
                                    Operation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

# An ALLOW of any of these also allows DESCRIBE (or DESCRIBE_CONFIGS); a DENY implies
# nothing beyond its own operation.
IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                              Operation.DELETE, Operation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL: who (principal, host) may or may not do what (operation) on which resources
    (a literal name, `*`, or a name prefix)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission.name} {self.operation.name} from "
                f"{self.host} on {self.resource_type.name}:{self.pattern_type.name}:"
                f"{self.resource_name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A pattern of ACLs: None or ANY fields match everything; pattern type MATCH matches
    the literal, wildcard and prefixed ACLs that would apply to the named resource."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    @property
    def unknown_pattern(self) -> bool:
        return (self.resource_type is ResourceType.UNKNOWN
                or self.pattern_type is PatternType.UNKNOWN)

    @property
    def unknown_entry(self) -> bool:
        return self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN

    def matches(self, acl: Acl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: Acl) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if wanted in (PatternType.ANY, acl.pattern_type):
            return name == acl.resource_name
        # MATCH: the ACLs that apply to a resource of this name.
        if acl.pattern_type is PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def _matches_entry(self, acl: Acl) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


def operations_bits(operations: object) -> int:
    """Kafka's authorized-operations field: bit `code` set for each operation."""
    bits = 0
    for operation in operations:  # type: ignore[attr-defined]
        bits |= 1 << int(operation)
    return bits


def new_acl_error(acl: Acl) -> str | None:
    """Why Kafka's controller refuses to create this ACL (INVALID_REQUEST), or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (Permission.DENY, Permission.ALLOW):
        return f"Invalid permissionType {acl.permission.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present "
                "separating the principal type from the principal name)")
    return None
