"""KafkaUser objects read into what the cluster must hold (pure): the user's principal, its
ACLs as Kafka bindings, the Secret of a SCRAM user, and the status.

As Strimzi's User Operator: a SCRAM-SHA-512 user is `User:<name>`, a TLS user is
`User:CN=<name>` (its certificate's subject); each ACL rule of `spec.authorization.acls`
becomes one binding per operation; a user without `authorization` holds no ACLs.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moldau.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPatternType,
    AclPermissionType,
    AclResourceType,
)
from moldau.operator.conditions import condition, now

SCRAM = "scram-sha-512"
TLS = "tls"
KAFKA_CLUSTER = "kafka-cluster"  # the one cluster resource's name
RESOURCE_TYPES = {"topic": AclResourceType.TOPIC, "group": AclResourceType.GROUP,
                  "cluster": AclResourceType.CLUSTER,
                  "transactionalId": AclResourceType.TRANSACTIONAL_ID}
PATTERN_TYPES = {"literal": AclPatternType.LITERAL, "prefix": AclPatternType.PREFIXED}
OPERATIONS = {"Read": AclOperation.READ, "Write": AclOperation.WRITE,
              "Create": AclOperation.CREATE, "Delete": AclOperation.DELETE,
              "Alter": AclOperation.ALTER, "Describe": AclOperation.DESCRIBE,
              "ClusterAction": AclOperation.CLUSTER_ACTION,
              "AlterConfigs": AclOperation.ALTER_CONFIGS,
              "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
              "IdempotentWrite": AclOperation.IDEMPOTENT_WRITE, "All": AclOperation.ALL}
PERMISSIONS = {"allow": AclPermissionType.ALLOW, "deny": AclPermissionType.DENY}
PASSWORD_BYTES = 24


class UserSpecError(ValueError):
    """A KafkaUser the operator cannot run; the message says why."""


@dataclass(frozen=True)
class DesiredUser:
    name: str
    authentication: str  # scram-sha-512 | tls
    acls: frozenset[AclBinding]

    @property
    def principal(self) -> str:
        return f"User:CN={self.name}" if self.authentication == TLS else f"User:{self.name}"

    @property
    def username(self) -> str:
        return self.principal.removeprefix("User:")


def desired_user(body: Mapping[str, Any]) -> DesiredUser:
    name = body["metadata"]["name"]
    spec = body.get("spec") or {}
    authentication = (spec.get("authentication") or {}).get("type")
    if authentication not in (SCRAM, TLS):
        raise UserSpecError(f"spec.authentication.type must be {SCRAM} or {TLS}, "
                            f"not {authentication!r}")
    user = DesiredUser(name, authentication, frozenset())
    rules = (spec.get("authorization") or {}).get("acls") or []
    bindings = frozenset(binding for index, rule in enumerate(rules)
                         for binding in _bindings(user.principal, rule, index))
    return DesiredUser(name, authentication, bindings)


def _bindings(principal: str, rule: Mapping[str, Any], index: int) -> list[AclBinding]:
    where = f"spec.authorization.acls[{index}]"
    resource = rule.get("resource") or {}
    kind = RESOURCE_TYPES.get(resource.get("type"))
    if kind is None:
        raise UserSpecError(f"{where}.resource.type must be one of "
                            f"{', '.join(RESOURCE_TYPES)}, not {resource.get('type')!r}")
    if kind == AclResourceType.CLUSTER:
        name, pattern = KAFKA_CLUSTER, AclPatternType.LITERAL
    else:
        name = resource.get("name")
        if not name:
            raise UserSpecError(f"{where}.resource.name is missing")
        pattern = PATTERN_TYPES.get(resource.get("patternType", "literal"))
        if pattern is None:
            raise UserSpecError(f"{where}.resource.patternType must be literal or prefix")
    permission = PERMISSIONS.get(rule.get("type", "allow"))
    if permission is None:
        raise UserSpecError(f"{where}.type must be allow or deny")
    operations = rule.get("operations") or []
    unknown = [op for op in operations if op not in OPERATIONS]
    if unknown or not operations:
        raise UserSpecError(f"{where}.operations must be some of {', '.join(OPERATIONS)}"
                            + (f", not {', '.join(map(str, unknown))}" if unknown else ""))
    host = str(rule.get("host") or "*")
    return [AclBinding(kind, name, pattern, principal, host, OPERATIONS[op], permission)
            for op in operations]


def principal_filter(principal: str) -> AclBindingFilter:
    """Every ACL of one principal."""
    return AclBindingFilter(AclResourceType.ANY, None, AclPatternType.ANY, principal, None,
                            AclOperation.ANY, AclPermissionType.ANY)


def scram_secret(user: DesiredUser, existing: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """The SCRAM user's Secret: its password (kept once made) and the JAAS line Kafka's Java
    clients take as `sasl.jaas.config`."""
    password = (existing or {}).get("password") or \
        secrets.token_urlsafe(PASSWORD_BYTES).encode()
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user.name}" password="{password.decode()}";')
    return {"password": password, "sasl.jaas.config": jaas.encode()}


def user_status(user: DesiredUser | None, secret: str, ready: bool, reason: str,
                message: str, generation: int, previous: Mapping[str, Any]
                ) -> dict[str, Any]:
    return {"observedGeneration": generation,
            "username": user.username if user else None,
            "secret": secret if ready else previous.get("secret"),
            "conditions": [condition("Ready", ready, reason, message,
                                     previous.get("conditions") or [], now())]}
