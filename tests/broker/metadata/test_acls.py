"""CreateAcls and DeleteAcls planned into metadata records as Kafka's controller plans them,
filters as DescribeAcls and DeleteAcls match them, and the ACLs kept through the log's JSON
encoding and a snapshot."""

from __future__ import annotations

from moldau.broker.metadata.acls import MAX_DELETIONS, plan_creations, plan_deletions
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import decode_records, encode_records
from moldau.broker.security.acl import (
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from moldau.errors import ErrorCode

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ANY_OP, ANY_PERM = Operation.ANY, Permission.ANY


def acl(name: str, kind: ResourceType = T, pattern: PatternType = LIT,
        principal: str = "User:alice", operation: Operation = Operation.READ,
        permission: Permission = Permission.ALLOW, host: str = "*") -> Acl:
    return Acl(kind, name, pattern, principal, host, operation, permission)


def apply(image: MetadataImage, records: list) -> None:
    for offset, record in enumerate(decode_records(encode_records(records)),
                                    start=image.offset + 1):
        image.apply(offset, record)


def every(kind: ResourceType = ResourceType.ANY, name: str | None = None,
          pattern: PatternType = PatternType.ANY, principal: str | None = None) -> AclFilter:
    return AclFilter(kind, name, pattern, principal, None, ANY_OP, ANY_PERM)


def test_creations_are_checked_one_by_one() -> None:
    image = MetadataImage()
    wanted = [acl("orders"), acl("x", kind=ResourceType.ANY), acl("x", pattern=PatternType.MATCH),
              acl("x", operation=Operation.ANY), acl("x", permission=Permission.ANY),
              acl(""), acl("x", principal="alice"), acl("orders"), acl("pay", pattern=PRE)]
    outcome, records = plan_creations(image.acls, wanted)
    messages = [error.message if error else None for error in outcome]
    assert messages == [None, "Invalid resourceType ANY", "Invalid patternType MATCH",
                        "Invalid operation ANY", "Invalid permissionType ANY",
                        "Resource name should not be empty",
                        "Could not parse principal from `alice` (no colon is present "
                        "separating the principal type from the principal name)", None, None]
    assert all(error.code is ErrorCode.invalid_request for error in outcome if error)
    assert len(records) == 2  # the duplicate in the request is one ACL
    apply(image, records)
    assert sorted(image.acls, key=str) == sorted([acl("orders"), acl("pay", pattern=PRE)],
                                                 key=str)
    # Creating an ACL that exists succeeds and writes nothing.
    outcome, records = plan_creations(image.acls, [acl("orders")])
    assert outcome == [None] and records == []


def test_filters_match_as_kafkas_do() -> None:
    wildcard, literal, prefixed = acl("*"), acl("payments"), acl("pay", pattern=PRE)
    group = acl("payments", kind=G)
    all_acls = [wildcard, literal, prefixed, group]

    def matched(wanted: AclFilter) -> list[Acl]:
        return [entry for entry in all_acls if wanted.matches(entry)]

    assert matched(every()) == all_acls
    assert matched(every(T, "payments", PatternType.MATCH)) == [wildcard, literal, prefixed]
    assert matched(every(T, "payments", PatternType.ANY)) == [literal]
    assert matched(every(T, "pay", PRE)) == [prefixed]
    assert matched(every(T, None, LIT)) == [wildcard, literal]
    assert matched(every(G)) == [group]
    assert matched(every(principal="User:bob")) == []
    by_operation = AclFilter(ResourceType.ANY, None, PatternType.ANY, None, "*",
                             Operation.WRITE, ANY_PERM)
    assert matched(by_operation) == []


def test_deletions_remove_what_each_filter_matches() -> None:
    image = MetadataImage()
    apply(image, plan_creations(image.acls, [acl("a"), acl("b"), acl("b", kind=G)])[1])
    unknown_pattern = AclFilter(ResourceType.UNKNOWN, None, PatternType.ANY, None, None,
                                ANY_OP, ANY_PERM)
    unknown_entry = AclFilter(T, None, PatternType.ANY, None, None, Operation.UNKNOWN,
                              ANY_PERM)
    outcome, records = plan_deletions(image.acls, [
        every(T, "a"), every(T), unknown_pattern, unknown_entry, every(T, "zzz")])
    assert outcome[0] == [acl("a")]
    assert sorted(outcome[1], key=str) == [acl("a"), acl("b")]  # both filters report "a"
    assert [error.message for error in outcome[2:4]] == ["Unknown patternFilter.",
                                                          "Unknown entryFilter."]
    assert outcome[4] == []
    assert len(records) == 2
    apply(image, records)
    assert list(image.acls) == [acl("b", kind=G)]


def test_too_many_deletions_fail_the_whole_request() -> None:
    image = MetadataImage()
    apply(image, plan_creations(image.acls, [acl(f"t{n}") for n in range(MAX_DELETIONS + 1)])[1])
    outcome, records = plan_deletions(image.acls, [every(T), every(G)])
    assert records == [] and all(error.code is ErrorCode.invalid_request for error in outcome)


def test_acls_survive_a_snapshot() -> None:
    image = MetadataImage()
    apply(image, plan_creations(image.acls, [acl("a"), acl("p", pattern=PRE),
                                             acl("g", kind=G, permission=Permission.DENY)])[1])
    rebuilt = MetadataImage()
    apply(rebuilt, image.to_records())
    assert rebuilt.acls.by_id == image.acls.by_id
    rebuilt.clear()
    assert len(rebuilt.acls) == 0
