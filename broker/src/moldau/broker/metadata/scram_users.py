"""AlterUserScramCredentials checked as Kafka's controller checks it, into metadata records.

A request changes each user once (a second change of a user, for any mechanism, fails that
user with DUPLICATE_RESOURCE, as in Kafka); a refused change leaves other users unaffected.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from moldau.errors import ErrorCode, KafkaError
from moldau.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)


@dataclass(frozen=True)
class ScramChange:
    user: str
    mechanism: int
    # An upsertion carries these; a deletion does not.
    iterations: int | None = None
    salt: bytes = b""
    salted_password: bytes = b""


def _check(image: MetadataImage, change: ScramChange) -> None:
    if not change.user:
        raise KafkaError(ErrorCode.unacceptable_credential, "Username must not be empty")
    if change.mechanism not in MECHANISM_BY_TYPE:
        raise KafkaError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    if change.iterations is None:
        if (change.user, change.mechanism) not in image.scram:
            raise KafkaError(ErrorCode.resource_not_found,
                             "Attempt to delete a user credential that does not exist")
        return
    if change.iterations < MIN_ITERATIONS:
        raise KafkaError(ErrorCode.unacceptable_credential, "Too few iterations")
    if change.iterations > MAX_ITERATIONS:
        raise KafkaError(ErrorCode.unacceptable_credential, "Too many iterations")
    if not change.salt or not change.salted_password:
        raise KafkaError(ErrorCode.unacceptable_credential,
                         "Salt and salted password must not be empty")


def _record(change: ScramChange) -> MetadataRecord:
    if change.iterations is None:
        return RemoveUserScramCredentialRecord(change.user, change.mechanism)
    credential = credential_from_salted(MECHANISM_BY_TYPE[change.mechanism],
                                        change.salted_password, change.salt, change.iterations)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return UserScramCredentialRecord(change.user, change.mechanism, b64(credential.salt),
                                     b64(credential.stored_key), b64(credential.server_key),
                                     credential.iterations)


def plan_changes(image: MetadataImage, changes: Sequence[ScramChange]
                 ) -> tuple[dict[str, KafkaError | None], list[MetadataRecord]]:
    """Each user's outcome (None: done) and the records of the users that succeeded."""
    outcome: dict[str, KafkaError | None] = {}
    by_user: dict[str, list[MetadataRecord]] = {}
    for change in changes:
        if change.user in outcome:
            # Kafka takes one change per user and request, whatever the mechanisms.
            outcome[change.user] = KafkaError(ErrorCode.duplicate_resource, "A user "
                                              "credential cannot be altered twice in the "
                                              "same request")
            continue
        outcome[change.user] = None
        by_user[change.user] = []
        try:
            _check(image, change)
            by_user[change.user].append(_record(change))
        except KafkaError as exc:
            outcome[change.user] = exc
    records = [record for user, records in by_user.items() if outcome[user] is None
               for record in records]
    return outcome, records


def stored_credential(image: MetadataImage, user: str, mechanism: str
                      ) -> ScramCredential | None:
    """The credential a SCRAM exchange checks against, from the image."""
    wire = {name: wire for wire, name in MECHANISM_BY_TYPE.items()}.get(mechanism)
    record = image.scram.get((user, wire)) if wire is not None else None
    if record is None:
        return None
    return ScramCredential(base64.b64decode(record.salt), base64.b64decode(record.stored_key),
                           base64.b64decode(record.server_key), record.iterations)
