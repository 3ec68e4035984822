"""CreateAcls and DeleteAcls decided as Kafka's controller decides them, into metadata records.

Each ACL gets a random id; an ACL that already exists (or comes twice in one request) is
reported created without a second record. A delete removes every ACL each filter matches, all
filters' removals committed together; more than MAX_DELETIONS fails the whole request.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from moldau.broker.metadata.records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
)
from moldau.broker.security.acl import (
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    new_acl_error,
)
from moldau.broker.security.acl_index import AclIndex
from moldau.errors import ErrorCode, KafkaError

MAX_DELETIONS = 10000


def acl_of(record: AccessControlEntryRecord) -> Acl:
    return Acl(ResourceType.of(record.resource_type), record.resource_name,
               PatternType.of(record.pattern_type), record.principal, record.host,
               Operation.of(record.operation), Permission.of(record.permission_type))


def record_of(acl_id: uuid.UUID, acl: Acl) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(acl_id, int(acl.resource_type), acl.resource_name,
                                    int(acl.pattern_type), acl.principal, acl.host,
                                    int(acl.operation), int(acl.permission))


def plan_creations(acls: AclIndex, wanted: Sequence[Acl]
                   ) -> tuple[list[KafkaError | None], list[MetadataRecord]]:
    """Each ACL's outcome (None: created or already there) and the records to commit."""
    outcome: list[KafkaError | None] = []
    records: list[MetadataRecord] = []
    adding: set[Acl] = set()
    for acl in wanted:
        problem = new_acl_error(acl)
        if problem is not None:
            outcome.append(KafkaError(ErrorCode.invalid_request, problem))
            continue
        outcome.append(None)
        if acl in acls or acl in adding:
            continue
        adding.add(acl)
        acl_id = uuid.uuid4()
        while acl_id in acls.by_id:
            acl_id = uuid.uuid4()
        records.append(record_of(acl_id, acl))
    return outcome, records


def plan_deletions(acls: AclIndex, filters: Sequence[AclFilter]
                   ) -> tuple[list[KafkaError | list[Acl]], list[MetadataRecord]]:
    """Per filter, the ACLs it removes (or why it was refused), and the records."""
    outcome: list[KafkaError | list[Acl]] = []
    removed: dict[uuid.UUID, MetadataRecord] = {}
    for wanted in filters:
        if wanted.unknown_pattern:
            outcome.append(KafkaError(ErrorCode.invalid_request, "Unknown patternFilter."))
            continue
        if wanted.unknown_entry:
            outcome.append(KafkaError(ErrorCode.invalid_request, "Unknown entryFilter."))
            continue
        matched = []
        for acl_id, acl in acls.by_id.items():
            if wanted.matches(acl):
                matched.append(acl)
                removed[acl_id] = RemoveAccessControlEntryRecord(acl_id)
        outcome.append(matched)
    if len(removed) > MAX_DELETIONS:
        error = KafkaError(ErrorCode.invalid_request, f"Cannot remove more than "
                           f"{MAX_DELETIONS} acls in a single delete operation.")
        return [error for _ in filters], []
    return outcome, list(removed.values())
