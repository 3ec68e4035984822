"""FindCoordinator request and response in every version: which broker coordinates a group
(key type 0) or a transactional id (key type 1). Used by the admin client now, and by the
consumer's group membership and the producer's transactions later."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from moldau.client.errors import error_for
from moldau.errors import ErrorCode


class CoordinatorType(IntEnum):
    GROUP = 0
    TRANSACTION = 1


# Errors after which the lookup (or the request sent to the coordinator) is retried.
COORDINATOR_ERRORS = frozenset({
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
})


def find_coordinator_request(key: str, key_type: CoordinatorType) -> dict[str, Any]:
    """Fits every version: v0-3 take `key`, v4+ take `coordinator_keys`."""
    return {"key": key, "key_type": int(key_type), "coordinator_keys": [key]}


def parse_find_coordinator(response: Any, key: str) -> tuple[ErrorCode, int, str | None]:
    """(error, node id, error message) for `key`."""
    coordinators = getattr(response, "coordinators", None)
    if coordinators is not None and not hasattr(response, "node_id"):
        for entry in coordinators:
            if entry.key == key:
                return ErrorCode(entry.error_code), entry.node_id, entry.error_message
        return ErrorCode.coordinator_not_available, -1, "no coordinator in the response"
    return (ErrorCode(response.error_code), response.node_id,
            getattr(response, "error_message", None))


def raise_for(code: ErrorCode, message: str | None) -> None:
    if code is not ErrorCode.none:
        raise error_for(code, message)


def coordinator_address(response: Any, key: str) -> tuple[str, int] | None:
    """The coordinator's host and port from a successful FindCoordinator response."""
    for entry in getattr(response, "coordinators", None) or ():
        if entry.key == key:
            return entry.host, entry.port
    host = getattr(response, "host", None)
    return (host, response.port) if host else None
