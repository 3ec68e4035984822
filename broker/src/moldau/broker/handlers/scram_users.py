"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM users as
`kafka-configs --entity-type users --add-config 'SCRAM-SHA-512=[password=...]'` manages them.
Alter is the controller's (forwarded like the other admin changes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import MESSAGES, cluster_allowed
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.scram_users import ScramChange
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(50, "DescribeUserScramCredentials", 0, 0)
async def handle_describe_user_scram_credentials(broker: Broker, request: Request) -> Result:
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        denied = ErrorCode.cluster_authorization_failed
        return respond(request, {"error_code": denied, "error_message": MESSAGES[denied],
                                 "results": [{"user": "", "error_code": denied,
                                              "error_message": MESSAGES[denied],
                                              "credential_infos": []}
                                             for _ in request.body.users or ()]})
    credentials: dict[str, list[dict[str, int]]] = {}
    for (user, mechanism), record in sorted(broker.image.scram.items()):
        credentials.setdefault(user, []).append({"mechanism": mechanism,
                                                 "iterations": record.iterations})
    wanted = request.body.users
    results: list[dict[str, Any]] = []
    if wanted is None or not wanted:  # null or empty: every user
        results = [{"user": user, "error_code": ErrorCode.none, "error_message": None,
                    "credential_infos": infos} for user, infos in credentials.items()]
    else:
        names = [item.name for item in wanted]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                                "error_message": "Cannot describe the same user more than "
                                                 "once", "credential_infos": []})
            elif name not in credentials:
                results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                                "error_message": "Attempt to describe a user credential "
                                                 "that does not exist",
                                "credential_infos": []})
            else:
                results.append({"user": name, "error_code": ErrorCode.none,
                                "error_message": None, "credential_infos": credentials[name]})
    return respond(request, {"error_code": ErrorCode.none, "error_message": None,
                             "results": results})


@api(51, "AlterUserScramCredentials", 0, 0)
async def handle_alter_user_scram_credentials(broker: Broker, request: Request) -> Result:
    body = request.body
    if not cluster_allowed(broker, request, Operation.ALTER):
        denied = ErrorCode.cluster_authorization_failed
        users = sorted({item.name for item in (*body.deletions, *body.upsertions)})
        return respond(request, {"results": [
            {"user": user, "error_code": denied, "error_message": MESSAGES[denied]}
            for user in users]})
    changes = [ScramChange(item.name, int(item.mechanism)) for item in body.deletions]
    changes += [ScramChange(item.name, int(item.mechanism), int(item.iterations),
                            bytes(item.salt), bytes(item.salted_password))
                for item in body.upsertions]
    try:
        outcome = await broker.controller.alter_user_scram_credentials(changes)
    except KafkaError as exc:
        outcome = {change.user: exc for change in changes}
    return respond(request, {"results": [
        {"user": user, "error_code": error.code if error else ErrorCode.none,
         "error_message": error.message if error else None}
        for user, error in outcome.items()]})
