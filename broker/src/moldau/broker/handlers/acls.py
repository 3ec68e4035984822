"""DescribeAcls, CreateAcls and DeleteAcls (KIP-140, KIP-290), as `kafka-acls` uses them.

Creating and deleting need ALTER on the cluster and are the active controller's (forwarded
like the other admin changes); describing needs DESCRIBE on the cluster and is answered by any
broker from its metadata image. Without an authorizer all three answer SECURITY_DISABLED.
A request carrying an UNKNOWN (0) resource type, pattern type, operation or permission closes
the connection, as Kafka's request parser refuses it; other codes Kafka does not know are
refused per ACL or filter with INVALID_REQUEST. An ACL to create may not be a filter (type ANY,
pattern ANY or MATCH, operation or permission ANY): Kafka cannot even build it and fails the
whole request with UNKNOWN_SERVER_ERROR, and so does Moldau.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import cluster_allowed, needs
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.handlers")

NO_AUTHORIZER = "No Authorizer is configured."


def _has_unknown(*codes: int) -> bool:
    return 0 in codes


def _creation_check(body: Any) -> str | None:
    if any(_has_unknown(c.resource_type, c.resource_pattern_type, c.operation,
                        c.permission_type) for c in body.creations):
        return "the ACLs to create contain UNKNOWN elements"
    return None


def _filter_codes(item: Any) -> tuple[int, ...]:
    return (item.resource_type_filter, item.pattern_type_filter, item.operation,
            item.permission_type)


def _describe_check(body: Any) -> str | None:
    return "the filter contains UNKNOWN elements" if _has_unknown(*_filter_codes(body)) \
        else None


def _delete_check(body: Any) -> str | None:
    if any(_has_unknown(*_filter_codes(item)) for item in body.filters):
        return "the filters contain UNKNOWN elements"
    return None


def _filter_of(item: Any) -> AclFilter:
    return AclFilter(ResourceType.of(item.resource_type_filter), item.resource_name_filter,
                     PatternType.of(item.pattern_type_filter), item.principal_filter,
                     item.host_filter, Operation.of(item.operation),
                     Permission.of(item.permission_type))


def _acl_of(item: Any) -> Acl:
    return Acl(ResourceType.of(item.resource_type), item.resource_name,
               PatternType.of(item.resource_pattern_type), item.principal, item.host,
               Operation.of(item.operation), Permission.of(item.permission_type))


def _is_filter(acl: Acl) -> bool:
    return (acl.resource_type is ResourceType.ANY
            or acl.pattern_type in (PatternType.ANY, PatternType.MATCH)
            or acl.operation is Operation.ANY or acl.permission is Permission.ANY)


def _entry(acl: Acl) -> dict[str, Any]:
    return {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
            "permission_type": int(acl.permission)}


def _refusal(broker: Broker, request: Request, operation: Operation
             ) -> tuple[ErrorCode, str] | None:
    if not cluster_allowed(broker, request, operation):
        return ErrorCode.cluster_authorization_failed, needs(request, operation)
    if not broker.authorizer.enabled:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


@api(29, "DescribeAcls", 1, 3, check=_describe_check)
async def handle_describe_acls(broker: Broker, request: Request) -> Result:
    refusal = _refusal(broker, request, Operation.DESCRIBE)
    if refusal is not None:
        code, message = refusal
        if code is ErrorCode.security_disabled:
            message = "No Authorizer is configured on the broker"
        return respond(request, {"error_code": code, "error_message": message,
                                 "resources": []})
    wanted = _filter_of(request.body)
    by_resource: dict[tuple[ResourceType, str, PatternType], list[Acl]] = {}
    for acl in broker.image.acls:
        if wanted.matches(acl):
            key = (acl.resource_type, acl.resource_name, acl.pattern_type)
            by_resource.setdefault(key, []).append(acl)
    resources = [{"resource_type": int(kind), "resource_name": name,
                  "pattern_type": int(pattern),
                  "acls": [_entry(acl) for acl in sorted(set(acls), key=str)]}
                 for (kind, name, pattern), acls in sorted(by_resource.items())]
    return respond(request, {"error_code": ErrorCode.none, "error_message": None,
                             "resources": resources})


@api(30, "CreateAcls", 1, 3, check=_creation_check)
async def handle_create_acls(broker: Broker, request: Request) -> Result:
    creations = request.body.creations
    refusal = _refusal(broker, request, Operation.ALTER)
    if refusal is not None:
        code, message = refusal
        return respond(request, {"results": [{"error_code": code, "error_message": message}
                                             for _ in creations]})
    wanted = [_acl_of(item) for item in creations]
    if any(_is_filter(acl) for acl in wanted):
        log.warning("Refusing CreateAcls from %s: an ACL to create uses ANY or MATCH",
                    request.principal)
        return respond(request, {"results": [
            {"error_code": ErrorCode.unknown_server_error, "error_message": None}
            for _ in creations]})
    results: list[KafkaError | None] = []
    valid: list[Acl] = []
    for acl in wanted:
        if acl.resource_type is ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
            results.append(KafkaError(ErrorCode.invalid_request, "The only valid name for "
                                      f"the CLUSTER resource is {CLUSTER_NAME}"))
        elif not acl.resource_name:
            results.append(KafkaError(ErrorCode.invalid_request, "Invalid empty resource "
                                      "name"))
        else:
            results.append(None)
            valid.append(acl)
    try:
        created = iter(await broker.controller.create_acls(valid))
    except KafkaError as exc:
        created = iter([exc] * len(valid))
    outcome = [result if result is not None else next(created) for result in results]
    return respond(request, {"results": [
        {"error_code": error.code if error else ErrorCode.none,
         "error_message": error.message if error else None} for error in outcome]})


@api(31, "DeleteAcls", 1, 3, check=_delete_check)
async def handle_delete_acls(broker: Broker, request: Request) -> Result:
    filters = request.body.filters
    refusal = _refusal(broker, request, Operation.ALTER)
    if refusal is not None:
        code, message = refusal
        return respond(request, {"filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}
            for _ in filters]})
    wanted = [_filter_of(item) for item in filters]
    try:
        outcome = await broker.controller.delete_acls(wanted)
    except KafkaError as exc:
        outcome = [exc] * len(wanted)
    results = []
    for result in outcome:
        if isinstance(result, KafkaError):
            results.append({"error_code": result.code, "error_message": result.message,
                            "matching_acls": []})
            continue
        results.append({"error_code": ErrorCode.none, "error_message": None,
                        "matching_acls": [
                            {"error_code": ErrorCode.none, "error_message": None,
                             "resource_type": int(acl.resource_type),
                             "resource_name": acl.resource_name,
                             "pattern_type": int(acl.pattern_type), **_entry(acl)}
                            for acl in result]})
    return respond(request, {"filter_results": results})
