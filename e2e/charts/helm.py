"""The Helm chart charts/moldau as the tests see it: helm from the test bed's cache (as
charts/helm.sh finds it), rendered objects, the chart's CRDs and the copies it ships."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import yaml

from e2e.kube.testbed import cache_dir

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "moldau"
HELM_TIMEOUT = 120.0


class HelmMissing(Exception):
    """No helm binary; the message names the make target that builds it."""


def helm_path() -> Path:
    helm = cache_dir() / "bin" / "helm"
    if not os.access(helm, os.X_OK):
        raise HelmMissing(f"{helm} is missing: run 'make kube-deps' (or 'make helm-deps')")
    return helm


def helm(*args: str, values: dict | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run helm; values (if any) go in as a values file on stdin (JSON is YAML)."""
    values_args = ["--values", "-"] if values is not None else []
    done = subprocess.run([str(helm_path()), *args, *values_args], capture_output=True,
                          text=True, timeout=HELM_TIMEOUT,
                          input=json.dumps(values) if values is not None else None)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def render(values: dict | None = None, *extra: str, chart: Path = CHART,
           namespace: str = "moldau-system") -> list[dict]:
    """`helm template` of the chart: every object it would install, CRDs included."""
    done = helm("template", "moldau", str(chart), "--namespace", namespace,
                "--include-crds", *extra, values=values)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_notes(values: dict | None = None, namespace: str = "moldau-system",
                 *, workdir: Path) -> str:
    """NOTES.txt as `helm install` prints it. `helm template` leaves NOTES out, so a copy of
    the chart renders the same text as the value of a one-key document."""
    chart = workdir / "moldau"
    shutil.copytree(CHART, chart)
    notes = chart / "templates" / "NOTES.txt"
    (chart / "templates" / "notes-as-yaml.yaml").write_text(
        '{{- define "notes-under-test" }}' + notes.read_text() + "{{- end }}\n"
        'notes: {{ include "notes-under-test" . | toJson }}\n')
    notes.unlink()
    done = helm("template", "moldau", str(chart), "--namespace", namespace,
                "--show-only", "templates/notes-as-yaml.yaml", values=values)
    return yaml.safe_load(done.stdout)["notes"]


def kinds(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def crd_schemas(objects: list[dict]) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema of each served version of the rendered CRDs."""
    schemas = {}
    for crd in kinds(objects, "CustomResourceDefinition"):
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def strict(schema: dict) -> dict:
    """A CRD's structural schema as `kubectl apply --validate=strict` applies it: a field the
    schema does not declare is an error (the API server would silently prune it)."""
    schema = dict(schema)
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        schema["items"] = strict(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = strict(schema["additionalProperties"])
    return schema


def validate_custom(obj: dict, schema: dict) -> None:
    """A custom object against its CRD's schema, strictly (the other x-kubernetes-* keywords
    and CEL rules are the API server's own and are left to it)."""
    root = strict(schema)
    root["properties"] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                          "metadata": {"type": "object"}, **root.get("properties", {})}
    jsonschema.Draft7Validator(root).validate(obj)


SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def check_metadata(obj: dict) -> None:
    """What the API server checks of names and labels, which the OpenAPI schemas do not."""
    metadata = obj["metadata"]
    name = metadata["name"]
    assert len(name) <= 253 and SUBDOMAIN.match(name), f"{obj['kind']}: bad name {name!r}"
    for key, value in metadata.get("labels", {}).items():
        assert LABEL_VALUE.match(value) and len(value) <= 63, \
            f"{obj['kind']} {name}: bad label value {key}={value!r}"
