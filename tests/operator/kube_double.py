"""A stand-in for the Kubernetes API (the calls reconcile.py makes through lightkube), whose
StatefulSet pods are real broker processes of a LocalCluster: a pod exists while its node
runs, deleting a pod restarts its node, shrinking a StatefulSet stops nodes. It keeps what a
test needs to check (the order pods restarted in) and refuses what Kubernetes refuses (a
StatefulSet's claim template cannot change). The operator's end-to-end tests run against a
real Kubernetes (e2e/kube); this double lets the reconcile pipeline run in the fast suite."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.types import CascadeType

from moldau.cluster import LocalCluster

Obj = dict[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(code: int, message: str) -> ApiError:
    return ApiError(status=Status(code=code, message=message))


def _merge(target: Obj, patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = json.loads(json.dumps(value))


def _content(obj: Obj) -> Obj:
    """An object without what the server keeps to itself."""
    found = json.loads(json.dumps(obj))
    found.pop("status", None)
    for key in ("resourceVersion", "generation"):
        found["metadata"].pop(key, None)
    return found


def _revision(sts: Obj) -> str:
    template = json.dumps(sts["spec"]["template"], sort_keys=True)
    return f"{sts['metadata']['name']}-{hashlib.sha256(template.encode()).hexdigest()[:10]}"


class KubeDouble:
    def __init__(self, cluster: LocalCluster, node_of: Callable[[str], int],
                 namespace: str = "ns") -> None:
        self.cluster = cluster
        self.node_of = node_of  # pod name -> LocalCluster node id
        self.namespace = namespace
        self.objects: dict[tuple[str, str], Obj] = {}
        self.version = 0
        self.restarted: list[str] = []  # pods deleted by the operator, in order
        self.deleted: set[str] = set()

    # ---------------------------------------------------------------- the API calls

    async def list(self, res: Any, *, namespace: str | None = None,
                   labels: Mapping[str, str] | None = None, **_: Any) -> AsyncIterator[Any]:
        for (kind, _name), obj in sorted(self.objects.items()):
            found = obj["metadata"].get("labels") or {}
            if kind == res.__name__ and all(found.get(k) == v for k, v in (labels or {}).items()):
                yield res.from_dict(json.loads(json.dumps(obj)))

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        obj = self.objects.get((res.__name__, name))
        if obj is None:
            raise _error(404, f'{res.__name__.lower()}s "{name}" not found')
        return res.from_dict(json.loads(json.dumps(obj)))

    async def apply(self, obj: Any, *, field_manager: str | None = None, force: bool = False
                    ) -> Any:
        new = obj.to_dict()
        kind, name = new["kind"], new["metadata"]["name"]
        old = self.objects.get((kind, name))
        if kind == "StatefulSet" and old is not None and \
                old["spec"]["volumeClaimTemplates"] != new["spec"]["volumeClaimTemplates"]:
            raise _error(422, f'StatefulSet.apps "{name}" is invalid: spec: Forbidden: updates '
                              "to statefulset spec for fields other than 'replicas', 'ordinals', "
                              "'template', 'updateStrategy', "
                              "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are "
                              "forbidden")
        if old is not None and _content(old) == _content(new):
            return type(obj).from_dict(json.loads(json.dumps(old)))
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        if kind == "StatefulSet":
            generation = (old or {}).get("metadata", {}).get("generation", 0) + 1
            new["metadata"]["generation"] = generation
            new["status"] = {"observedGeneration": generation, "updateRevision": _revision(new),
                             "replicas": new["spec"]["replicas"]}
        self.objects[(kind, name)] = new
        return type(obj).from_dict(json.loads(json.dumps(new)))

    async def patch(self, res: Any, name: str, obj: Mapping[str, Any], *,
                    namespace: str | None = None, **_: Any) -> Any:
        found = self.objects.get((res.__name__, name))
        if found is None:
            raise _error(404, f'{res.__name__.lower()}s "{name}" not found')
        _merge(found, obj)
        return res.from_dict(json.loads(json.dumps(found)))

    async def delete(self, res: Any, name: str, *, namespace: str | None = None,
                     cascade: CascadeType | None = None, **_: Any) -> None:
        key = (res.__name__, name)
        if key not in self.objects:
            raise _error(404, f'{res.__name__.lower()}s "{name}" not found')
        if res.__name__ == "Pod":
            self.restarted.append(name)
            self.deleted.add(name)
            return  # the node restarts in settle(), as a StatefulSet would replace the pod
        if res.__name__ == "StatefulSet":
            assert cascade == CascadeType.ORPHAN, "only orphaning deletes keep the pods"
        del self.objects[key]

    # ---------------------------------------------------------------- what Kubernetes does

    def pods(self) -> dict[str, Obj]:
        return {name: obj for (kind, name), obj in self.objects.items() if kind == "Pod"}

    def settle(self) -> None:
        """What the StatefulSet controller and kubelet would do by now: replace deleted pods
        (restarting their nodes), make pods for new ordinals (starting their nodes), remove
        pods past a StatefulSet's size (stopping their nodes)."""
        for (kind, _), sts in list(self.objects.items()):
            if kind != "StatefulSet":
                continue
            name, replicas = sts["metadata"]["name"], sts["spec"]["replicas"]
            for pod in [p for p in self.pods() if p.rsplit("-", 1)[0] == name]:
                if int(pod.rsplit("-", 1)[1]) >= replicas:
                    self.cluster.stop_node(self.node_of(pod))
                    del self.objects[("Pod", pod)]
            for ordinal in range(replicas):
                pod = f"{name}-{ordinal}"
                if pod in self.deleted:
                    self.deleted.discard(pod)
                    self.cluster.restart(self.node_of(pod))
                    self._make_pod(sts, pod)
                elif ("Pod", pod) not in self.objects:
                    node = self.cluster.node(self.node_of(pod))
                    if not node.alive:
                        self.cluster.start_node(node.node_id)
                    self._make_pod(sts, pod)

    def _make_pod(self, sts: Obj, name: str) -> None:
        template = sts["spec"]["template"]
        labels = {**template["metadata"].get("labels", {}),
                  "controller-revision-hash": _revision(sts),
                  "statefulset.kubernetes.io/pod-name": name}
        self.objects[("Pod", name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels,
                         "annotations": dict(template["metadata"].get("annotations", {})),
                         "creationTimestamp": _now()},
            "spec": json.loads(json.dumps(template["spec"])),
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": _now()}]}}
        claim = f"data-{name}"
        if ("PersistentVolumeClaim", claim) not in self.objects:
            size = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
            self.objects[("PersistentVolumeClaim", claim)] = {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": self.namespace,
                             "labels": dict(sts["spec"]["selector"]["matchLabels"])},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": dict(size)}}}
