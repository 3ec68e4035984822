"""Authorization as the handlers ask for it (Kafka's AuthHelper): the request's principal and
host against the broker's authorizer, one resource or a set of names at a time.

A refusal of something the client named is logged at INFO as Kafka's authorizer logs it; one
found while filtering (the topics of an all-topics Metadata, the groups of ListGroups) is not.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from moldau.broker.handlers.registry import APIS
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.authorizer")

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

# Kafka's messages for its authorization errors, where a response carries one.
MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


def allowed(broker: Broker, request: Request, operation: Operation,
            resource_type: ResourceType, name: str, *, log_denied: bool = True) -> bool:
    if broker.authorizer.authorize(request.principal, request.host, operation,
                                   resource_type, name):
        return True
    if log_denied:
        entry = APIS.get(request.header.api_key)
        log.info("Principal = %s is Denied operation = %s from host = %s on resource = "
                 "%s:LITERAL:%s for request = %s", request.principal, operation.name,
                 request.host, resource_type.name.title().replace("_", ""), name,
                 entry.name if entry else request.header.api_key)
    return False


def cluster_allowed(broker: Broker, request: Request, operation: Operation, *,
                    log_denied: bool = True) -> bool:
    return allowed(broker, request, operation, CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def allowed_names(broker: Broker, request: Request, operation: Operation,
                  resource_type: ResourceType, names: Iterable[str], *,
                  log_denied: bool = True) -> set[str]:
    """The names (each once) on which the operation is allowed."""
    unique = set(names)
    if not broker.authorizer.enabled:
        return unique
    return {name for name in unique
            if allowed(broker, request, operation, resource_type, name, log_denied=log_denied)}


def needs(request: Request, operation: Operation) -> str:
    """Kafka's message when a request needs an operation on the cluster it may not do."""
    entry = APIS.get(request.header.api_key)
    name = entry.name if entry else str(request.header.api_key)
    return f"Request {name} needs {operation.name} permission."


def authorized_operations(broker: Broker, request: Request, resource_type: ResourceType,
                          name: str) -> int:
    return broker.authorizer.authorized_operations(request.principal, request.host,
                                                   resource_type, name)


def cluster_operations(broker: Broker, request: Request) -> int:
    """The cluster's authorized operations, or 0 without DESCRIBE on it (as Kafka answers)."""
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        return 0
    return authorized_operations(broker, request, CLUSTER, CLUSTER_NAME)
