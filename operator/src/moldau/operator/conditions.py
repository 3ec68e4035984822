"""Status conditions as Kubernetes shows them, and whether a newly composed status differs
from the one an object has (a settled object's status is not written again)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any


def now() -> str:
    """The current time as conditions write it (RFC 3339, UTC, whole seconds)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: bool, reason: str, message: str,
              previous: Sequence[Mapping[str, Any]], at: str) -> dict[str, Any]:
    """lastTransitionTime moves only when the status flips, so a settled object's status
    does not change."""
    text = "True" if status else "False"
    old = next((c for c in previous if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == text else at
    return {"type": kind, "status": text, "reason": reason, "message": message,
            "lastTransitionTime": since}


def status_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether merging `new` into `old` changes anything (None removes a field)."""
    return any(old.get(key) != value for key, value in new.items()
               if value is not None or key in old)
