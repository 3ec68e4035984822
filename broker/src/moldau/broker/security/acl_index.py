"""The ACLs of the metadata image, indexed for the authorizer.

An authorization looks up only the ACLs that can apply to one resource: the literal ACLs of
its name, the wildcard (`*`) ACLs of its type, and the prefixed ACLs whose prefix begins its
name. Prefixed ACLs are kept by resource type and prefix length, so a name is checked with
one dictionary lookup per distinct prefix length in use, however many ACLs there are.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from moldau.broker.security.acl import WILDCARD, Acl, PatternType, ResourceType


class AclIndex:
    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, Acl] = {}
        self._count: dict[Acl, int] = {}  # how many ids hold an ACL (normally one)
        self._literal: dict[tuple[ResourceType, str], list[Acl]] = {}
        # resource type -> prefix length -> prefix -> ACLs
        self._prefixed: dict[ResourceType, dict[int, dict[str, list[Acl]]]] = {}
        # resource type -> the prefix lengths in use, shortest first
        self._lengths: dict[ResourceType, tuple[int, ...]] = {}
        # Moves with every change, so that cached decisions can tell they are stale.
        self.version = 0

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self) -> Iterator[Acl]:
        return iter(self.by_id.values())

    def __contains__(self, acl: Acl) -> bool:
        return acl in self._count

    def add(self, acl_id: uuid.UUID, acl: Acl) -> None:
        if acl_id in self.by_id:
            self.remove(acl_id)
        self.by_id[acl_id] = acl
        self._count[acl] = self._count.get(acl, 0) + 1
        self._bucket(acl).append(acl)
        self.version += 1

    def remove(self, acl_id: uuid.UUID) -> Acl | None:
        acl = self.by_id.pop(acl_id, None)
        if acl is None:
            return None
        left = self._count[acl] - 1
        if left:
            self._count[acl] = left
        else:
            del self._count[acl]
        bucket = self._bucket(acl)
        bucket.remove(acl)
        if not bucket:
            self._drop_bucket(acl)
        self.version += 1
        return acl

    def clear(self) -> None:
        self.by_id.clear()
        self._count.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._lengths.clear()
        self.version += 1

    def applicable(self, resource_type: ResourceType, name: str) -> Iterator[list[Acl]]:
        """The groups of ACLs that may apply to the resource `name` of this type: its
        literal ACLs, the prefixed ones whose prefix starts `name`, and the wildcard ones."""
        literal = self._literal.get((resource_type, name))
        if literal:
            yield literal
        lengths = self._lengths.get(resource_type)
        if lengths:
            by_length = self._prefixed[resource_type]
            for length in lengths:
                if length > len(name):
                    break
                prefixed = by_length[length].get(name[:length])
                if prefixed:
                    yield prefixed
        if name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard:
                yield wildcard

    def of_type(self, resource_type: ResourceType) -> Iterator[Acl]:
        for acl in self.by_id.values():
            if acl.resource_type is resource_type:
                yield acl

    def _bucket(self, acl: Acl) -> list[Acl]:
        if acl.pattern_type is PatternType.PREFIXED:
            by_length = self._prefixed.setdefault(acl.resource_type, {})
            length = len(acl.resource_name)
            if length not in by_length:
                by_length[length] = {}
                self._lengths[acl.resource_type] = tuple(sorted(by_length))
            return by_length[length].setdefault(acl.resource_name, [])
        return self._literal.setdefault((acl.resource_type, acl.resource_name), [])

    def _drop_bucket(self, acl: Acl) -> None:
        if acl.pattern_type is not PatternType.PREFIXED:
            del self._literal[(acl.resource_type, acl.resource_name)]
            return
        by_length = self._prefixed[acl.resource_type]
        length = len(acl.resource_name)
        del by_length[length][acl.resource_name]
        if by_length[length]:
            return
        del by_length[length]
        if by_length:
            self._lengths[acl.resource_type] = tuple(sorted(by_length))
        else:
            del self._prefixed[acl.resource_type]
            del self._lengths[acl.resource_type]
