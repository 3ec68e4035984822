"""The authorizer: Kafka's StandardAuthorizer rules over the ACLs of the metadata image.

For a principal on a host asking for an operation on one resource:
- a super user (`super.users`) may do everything;
- otherwise the ACLs that apply to the resource (literal name, `*`, prefixes of the name)
  whose principal is the client's or `User:*` and whose host is the client's or `*` decide:
  a matching DENY wins over every ALLOW; an ALLOW of the operation (or of ALL; for DESCRIBE
  also of READ, WRITE, DELETE or ALTER; for DESCRIBE_CONFIGS also of ALTER_CONFIGS) allows;
- with no match: denied if the resource has any ACL at all (for anyone), else
  `allow.everyone.if.no.acl.found` decides.

Decisions are cached per (principal, host, operation, resource) until the ACLs change, so a
producer writing to the same topics costs one dictionary lookup per request and topic.
"""

from __future__ import annotations

from moldau.broker.security.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    operations_bits,
)
from moldau.broker.security.acl_index import AclIndex

_CACHE_LIMIT = 65536
_Key = tuple[str, str, Operation, ResourceType, str]


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(item.strip() for item in text.split(";") if item.strip())


def _allow_covers(granted: Operation, wanted: Operation) -> bool:
    if granted is wanted or granted is Operation.ALL:
        return True
    if wanted is Operation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if wanted is Operation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    enabled = True

    def __init__(self, acls: AclIndex, super_users: frozenset[str],
                 allow_if_no_acl: bool) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._cache: dict[_Key, bool] = {}
        self._cache_version = -1

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        if self._cache_version != self.acls.version:
            self._cache.clear()
            self._cache_version = self.acls.version
        key = (principal, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: Operation,
                resource_type: ResourceType, name: str) -> bool:
        has_acls = allowed = False
        for group in self.acls.applicable(resource_type, name):
            has_acls = True
            for acl in group:
                if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.host != host and acl.host != WILDCARD:
                    continue
                if acl.permission is Permission.DENY:
                    if acl.operation is operation or acl.operation is Operation.ALL:
                        return False
                elif not allowed and _allow_covers(acl.operation, operation):
                    allowed = True
        if allowed:
            return True
        return False if has_acls else self.allow_if_no_acl

    def authorize_by_type(self, principal: str, host: str, operation: Operation,
                          resource_type: ResourceType) -> bool:
        """Whether some resource of this type may be acted on (Kafka's
        authorizeByResourceType): an ALLOW of the operation, literal or prefixed, that no
        DENY of the same or a shorter prefix (or of that literal name) overrides."""
        # A name no ACL names: lets super users and allow.everyone.if.no.acl.found through.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(),
                                               PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(),
                                                PatternType.PREFIXED: set()}
        for acl in self.acls.of_type(resource_type):
            if acl.host not in (host, WILDCARD) or acl.principal not in (principal,
                                                                          WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, Operation.ALL):
                continue
            if acl.permission is Permission.DENY:
                if acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                denied[acl.pattern_type].add(acl.resource_name)
            elif acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            else:
                allowed[acl.pattern_type].add(acl.resource_name)
        for kind, names in allowed.items():
            for name in names:
                if kind is PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if not any(name[:length] in denied[PatternType.PREFIXED]
                           for length in range(1, len(name) + 1)):
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """The bit field of the supported operations this principal may perform."""
        return operations_bits(
            operation for operation in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, operation, resource_type, name))


class AllowEverything:
    """No `authorizer.class.name`: every authenticated client may do everything."""

    enabled = False

    def is_super_user(self, principal: str) -> bool:
        return True

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_by_type(self, principal: str, host: str, operation: Operation,
                          resource_type: ResourceType) -> bool:
        return True

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        return operations_bits(SUPPORTED_OPERATIONS[resource_type])
