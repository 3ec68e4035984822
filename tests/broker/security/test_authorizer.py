"""The authorizer's matching rules (Kafka's StandardAuthorizer): literal, wildcard and prefixed
resources, principals and hosts, DENY over ALLOW, the operations ALLOW implies, super users,
the no-ACL default, authorization by resource type and the authorized-operations bits; and the
index against a plain scan of every ACL."""

from __future__ import annotations

import random
import uuid

import pytest

from moldau.broker.security.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    WILDCARD,
    Acl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from moldau.broker.security.acl_index import AclIndex
from moldau.broker.security.authorizer import AllowEverything, Authorizer, parse_super_users

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation
ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(name: str, operation: Operation = Op.READ, permission: Permission = ALLOW, *,
        kind: ResourceType = TOPIC, pattern: PatternType = LITERAL,
        principal: str = ALICE, host: str = WILDCARD) -> Acl:
    return Acl(kind, name, pattern, principal, host, operation, permission)


def authorizer(*acls: Acl, super_users: str = "", allow_if_no_acl: bool = False
               ) -> Authorizer:
    index = AclIndex()
    for entry in acls:
        index.add(uuid.uuid4(), entry)
    return Authorizer(index, parse_super_users(super_users), allow_if_no_acl)


def may(auth: Authorizer, operation: Operation, name: str, *, kind: ResourceType = TOPIC,
        principal: str = ALICE, host: str = HOST) -> bool:
    return auth.authorize(principal, host, operation, kind, name)


def test_literal_acl_names_one_resource_of_one_type() -> None:
    auth = authorizer(acl("orders"))
    assert may(auth, Op.READ, "orders")
    assert not may(auth, Op.READ, "orders2")
    assert not may(auth, Op.READ, "order")
    assert not may(auth, Op.READ, "orders", kind=GROUP)
    assert not may(auth, Op.WRITE, "orders")


def test_wildcard_literal_matches_every_name() -> None:
    auth = authorizer(acl(WILDCARD, Op.WRITE))
    assert may(auth, Op.WRITE, "anything") and may(auth, Op.WRITE, "*")
    assert not may(auth, Op.WRITE, "anything", kind=GROUP)


def test_prefixed_acl_matches_names_starting_with_it() -> None:
    auth = authorizer(acl("pay", pattern=PREFIXED), acl("payments-eu", Op.WRITE,
                                                        pattern=PREFIXED))
    assert may(auth, Op.READ, "pay") and may(auth, Op.READ, "payments")
    assert not may(auth, Op.READ, "pa") and not may(auth, Op.READ, "xpay")
    assert may(auth, Op.WRITE, "payments-eu-1") and not may(auth, Op.WRITE, "payments-us")


def test_a_literal_acl_is_not_a_prefix() -> None:
    auth = authorizer(acl("pay"))
    assert not may(auth, Op.READ, "payments")


def test_deny_wins_over_allow_wherever_it_comes_from() -> None:
    # Literal allow, prefixed deny.
    auth = authorizer(acl("payments"), acl("pay", permission=DENY, pattern=PREFIXED))
    assert not may(auth, Op.READ, "payments")
    # Prefixed allow, literal deny; wildcard deny over a literal allow.
    auth = authorizer(acl("pay", pattern=PREFIXED), acl("payments", permission=DENY))
    assert may(auth, Op.READ, "pay-1") and not may(auth, Op.READ, "payments")
    auth = authorizer(acl("payments"), acl(WILDCARD, permission=DENY, principal="User:*"))
    assert not may(auth, Op.READ, "payments")
    # A DENY of ALL denies every operation; ALLOW of ALL allows every one.
    auth = authorizer(acl("t", Op.ALL), acl("t", Op.ALL, DENY, principal=BOB))
    assert may(auth, Op.ALTER_CONFIGS, "t") and not may(auth, Op.READ, "t", principal=BOB)


def test_principal_and_host_must_match() -> None:
    auth = authorizer(acl("t", principal="User:*", host="10.0.0.1"), acl("u", principal=BOB))
    assert may(auth, Op.READ, "t", principal=BOB, host="10.0.0.1")
    assert not may(auth, Op.READ, "t", principal=BOB, host="10.0.0.2")
    assert may(auth, Op.READ, "u", principal=BOB) and not may(auth, Op.READ, "u")
    # A deny from one host only.
    auth = authorizer(acl("t"), acl("t", permission=DENY, host="10.0.0.9"))
    assert may(auth, Op.READ, "t", host="10.0.0.8")
    assert not may(auth, Op.READ, "t", host="10.0.0.9")


@pytest.mark.parametrize("granted", list(Op)[2:])
def test_allow_implies_describe_and_describe_configs_as_kafka_does(granted: Operation) -> None:
    auth = authorizer(acl("t", granted))
    assert may(auth, Op.DESCRIBE, "t") == (granted in IMPLIES_DESCRIBE or granted is Op.ALL)
    assert may(auth, Op.DESCRIBE_CONFIGS, "t") == (
        granted in IMPLIES_DESCRIBE_CONFIGS or granted is Op.ALL)
    assert may(auth, Op.READ, "t") == (granted in (Op.READ, Op.ALL))


def test_a_deny_implies_nothing_beyond_its_operation() -> None:
    auth = authorizer(acl("t", Op.ALL), acl("t", Op.READ, DENY), acl("t", Op.ALTER_CONFIGS, DENY))
    assert not may(auth, Op.READ, "t") and not may(auth, Op.ALTER_CONFIGS, "t")
    assert may(auth, Op.DESCRIBE, "t") and may(auth, Op.DESCRIBE_CONFIGS, "t")


def test_no_acl_at_all_falls_back_to_allow_everyone_if_no_acl_found() -> None:
    assert not may(authorizer(), Op.READ, "t")
    assert may(authorizer(allow_if_no_acl=True), Op.READ, "t")
    # Any ACL on the resource, even for someone else, turns the default off for it.
    auth = authorizer(acl("t", principal=BOB), acl("p", Op.WRITE, pattern=PREFIXED,
                                                   principal=BOB), allow_if_no_acl=True)
    assert not may(auth, Op.READ, "t") and not may(auth, Op.READ, "px")
    assert may(auth, Op.READ, "other")


def test_super_users_may_do_everything_despite_denies() -> None:
    auth = authorizer(acl(WILDCARD, Op.ALL, DENY, principal="User:*"),
                      super_users=" User:admin ; User:broker;")
    assert auth.super_users == {"User:admin", "User:broker"}
    assert may(auth, Op.ALTER, "kafka-cluster", kind=CLUSTER, principal="User:broker")
    assert may(auth, Op.DELETE, "t", principal="User:admin")
    assert not may(auth, Op.DESCRIBE, "t")


def test_decisions_follow_acl_changes() -> None:
    index = AclIndex()
    auth = Authorizer(index, frozenset(), False)
    assert not may(auth, Op.READ, "t")
    allow, deny = uuid.uuid4(), uuid.uuid4()
    index.add(allow, acl("t", pattern=PREFIXED))
    assert may(auth, Op.READ, "t") and may(auth, Op.READ, "t2")
    index.add(deny, acl("t2", permission=DENY))
    assert not may(auth, Op.READ, "t2") and may(auth, Op.READ, "t")
    assert index.remove(deny) == acl("t2", permission=DENY)
    assert may(auth, Op.READ, "t2")
    index.remove(allow)
    assert not may(auth, Op.READ, "t") and len(index) == 0
    assert index.remove(allow) is None


def test_authorize_by_type_as_idempotent_producers_need_it() -> None:
    def by_type(auth: Authorizer) -> bool:
        return auth.authorize_by_type(ALICE, HOST, Op.WRITE, TOPIC)

    assert not by_type(authorizer())
    assert by_type(authorizer(allow_if_no_acl=True))
    assert by_type(authorizer(acl("t", Op.WRITE)))
    assert by_type(authorizer(acl("t", Op.ALL)))
    assert not by_type(authorizer(acl("t", Op.READ)))
    assert not by_type(authorizer(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)))
    assert not by_type(authorizer(acl("tx", Op.WRITE, pattern=PREFIXED),
                                  acl("t", Op.WRITE, DENY, pattern=PREFIXED)))
    assert by_type(authorizer(acl("tx", Op.WRITE, pattern=PREFIXED),
                              acl("txy", Op.WRITE, DENY, pattern=PREFIXED)))
    assert not by_type(authorizer(acl("t", Op.WRITE), acl(WILDCARD, Op.WRITE, DENY)))
    assert by_type(authorizer(acl(WILDCARD, Op.WRITE), acl("t", Op.WRITE, DENY)))
    assert not by_type(authorizer(acl("t", Op.WRITE, host="10.1.1.1")))
    assert by_type(authorizer(acl(WILDCARD, Op.READ), super_users="User:alice"))


def test_authorized_operations_bits() -> None:
    auth = authorizer(acl("t", Op.WRITE), acl("t", Op.ALTER_CONFIGS), acl("t", Op.DELETE, DENY))
    bits = auth.authorized_operations(ALICE, HOST, TOPIC, "t")
    assert bits == (1 << Op.WRITE) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) \
        | (1 << Op.DESCRIBE_CONFIGS)
    everything = AllowEverything().authorized_operations(ALICE, HOST, GROUP, "g")
    assert everything == sum(1 << op for op in (Op.READ, Op.DESCRIBE, Op.DELETE,
                                                Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))


def _scan(acls: list[Acl], allow_if_no_acl: bool, principal: str, host: str,
          operation: Operation, kind: ResourceType, name: str) -> bool:
    """Kafka's rules applied to every ACL, with no index: the reference."""
    applies = [a for a in acls if a.resource_type is kind and (
        (a.pattern_type is LITERAL and a.resource_name in (name, WILDCARD))
        or (a.pattern_type is PREFIXED and name.startswith(a.resource_name)))]
    if not applies:
        return allow_if_no_acl
    mine = [a for a in applies if a.principal in (principal, "User:*")
            and a.host in (host, WILDCARD)]
    if any(a.permission is DENY and a.operation in (operation, Op.ALL) for a in mine):
        return False
    implied = {Op.DESCRIBE: IMPLIES_DESCRIBE,
               Op.DESCRIBE_CONFIGS: IMPLIES_DESCRIBE_CONFIGS}.get(operation, frozenset())
    return any(a.permission is ALLOW and (a.operation in (operation, Op.ALL)
                                          or a.operation in implied) for a in mine)


def test_index_decides_as_a_scan_of_every_acl() -> None:
    rng = random.Random(7)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "abcde", "x"]
    principals = [ALICE, BOB, "User:*"]
    operations = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER, Op.DESCRIBE_CONFIGS,
                  Op.ALTER_CONFIGS]
    for round_ in range(60):
        acls = [Acl(rng.choice([TOPIC, GROUP]), rng.choice(names),
                    rng.choice([LITERAL, PREFIXED]), rng.choice(principals),
                    rng.choice([WILDCARD, HOST, "10.0.0.1"]), rng.choice(operations),
                    rng.choice([ALLOW, ALLOW, DENY])) for _ in range(rng.randint(0, 12))]
        index = AclIndex()
        ids = [uuid.uuid4() for _ in acls]
        for acl_id, entry in zip(ids, acls, strict=True):
            index.add(acl_id, entry)
        # Remove some again: the index must forget them exactly.
        for acl_id in ids[::3]:
            index.remove(acl_id)
        kept = [entry for position, entry in enumerate(acls) if position % 3]
        default = round_ % 2 == 0
        auth = Authorizer(index, frozenset(), default)
        for _ in range(80):
            query = (rng.choice([ALICE, BOB]), rng.choice([HOST, "10.0.0.1"]),
                     rng.choice(operations[:3] + [Op.DESCRIBE_CONFIGS, Op.ALTER]),
                     rng.choice([TOPIC, GROUP]), rng.choice(names + ["abcdef", "zz"]))
            assert auth.authorize(*query) == _scan(kept, default, *query), (kept, query)
