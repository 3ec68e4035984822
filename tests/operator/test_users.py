"""KafkaUser objects -> principal, ACL bindings, Secret and status (pure)."""

from __future__ import annotations

import pytest

from moldau.client.admin import (
    AclBinding,
    AclOperation,
    AclPatternType,
    AclPermissionType,
    AclResourceType,
)
from moldau.operator.users import (
    UserSpecError,
    desired_user,
    principal_filter,
    scram_secret,
    user_status,
)


def body(spec: dict, name: str = "alice") -> dict:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": "u1"}, "spec": spec}


ALICE = body({"authentication": {"type": "scram-sha-512"}, "authorization": {
    "type": "simple", "acls": [
        {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
        {"resource": {"type": "group", "name": "billing-", "patternType": "prefix"},
         "operations": ["Read"], "host": "10.0.0.1"},
        {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"], "type": "deny"},
        {"resource": {"type": "transactionalId", "name": "*"}, "operations": ["Write"]}]}})


def test_each_rule_becomes_one_binding_per_operation_for_the_users_principal() -> None:
    user = desired_user(ALICE)
    assert user.principal == "User:alice" and user.username == "alice"
    topic, group, cluster, txn = (AclResourceType.TOPIC, AclResourceType.GROUP,
                                  AclResourceType.CLUSTER, AclResourceType.TRANSACTIONAL_ID)
    literal, prefixed = AclPatternType.LITERAL, AclPatternType.PREFIXED
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    assert user.acls == {
        AclBinding(topic, "orders", literal, "User:alice", "*", AclOperation.READ, allow),
        AclBinding(topic, "orders", literal, "User:alice", "*", AclOperation.DESCRIBE, allow),
        AclBinding(group, "billing-", prefixed, "User:alice", "10.0.0.1", AclOperation.READ,
                   allow),
        AclBinding(cluster, "kafka-cluster", literal, "User:alice", "*",
                   AclOperation.IDEMPOTENT_WRITE, deny),
        AclBinding(txn, "*", literal, "User:alice", "*", AclOperation.WRITE, allow)}


def test_a_tls_user_is_its_certificates_subject_and_no_authorization_means_no_acls() -> None:
    user = desired_user(body({"authentication": {"type": "tls"}}, name="bob"))
    assert user.principal == "User:CN=bob" and user.username == "CN=bob"
    assert user.acls == frozenset()
    wanted = principal_filter(user.principal)
    assert wanted.principal == "User:CN=bob"
    assert wanted.resource_type == AclResourceType.ANY
    assert wanted.operation == AclOperation.ANY


@pytest.mark.parametrize(("spec", "message"), [
    ({}, "spec.authentication.type must be scram-sha-512 or tls, not None"),
    ({"authentication": {"type": "tls"}, "authorization": {"acls": [
        {"resource": {"type": "queue", "name": "x"}, "operations": ["Read"]}]}},
     "spec.authorization.acls[0].resource.type must be one of topic, group, cluster, "
     "transactionalId, not 'queue'"),
    ({"authentication": {"type": "tls"}, "authorization": {"acls": [
        {"resource": {"type": "topic"}, "operations": ["Read"]}]}},
     "spec.authorization.acls[0].resource.name is missing"),
    ({"authentication": {"type": "tls"}, "authorization": {"acls": [
        {"resource": {"type": "topic", "name": "t"}, "operations": ["Fly"]}]}},
     "not Fly"),
])
def test_rules_the_schema_would_refuse_get_a_one_line_reason(spec: dict, message: str) -> None:
    with pytest.raises(UserSpecError) as raised:
        desired_user(body(spec))
    assert message in str(raised.value)


def test_a_scram_users_password_is_made_once_and_kept() -> None:
    user = desired_user(ALICE)
    first = scram_secret(user, None)
    assert len(first["password"]) >= 32
    assert first["sasl.jaas.config"].decode() == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        f'username="alice" password="{first["password"].decode()}";')
    assert scram_secret(user, first) == first
    assert scram_secret(user, None)["password"] != first["password"]


def test_the_status_names_the_user_and_its_secret_once_ready() -> None:
    user = desired_user(ALICE)
    ready = user_status(user, "alice", True, "Ready", "principal User:alice", 3, {})
    assert ready["username"] == "alice" and ready["secret"] == "alice"
    assert ready["observedGeneration"] == 3
    assert ready["conditions"][0]["status"] == "True"
    failed = user_status(user, "alice", False, "ClusterNotFound", "gone", 4, {})
    assert failed["secret"] is None and failed["conditions"][0]["reason"] == "ClusterNotFound"
