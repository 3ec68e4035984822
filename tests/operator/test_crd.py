"""The KafkaCluster CRD, offline: a valid apiextensions/v1 object, a structural schema with a
description on every field, the contract's names, and validation where it belongs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from moldau.operator.resource import GROUP, KIND, PLURAL, SHORT_NAME, VERSION

KUBERNETES = "1.37.0"
KAFKACLUSTER_CRD = Path(__file__).resolve().parents[2] / "crds" / "moldau.io_kafkaclusters.yaml"


@pytest.fixture(scope="module")
def crd() -> dict:
    return yaml.safe_load(KAFKACLUSTER_CRD.read_text())


def schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def fields(node: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every named field under `node`, with its dotted path."""
    for name, child in (node.get("properties") or {}).items():
        yield f"{path}.{name}", child
        yield from fields(child, f"{path}.{name}")
    if "items" in node:
        yield from fields(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from fields(node["additionalProperties"], f"{path}{{}}")


def test_is_a_valid_custom_resource_definition(crd: dict) -> None:
    kubernetes_validate.validate(crd, KUBERNETES, strict=True)


def test_names_follow_the_contract(crd: dict) -> None:
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert (crd["spec"]["group"], names["kind"], names["plural"]) == (GROUP, KIND, PLURAL)
    assert names["shortNames"] == [SHORT_NAME]
    assert crd["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in crd["spec"]["versions"]] == [VERSION]


def test_every_field_has_a_type_and_a_description_for_kubectl_explain(crd: dict) -> None:
    missing = [path for path, node in fields(schema(crd))
               if path != ".metadata" and not node.get("description")]
    untyped = [path for path, node in fields(schema(crd))
               if "type" not in node and not node.get("x-kubernetes-int-or-string")]
    assert missing == []
    assert untyped == []


def test_status_is_a_subresource_with_the_printer_columns(crd: dict) -> None:
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Ready", "Controllers", "Bootstrap", "Phase", "Age"]


def test_roles_and_listener_types_are_enums_and_names_dns_labels(crd: dict) -> None:
    spec = schema(crd)["properties"]["spec"]["properties"]
    pool = spec["nodePools"]["items"]["properties"]
    assert spec["nodePools"]["minItems"] == 1
    assert pool["roles"]["items"]["enum"] == ["controller", "broker"]
    assert pool["replicas"]["minimum"] == 0
    assert pool["name"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    listener = spec["listeners"]["items"]["properties"]
    assert listener["type"]["enum"] == ["internal", "nodeport", "loadbalancer"]


def test_the_storage_class_and_roles_are_immutable_through_cel(crd: dict) -> None:
    pool = schema(crd)["properties"]["spec"]["properties"]["nodePools"]["items"]["properties"]
    rules = [v["rule"] for v in pool["storage"]["properties"]["storageClassName"]
             ["x-kubernetes-validations"]]
    assert rules == ["self == oldSelf"]
    assert [v["rule"] for v in pool["roles"]["x-kubernetes-validations"]] == ["self == oldSelf"]
