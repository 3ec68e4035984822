"""Server-side apply of manifests with the operator's field manager, reporting which objects
it created or changed (an apply that changes nothing keeps the resourceVersion)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError

from moldau.operator.metrics import APPLIED
from moldau.operator.resource import FIELD_MANAGER

NOT_FOUND = 404


class ApplyError(Exception):
    """The API server refused an object; the message names it and gives the server's words."""


@dataclass(frozen=True)
class Change:
    action: str  # Created | Updated
    kind: str
    name: str


async def _resource_version(client: AsyncClient, obj: Any) -> str | None:
    try:
        current = await client.get(type(obj), obj.metadata.name,
                                   namespace=obj.metadata.namespace)
    except ApiError as exc:
        if exc.status.code == NOT_FOUND:
            return None
        raise
    return current.metadata.resourceVersion


async def apply_all(client: AsyncClient, manifests: Iterable[dict[str, Any]]) -> list[Change]:
    changes = []
    for manifest in manifests:
        obj = from_dict(manifest)
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        try:
            before = await _resource_version(client, obj)
            after = await client.apply(obj, field_manager=FIELD_MANAGER, force=True)
        except ApiError as exc:
            raise ApplyError(f"{kind} {name}: {exc.status.message}") from None
        APPLIED.labels(kind).inc()
        if before is None:
            changes.append(Change("Created", kind, name))
        elif after.metadata.resourceVersion != before:
            changes.append(Change("Updated", kind, name))
    return changes
