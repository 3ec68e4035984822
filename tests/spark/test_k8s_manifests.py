"""The Kubernetes manifests of spark/k8s/, offline: each SparkApplication is valid against the
Kubeflow Spark operator's own v1beta2 schema (unknown fields refused, as the API server's
strict field validation refuses them), runs a job of spark/jobs/ with arguments that job
accepts, from the image build.sh makes, with its paths on mounted claims; the RBAC and the
claims are valid Kubernetes objects and fit together."""

from __future__ import annotations

import copy
import importlib.util
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import jsonschema
import kubernetes_validate
import pyspark
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "spark" / "k8s"
JOBS = REPO / "spark" / "jobs"
SCHEMA = Path(__file__).resolve().parent / "kubeflow" / "sparkapplication-v1beta2.schema.json"
KUBERNETES = "1.37.0"
# Where the image keeps the jobs (Dockerfile, target spark).
JOBS_IN_IMAGE = "local:///opt/spark/jobs/"


def strict(node: object) -> object:
    """The CRD's schema as the API server applies it, in JSON Schema terms: an object with
    declared properties takes no others (unless x-kubernetes-preserve-unknown-fields), and
    `nullable` admits null."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items()}
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = strict(json.loads(SCHEMA.read_text()))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def applications() -> Iterator[tuple[str, dict]]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in documents(path.name):
            if doc["kind"] == "SparkApplication":
                yield path.name, doc


APPLICATIONS = dict(applications())


def errors(validator: jsonschema.Draft202012Validator, app: dict) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(app))


def job_module(app: dict) -> ModuleType:
    main = app["spec"]["mainApplicationFile"]
    assert main.startswith(JOBS_IN_IMAGE), main
    path = JOBS / main.removeprefix(JOBS_IN_IMAGE)
    assert path.is_file(), f"{main}: no such job in spark/jobs/"
    spec = importlib.util.spec_from_file_location(f"job_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_job_has_an_application() -> None:
    started = {job_module(app).__file__ for app in APPLICATIONS.values()}
    assert started == {str(path) for path in JOBS.glob("*.py")}


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_the_application_is_valid_against_the_operators_schema(validator, name: str) -> None:
    app = APPLICATIONS[name]
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2",
                                               "SparkApplication")
    assert errors(validator, app) == []


def test_a_misspelled_or_wrong_field_is_refused(validator) -> None:
    app = APPLICATIONS["windowed-counts.yaml"]
    misspelled = copy.deepcopy(app)
    misspelled["spec"]["driver"]["memmory"] = misspelled["spec"]["driver"].pop("memory")
    assert errors(validator, misspelled) == [
        "spec.driver: Additional properties are not allowed ('memmory' was unexpected)"]
    top = copy.deepcopy(app)
    top["spec"]["mainApplicationFiles"] = top["spec"].pop("mainApplicationFile")
    assert errors(validator, top) == [
        "spec: 'mainApplicationFile' is a required property",
        "spec: Additional properties are not allowed ('mainApplicationFiles' was unexpected)"]
    wrong = copy.deepcopy(app)
    wrong["spec"]["type"] = "Pyton"
    wrong["spec"]["executor"]["instances"] = "1"
    claim = wrong["spec"]["volumes"][0]["persistentVolumeClaim"]
    claim["claimNam"] = claim.pop("claimName")
    assert errors(validator, wrong) == [
        "spec.executor.instances: '1' is not of type 'integer'",
        "spec.type: 'Pyton' is not one of ['Java', 'Python', 'Scala', 'R']",
        "spec.volumes.0.persistentVolumeClaim: 'claimName' is a required property",
        "spec.volumes.0.persistentVolumeClaim: Additional properties are not allowed "
        "('claimNam' was unexpected)"]


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_the_job_accepts_the_arguments(name: str) -> None:
    app = APPLICATIONS[name]
    job = job_module(app)
    args = job.parse_args(app["spec"]["arguments"])
    assert args.bootstrap_servers and args.checkpoint
    # Spelled out: argparse also takes an unambiguous prefix of an option.
    source = Path(job.__file__).read_text()
    for option in (arg for arg in app["spec"]["arguments"] if arg.startswith("--")):
        assert f'add_argument("{option}"' in source, f"{option} is not an option of the job"


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_runs_the_image_build_sh_makes_with_this_pyspark(name: str) -> None:
    spec = APPLICATIONS[name]["spec"]
    # build.sh tags images with the broker's version.
    version = tomllib.loads((REPO / "broker" / "pyproject.toml").read_text())["project"]["version"]
    assert spec["image"] == f"localhost/moldau-spark:{version}"
    assert (spec["type"], spec["pythonVersion"], spec["mode"]) == ("Python", "3", "cluster")
    assert spec["sparkVersion"] == pyspark.__version__


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_paths_are_on_claims_that_storage_yaml_makes(name: str) -> None:
    spec = APPLICATIONS[name]["spec"]
    claims = {doc["metadata"]["name"] for doc in documents("storage.yaml")}
    volumes = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]}
    assert set(volumes.values()) <= claims
    args = spec["arguments"]
    paths = [args[i + 1] for i, arg in enumerate(args) if arg in ("--checkpoint", "--path")]
    assert paths
    # The driver and the executors write the checkpoint (state) and the archive's files.
    for role in ("driver", "executor"):
        mounts = spec[role]["volumeMounts"]
        assert {m["name"] for m in mounts} <= set(volumes)
        for path in paths:
            assert any(path.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), \
                f"{role}: {path} is on no mounted claim"


def test_rbac_claims_and_pod_template_are_valid_kubernetes_objects() -> None:
    for name in ("rbac.yaml", "storage.yaml"):
        for doc in documents(name):
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    [template] = documents("pod-template.yaml")
    # Valid once Spark has added its container.
    template["spec"]["containers"] = [{"name": "spark-kubernetes-driver", "image": "x"}]
    kubernetes_validate.validate(template, KUBERNETES, strict=True)
    assert template["spec"]["securityContext"]["fsGroup"] == 185


def test_the_drivers_role_is_bound_to_the_service_account_the_applications_name() -> None:
    objects = {doc["kind"]: doc for doc in documents("rbac.yaml")}
    account = objects["ServiceAccount"]["metadata"]["name"]
    binding = objects["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    assert binding["roleRef"]["name"] == objects["Role"]["metadata"]["name"]
    [rule] = objects["Role"]["rules"]
    assert set(rule["resources"]) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert {"create", "get", "list", "watch", "delete"} <= set(rule["verbs"])
    for app in APPLICATIONS.values():
        assert app["spec"]["driver"]["serviceAccount"] == account
