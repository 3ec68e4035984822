"""Why a node's pod needs a restart ("why restart"), as Strimzi's RestartReasons: pure, from
what the pod runs against what its StatefulSet wants. The reasons are shown to the user in
Events and the status; when to act on them is roll_safety's and rolling's business."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moldau.operator.workloads import CONFIG_HASH_ANNOTATION

# On a pod, or on the KafkaCluster for all of its pods (Strimzi's
# strimzi.io/manual-rolling-update).
MANUAL_ROLLING_UPDATE = "moldau.io/manual-rolling-update"
REVISION_LABEL = "controller-revision-hash"
BROKER_CONTAINER = "kafka"

CONFIG_CHANGED = "ConfigChanged"
IMAGE_CHANGED = "ImageChanged"
POD_TEMPLATE_CHANGED = "PodTemplateChanged"
MANUAL = "ManualRollingUpdate"
FILE_SYSTEM_RESIZE = "FileSystemResizePending"

EXPLAINED = {
    CONFIG_CHANGED: "its config changed",
    IMAGE_CHANGED: "its image changed",
    POD_TEMPLATE_CHANGED: "its pod template changed",
    MANUAL: f"the {MANUAL_ROLLING_UPDATE} annotation asks for it",
    FILE_SYSTEM_RESIZE: "its grown volume waits for a restart to resize the file system",
}


@dataclass(frozen=True)
class PodFacts:
    """What a running pod is: the config hash and image it was started with, the
    StatefulSet revision it belongs to, and what is asked of it."""

    config_hash: str | None
    image: str | None
    revision: str | None
    manual: bool = False
    resize_pending: bool = False


@dataclass(frozen=True)
class Wanted:
    config_hash: str
    image: str
    revision: str | None = None  # the StatefulSet's update revision, once it has one


def restart_reasons(pod: PodFacts, wanted: Wanted) -> tuple[str, ...]:
    """Every reason the pod should restart, most specific first (empty: it is current).
    A config or image change also changes the pod template: the template reason is kept for
    changes neither explains (resources, env, affinity, ...)."""
    reasons = []
    if pod.config_hash != wanted.config_hash:
        reasons.append(CONFIG_CHANGED)
    if pod.image != wanted.image:
        reasons.append(IMAGE_CHANGED)
    if not reasons and wanted.revision is not None and pod.revision is not None \
            and pod.revision != wanted.revision:
        reasons.append(POD_TEMPLATE_CHANGED)
    if pod.manual:
        reasons.append(MANUAL)
    if pod.resize_pending:
        reasons.append(FILE_SYSTEM_RESIZE)
    return tuple(reasons)


def explain(reasons: tuple[str, ...]) -> str:
    return "; ".join(EXPLAINED.get(reason, reason) for reason in reasons)


def is_set(annotations: Mapping[str, Any] | None) -> bool:
    """The manual rolling update annotation, as Strimzi reads its own: "true"."""
    return str((annotations or {}).get(MANUAL_ROLLING_UPDATE, "")).lower() == "true"


def pod_facts(pod: Mapping[str, Any], resize_pending: bool = False) -> PodFacts:
    """The facts of a pod object (as a dict)."""
    meta = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    image = next((c.get("image") for c in containers if c.get("name") == BROKER_CONTAINER),
                 None)
    return PodFacts((meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION), image,
                    (meta.get("labels") or {}).get(REVISION_LABEL),
                    is_set(meta.get("annotations")), resize_pending)
