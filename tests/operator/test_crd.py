"""The CRDs (KafkaCluster, Topic, KafkaUser), offline: valid apiextensions/v1 objects, structural
schemas with a description on every field, the contract's names, and validation where it
belongs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from moldau.operator.resource import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    TOPIC_KIND,
    TOPIC_PLURAL,
    TOPIC_SHORT_NAME,
    USER_KIND,
    USER_PLURAL,
    USER_SHORT_NAME,
    VERSION,
)

KUBERNETES = "1.37.0"
CRDS = Path(__file__).resolve().parents[2] / "crds"
# (kind, plural, short name) of each CRD file.
CONTRACT = {"moldau.io_kafkaclusters.yaml": (KIND, PLURAL, SHORT_NAME),
            "moldau.io_topics.yaml": (TOPIC_KIND, TOPIC_PLURAL, TOPIC_SHORT_NAME),
            "moldau.io_kafkausers.yaml": (USER_KIND, USER_PLURAL, USER_SHORT_NAME)}


def load(name: str) -> dict:
    return yaml.safe_load((CRDS / name).read_text())


@pytest.fixture(scope="module")
def crd() -> dict:
    return load("moldau.io_kafkaclusters.yaml")


@pytest.fixture(scope="module")
def topic_crd() -> dict:
    return load("moldau.io_topics.yaml")


@pytest.fixture(params=sorted(CONTRACT))
def any_crd(request: pytest.FixtureRequest) -> tuple[str, dict]:
    return request.param, load(request.param)


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


def test_every_crd_file_is_in_the_contract() -> None:
    assert sorted(path.name for path in CRDS.glob("*.yaml")) == sorted(CONTRACT)


def test_is_a_valid_custom_resource_definition(any_crd: tuple[str, dict]) -> None:
    kubernetes_validate.validate(any_crd[1], KUBERNETES, strict=True)


def test_names_follow_the_contract(any_crd: tuple[str, dict]) -> None:
    file, crd = any_crd
    kind, plural, short = CONTRACT[file]
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    assert (crd["spec"]["group"], names["kind"], names["plural"]) == (GROUP, kind, plural)
    assert names["shortNames"] == [short]
    assert names["categories"] == ["moldau"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in crd["spec"]["versions"]] == [VERSION]


def test_every_field_has_a_type_and_a_description_for_kubectl_explain(
        any_crd: tuple[str, dict]) -> None:
    crd = any_crd[1]
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


def test_topic_status_is_a_subresource_with_strimzis_columns(topic_crd: dict) -> None:
    version = topic_crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c.get("jsonPath") for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Cluster": ".metadata.labels.moldau\\.io/cluster", "Topic": ".status.topicName",
        "Partitions": ".status.partitions", "Replicas": ".status.replicas",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Age": ".metadata.creationTimestamp"}


def test_topic_spec_is_checked_as_kafka_checks_it(topic_crd: dict) -> None:
    spec = schema(topic_crd)["properties"]["spec"]["properties"]
    assert set(spec) == {"topicName", "partitions", "replicas", "config"}
    assert spec["topicName"]["pattern"] == "^[a-zA-Z0-9._-]+$"
    assert spec["topicName"]["maxLength"] == 249
    assert (spec["partitions"]["minimum"], spec["replicas"]["minimum"]) == (1, 1)
    assert spec["config"]["additionalProperties"] == {"x-kubernetes-int-or-string": True}
    # The topic a resource names never changes (the object's name when spec has none).
    [rule] = schema(topic_crd)["x-kubernetes-validations"]
    assert "oldSelf.metadata.name" in rule["rule"] and "self.spec.topicName" in rule["rule"]


def test_storage_only_grows_and_rebalancing_on_scale_is_on_by_default(crd: dict) -> None:
    spec = schema(crd)["properties"]["spec"]["properties"]
    size = spec["nodePools"]["items"]["properties"]["storage"]["properties"]["size"]
    assert size["x-kubernetes-validations"] == [
        {"rule": "!quantity(self).isLessThan(quantity(oldSelf))",
         "message": "a node pool's storage cannot shrink"}]
    # A bounded string keeps the rule's estimated cost within the API server's budget.
    assert size["maxLength"] == 32
    assert spec["rebalanceOnScale"] == {**spec["rebalanceOnScale"], "type": "boolean",
                                        "default": True}
    # Unthrottled unless set, and then at least one byte per second.
    assert spec["replicationThrottle"] == {**spec["replicationThrottle"], "type": "integer",
                                           "minimum": 1}
    assert "default" not in spec["replicationThrottle"]
