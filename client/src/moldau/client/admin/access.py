"""ACLs and SCRAM credentials as the admin requests carry them (CreateAcls, DescribeAcls,
DeleteAcls, AlterUserScramCredentials), and the checks Kafka's admin client makes before
sending: what it refuses locally never reaches a broker (a broker closes the connection on
an UNKNOWN code, which would otherwise look like a network failure and be retried)."""

from __future__ import annotations

from typing import Any

from moldau.client.admin.types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPatternType,
    AclPermissionType,
    AclResourceType,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.errors import (
    InvalidRequestError,  # type: ignore[attr-defined]
    KafkaError,
    UnacceptableCredentialError,  # type: ignore[attr-defined]
    UnsupportedSaslMechanismError,  # type: ignore[attr-defined]
)
from moldau.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, new_salt, salted_password

ScramAlteration = UserScramCredentialUpsertion | UserScramCredentialDeletion

# Per field, the values only a filter may have.
_FILTER_ONLY = {
    "resource type": frozenset({AclResourceType.UNKNOWN, AclResourceType.ANY}),
    "pattern type": frozenset({AclPatternType.UNKNOWN, AclPatternType.ANY,
                               AclPatternType.MATCH}),
    "operation": frozenset({AclOperation.UNKNOWN, AclOperation.ANY}),
    "permission type": frozenset({AclPermissionType.UNKNOWN, AclPermissionType.ANY}),
}


def _fields(binding: AclBinding | AclBindingFilter) -> dict[str, Any]:
    return {"resource type": binding.resource_type, "pattern type": binding.pattern_type,
            "operation": binding.operation, "permission type": binding.permission_type}


def binding_text(binding: AclBinding) -> str:
    """An ACL as error messages name it."""
    return (f"ACL {binding.principal} {binding.permission_type.name} "
            f"{binding.operation.name} from {binding.host} on {binding.resource_type.name}:"
            f"{binding.pattern_type.name}:{binding.resource_name}")


def filter_text(acl_filter: AclBindingFilter) -> str:
    def shown(value: Any) -> str:
        return "*any*" if value is None else getattr(value, "name", value)

    return (f"ACL filter {shown(acl_filter.principal)} {shown(acl_filter.permission_type)} "
            f"{shown(acl_filter.operation)} from {shown(acl_filter.host)} on "
            f"{shown(acl_filter.resource_type)}:{shown(acl_filter.pattern_type)}:"
            f"{shown(acl_filter.resource_name)}")


def creation_error(binding: AclBinding) -> KafkaError | None:
    """An ACL that is really a filter (ANY, MATCH or UNKNOWN in it) cannot be created."""
    for label, value in _fields(binding).items():
        if value in _FILTER_ONLY[label]:
            return InvalidRequestError(f"{binding_text(binding)}: cannot create an ACL whose "
                                       f"{label} is {value.name}")
    if binding.principal is None or binding.host is None:
        return InvalidRequestError(f"{binding_text(binding)}: an ACL to create needs a "
                                   "principal and a host")
    return None


def filter_error(acl_filter: AclBindingFilter) -> KafkaError | None:
    if any(value is not None and value == 0 for value in _fields(acl_filter).values()):
        return InvalidRequestError(f"{filter_text(acl_filter)}: a filter must not contain "
                                   "UNKNOWN elements")
    return None


def creation(binding: AclBinding) -> dict[str, Any]:
    return {"resource_type": int(binding.resource_type),
            "resource_name": binding.resource_name,
            "resource_pattern_type": int(binding.pattern_type),
            "principal": binding.principal, "host": binding.host,
            "operation": int(binding.operation),
            "permission_type": int(binding.permission_type)}


def filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    """The filter fields DescribeAcls and DeleteAcls share (None enums as ANY)."""
    def code(value: Any) -> int:
        return 1 if value is None else int(value)  # 1: ANY in each of the four enums

    return {"resource_type_filter": code(acl_filter.resource_type),
            "resource_name_filter": acl_filter.resource_name,
            "pattern_type_filter": code(acl_filter.pattern_type),
            "principal_filter": acl_filter.principal, "host_filter": acl_filter.host,
            "operation": code(acl_filter.operation),
            "permission_type": code(acl_filter.permission_type)}


def binding_of(resource: Any, entry: Any) -> AclBinding:
    """An ACL of a DescribeAcls (resource, entry) or DeleteAcls (matching ACL, twice) answer."""
    return AclBinding(AclResourceType.of(resource.resource_type), resource.resource_name,
                      AclPatternType.of(resource.pattern_type), entry.principal, entry.host,
                      AclOperation.of(entry.operation),
                      AclPermissionType.of(entry.permission_type))


def described(response: Any) -> list[AclBinding]:
    return [binding_of(resource, entry) for resource in response.resources
            for entry in resource.acls]


def alteration_error(alteration: ScramAlteration) -> KafkaError | None:
    """What Kafka's admin client refuses before sending, and an iteration count out of
    Kafka's bounds (checked here too: deriving the salted password would cost that many
    rounds first)."""
    if not alteration.user:
        return UnacceptableCredentialError("Username must not be empty")
    mechanism = alteration.mechanism
    if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        return UnsupportedSaslMechanismError(f"User '{alteration.user}': Unknown SCRAM "
                                             "mechanism")
    if not isinstance(alteration, UserScramCredentialUpsertion):
        return None
    what = f"User '{alteration.user}'"
    if not alteration.password:
        return UnacceptableCredentialError(f"{what}: Password must not be empty")
    if alteration.iterations < MIN_ITERATIONS:
        return UnacceptableCredentialError(
            f"{what}: Iterations {alteration.iterations} is less than the minimum "
            f"{MIN_ITERATIONS} required for {mechanism.mechanism_name}")
    if alteration.iterations > MAX_ITERATIONS:
        return UnacceptableCredentialError(
            f"{what}: Iterations {alteration.iterations} is more than the maximum "
            f"{MAX_ITERATIONS} allowed for {mechanism.mechanism_name}")
    return None


def upsertion(alteration: UserScramCredentialUpsertion) -> dict[str, Any]:
    """The upsertion as sent: a fresh salt and the salted password derived from it (the
    password itself never leaves the client). Costs `iterations` HMAC rounds."""
    mechanism = alteration.mechanism
    salt = new_salt()
    return {"name": alteration.user, "mechanism": int(mechanism),
            "iterations": alteration.iterations, "salt": salt,
            "salted_password": salted_password(mechanism.mechanism_name, alteration.password,
                                               salt, alteration.iterations)}


def deletion(alteration: UserScramCredentialDeletion) -> dict[str, Any]:
    return {"name": alteration.user, "mechanism": int(alteration.mechanism)}
