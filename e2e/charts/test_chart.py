"""The Helm chart charts/moldau, offline: linted, rendered for several sets of values with the
real helm, and every object checked against Kubernetes' schemas (kubernetes-validate), the
chart's CRDs, or Prometheus Operator's required fields."""

from __future__ import annotations

import copy
import json
import re
import textwrap
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from e2e.charts.helm import (
    CHART,
    REPO,
    check_metadata,
    crd_schemas,
    helm,
    kinds,
    render,
    render_notes,
    validate_custom,
)
from e2e.charts.prometheus_operator import check_monitoring_object

HERE = Path(__file__).resolve().parent
ALL_ON = yaml.safe_load((HERE / "all-on-values.yaml").read_text())
# The newest Kubernetes whose schemas kubernetes-validate ships.
KUBE_SCHEMAS = kubernetes_validate.latest_version()
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]

VALUES = {
    "defaults": None,
    "every option": ALL_ON,
    "watched namespaces": {"operator": {"watchNamespaces": ["team-a", "team-b"]}},
    "a first cluster": {"cluster": {"enabled": True}},
    "operator scraped through a PodMonitor": {"monitoring": {
        "operator": {"enabled": True, "kind": "PodMonitor"}, "brokers": {"enabled": True}}},
    "existing service account, no RBAC, no peering": {
        "serviceAccount": {"create": False, "name": "moldau-existing"},
        "rbac": {"create": False}, "peering": {"create": False}},
}

# The operator's rights (the contract between the chart and operator/): group, resource, verb.
CONTRACT_RULES = [
    ("moldau.io", ["kafkaclusters", "kafkaclusters/status", "topics", "topics/status",
                   "kafkausers", "kafkausers/status"],
     ["get", "list", "watch", "patch", "update"]),
    ("kopf.dev", ["clusterkopfpeerings", "kopfpeerings"], ["get", "list", "watch", "patch"]),
    ("apiextensions.k8s.io", ["customresourcedefinitions"], ["get", "list", "watch"]),
    ("", ["namespaces"], ["get", "list", "watch"]),
    ("", ["events"], ["create", "patch"]),
    ("events.k8s.io", ["events"], ["create", "patch"]),
    # Secrets: the CAs, the nodes' certificates and the KafkaUsers' credentials.
    ("", ["configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims"],
     ["get", "list", "watch", "create", "patch", "delete"]),
    ("", ["pods"], ["get", "list", "watch", "patch", "delete"]),
    ("apps", ["statefulsets"], ["get", "list", "watch", "create", "patch", "delete"]),
    ("policy", ["poddisruptionbudgets"], ["get", "list", "watch", "create", "patch", "delete"]),
]
CLUSTER_SCOPED = {("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces"),
                  ("kopf.dev", "clusterkopfpeerings")}


def triples(rules: list[dict] | list[tuple]) -> set[tuple[str, str, str]]:
    """Rules as (group, resource, verb) triples, however they are grouped."""
    found = set()
    for rule in rules:
        groups, resources, verbs = (
            (rule["apiGroups"], rule["resources"], rule["verbs"]) if isinstance(rule, dict)
            else ([rule[0]], rule[1], rule[2]))
        found |= {(g, r, v) for g in groups for r in resources for v in verbs}
    return found


def one(objects: list[dict], kind: str) -> dict:
    matching = kinds(objects, kind)
    assert len(matching) == 1, f"expected one {kind}, found {len(matching)}"
    return matching[0]


def check_object(obj: dict, custom_schemas: dict[tuple[str, str], dict]) -> None:
    group = obj["apiVersion"].rpartition("/")[0]
    if group == "monitoring.coreos.com":
        check_monitoring_object(obj)
        return
    check_metadata(obj)
    key = (obj["apiVersion"], obj["kind"])
    if key in custom_schemas:
        validate_custom(obj, custom_schemas[key])
    else:
        kubernetes_validate.validate(obj, KUBE_SCHEMAS, strict=True)


# Values that hold a Kubernetes object passed through as written.
PASS_THROUGH = {"resources", "podSecurityContext", "securityContext", "updateStrategy", "spec"}


def option_paths(values: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in PASS_THROUGH:
            paths |= option_paths(value, path + ".")
        else:
            paths.add(path)
    return paths


def test_values_schema_is_a_valid_schema_that_admits_the_defaults() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


def test_every_option_values_set_every_option() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    set_paths = option_paths(ALL_ON)
    missing = {path for path in option_paths(defaults)
               if not any(p == path or p.startswith(path + ".") for p in set_paths)}
    assert not missing, f"all-on-values.yaml leaves these at their defaults: {sorted(missing)}"


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "every option"])
def test_helm_lint_strict_passes(helm_binary: Path, values: dict | None) -> None:
    done = helm("lint", "--strict", str(CHART), values=values)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_every_rendered_object_is_valid(helm_binary: Path, values: dict | None) -> None:
    objects = render(values)
    schemas = crd_schemas(objects)
    for obj in objects:
        if obj["kind"] == "KafkaCluster" and (obj["apiVersion"], obj["kind"]) not in schemas:
            continue  # until the CRD is in the chart: test_kafkacluster_matches_its_crd
        check_object(obj, schemas)


def misspell_container_field(objects: list[dict]) -> dict:
    deployment = copy.deepcopy(one(objects, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicey"] = "Never"
    return deployment


def misspell_endpoint_field(objects: list[dict]) -> dict:
    monitor = copy.deepcopy(one(objects, "PodMonitor"))
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "30s"
    return monitor


def misspell_peering_field(objects: list[dict]) -> dict:
    peering = copy.deepcopy(one(objects, "ClusterKopfPeering"))
    peering["status"] = {"peers": {}}  # declared free-form: accepted
    peering["spec"] = {"priority": 1}  # not declared: refused
    return peering


@pytest.mark.parametrize("misspell", [
    misspell_container_field, misspell_endpoint_field, misspell_peering_field],
    ids=["Kubernetes schema", "Prometheus Operator fields", "CRD schema"])
def test_validation_catches_a_misspelled_field(helm_binary: Path, misspell) -> None:
    """The checks above can fail: a field the schema does not know is refused."""
    objects = render({"monitoring": {"brokers": {"enabled": True}}})
    with pytest.raises((AssertionError, jsonschema.ValidationError,
                        kubernetes_validate.ValidationError)):
        check_object(misspell(objects), crd_schemas(objects))


def test_kafkacluster_matches_its_crd(helm_binary: Path) -> None:
    objects = render({"cluster": {"enabled": True}})
    schemas = crd_schemas(objects)
    cluster = one(objects, "KafkaCluster")
    key = (cluster["apiVersion"], cluster["kind"])
    if key not in schemas:
        assert not (REPO / "crds" / "moldau.io_kafkaclusters.yaml").exists(), \
            "crds/moldau.io_kafkaclusters.yaml exists but the chart lacks it: run make chart-sync"
        pytest.skip("the KafkaCluster CRD (crds/moldau.io_kafkaclusters.yaml) is not written yet")
    validate_custom(cluster, schemas[key])


def test_cluster_role_grants_exactly_the_contract(helm_binary: Path) -> None:
    objects = render()
    role = one(objects, "ClusterRole")
    assert triples(role["rules"]) == triples(CONTRACT_RULES)
    assert not kinds(objects, "Role")
    binding = one(objects, "ClusterRoleBinding")
    account = one(objects, "ServiceAccount")["metadata"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}]


def test_watched_namespaces_get_roles_and_a_small_cluster_role(helm_binary: Path) -> None:
    watched = ["team-a", "team-b"]
    objects = render({"operator": {"watchNamespaces": watched}})
    cluster_role = triples(one(objects, "ClusterRole")["rules"])
    assert {(g, r) for g, r, _ in cluster_role} == CLUSTER_SCOPED
    roles = kinds(objects, "Role")
    bindings = kinds(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == watched
    assert sorted(b["metadata"]["namespace"] for b in bindings) == watched
    for role in roles:
        assert cluster_role | triples(role["rules"]) == triples(CONTRACT_RULES)
        assert not {(g, r) for g, r, _ in triples(role["rules"])} & CLUSTER_SCOPED
    peerings = kinds(objects, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == watched
    assert not kinds(objects, "ClusterKopfPeering")
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a", "--namespace=team-b"]


def test_operator_deployment_defaults(helm_binary: Path) -> None:
    objects = render()
    assert one(objects, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == f"localhost/moldau-operator:{APP_VERSION}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    # The image's ENTRYPOINT stays PID 1: the chart passes arguments only.
    assert "command" not in container
    assert container["args"] == ["--http-port=8080"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MOLDAU_BROKER_IMAGE"] == f"localhost/moldau-broker:{APP_VERSION}"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert one(objects, "ClusterKopfPeering")["metadata"]["name"] == "moldau"


def test_app_version_is_the_components_version() -> None:
    components = sorted(REPO.glob("*/pyproject.toml"))
    assert {path.parent.name for path in components} >= {"client", "broker"}
    for path in components:
        project = tomllib.loads(path.read_text())["project"]
        assert project["version"] == APP_VERSION, path.parent.name


def test_image_and_options_from_values(helm_binary: Path) -> None:
    deployment = one(render(ALL_ON), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0,
                                                               "maxUnavailable": 1}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/moldau/operator:0.1.0-test"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == ["--namespace=kafka-a", "--namespace=kafka-b",
                                 "--http-port=8081"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MOLDAU_BROKER_IMAGE"] == "registry.example.com/moldau/broker:0.1.0-test"
    assert env["MOLDAU_LOG_LEVEL"] == "debug"


def test_operator_monitors_select_the_operator(helm_binary: Path) -> None:
    for kind in ("ServiceMonitor", "PodMonitor"):
        objects = render({"monitoring": {"operator": {"enabled": True, "kind": kind}}})
        monitor = one(objects, kind)
        selector = monitor["spec"]["selector"]["matchLabels"]
        if kind == "ServiceMonitor":
            target = one(objects, "Service")
            labels, ports = target["metadata"]["labels"], target["spec"]["ports"]
            endpoints = monitor["spec"]["endpoints"]
        else:
            pod = one(objects, "Deployment")["spec"]["template"]
            labels, ports = pod["metadata"]["labels"], pod["spec"]["containers"][0]["ports"]
            endpoints = monitor["spec"]["podMetricsEndpoints"]
        assert selector.items() <= labels.items(), kind
        assert endpoints[0]["port"] in {p["name"] for p in ports}, kind
        assert endpoints[0]["path"] == "/metrics"


def test_broker_pod_monitor(helm_binary: Path) -> None:
    monitor = one(render({"monitoring": {"brokers": {"enabled": True}}}), "PodMonitor")
    assert monitor["spec"]["selector"] == {
        "matchExpressions": [{"key": "moldau.io/cluster", "operator": "Exists"}]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["portNumber"] == 9404
    assert monitor["spec"]["podTargetLabels"] == ["moldau.io/cluster"]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}


def test_monitoring_labels_reach_every_monitoring_object(helm_binary: Path) -> None:
    """A Prometheus that selects its monitors and rules by label finds all of them."""
    monitoring = [obj for obj in render(ALL_ON)
                  if obj["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(obj["kind"] for obj in monitoring) == [
        "PodMonitor", "PrometheusRule", "ServiceMonitor"]
    for obj in monitoring:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", obj["kind"]


def test_monitoring_is_off_by_default(helm_binary: Path) -> None:
    rendered = {obj["kind"] for obj in render()}
    assert not rendered & {"PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap",
                           "KafkaCluster"}


def test_prometheus_rule_holds_the_rules_file_groups(helm_binary: Path) -> None:
    rule = one(render({"monitoring": {"rules": {"enabled": True}}}), "PrometheusRule")
    shipped = yaml.safe_load((REPO / "monitoring" / "rules" / "moldau-rules.yaml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]


def test_dashboards_become_labelled_config_maps(helm_binary: Path) -> None:
    objects = render({"monitoring": {"dashboards": {"enabled": True}}})
    maps = kinds(objects, "ConfigMap")
    sources = sorted((REPO / "monitoring" / "dashboards").glob("*.json"))
    shipped = {name: text for m in maps for name, text in m["data"].items()}
    assert shipped == {path.name: path.read_text().rstrip("\n") for path in sources}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    custom = render({"monitoring": {"dashboards": {
        "enabled": True, "label": "dashboards", "labelValue": "moldau",
        "namespace": "grafana"}}})
    for config_map in kinds(custom, "ConfigMap"):
        assert config_map["metadata"]["labels"]["dashboards"] == "moldau"
        assert "grafana_dashboard" not in config_map["metadata"]["labels"]
        assert config_map["metadata"]["namespace"] == "grafana"


@pytest.mark.parametrize(("values", "complaint"), [
    ({"operator": {"replica": 2}}, "additional properties 'replica' not allowed"),
    ({"monitoring": {"rule": {"enabled": True}}}, "additional properties 'rule' not allowed"),
    ({"cluster": {"enabled": True, "name": "Not_A_Name"}}, "'Not_A_Name' does not match"),
    ({"operator": {"image": {"pullPolicy": "Sometimes"}}}, "/operator/image/pullPolicy"),
], ids=["misspelled key", "misspelled monitoring key", "bad cluster name", "bad pull policy"])
def test_values_schema_refuses_bad_values(helm_binary: Path, values: dict,
                                          complaint: str) -> None:
    done = helm("template", "moldau", str(CHART), values=values, check=False)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert complaint in done.stderr, done.stderr
    assert "goroutine" not in done.stderr and "panic" not in done.stderr


def test_service_account_name_is_required_when_not_created(helm_binary: Path) -> None:
    done = helm("template", "moldau", str(CHART), values={"serviceAccount": {"create": False}},
                check=False)
    assert done.returncode != 0
    assert "serviceAccount.name must name an existing ServiceAccount" in done.stderr


def test_notes_tell_how_to_apply_a_cluster_and_find_its_bootstrap(
        helm_binary: Path, tmp_path: Path) -> None:
    notes = render_notes(namespace="kafka", workdir=tmp_path / "default")
    assert "kubectl apply -n kafka -f -" in notes
    assert "kind: KafkaCluster" in notes
    assert "kubectl -n kafka get mkc my-cluster" in notes
    assert "BOOTSTRAP" in notes
    assert "{{" not in notes
    # The example is a KafkaCluster of the contract's shape: controllers and brokers.
    block = re.search(r"<<'YAML'\n(.*?)\n\s*YAML", notes, re.S).group(1)
    example = yaml.safe_load(textwrap.dedent(block))
    assert (example["apiVersion"], example["kind"]) == ("moldau.io/v1alpha1", "KafkaCluster")
    roles = {role for pool in example["spec"]["nodePools"] for role in pool["roles"]}
    assert roles == {"controller", "broker"}
    installed = render_notes({"cluster": {"enabled": True, "name": "events"}},
                             namespace="kafka", workdir=tmp_path / "cluster")
    assert "kubectl -n kafka get mkc events" in installed
    assert "kubectl apply" not in installed
    # The bootstrap address of each internal listener of the cluster the chart made.
    assert "  events-bootstrap.kafka.svc:9092   (listener plain)" in installed.splitlines()
    two = render_notes({"cluster": {"enabled": True, "name": "events", "spec": {
        "nodePools": [{"name": "all", "roles": ["controller", "broker"], "replicas": 1,
                       "storage": {"size": "1Gi"}}],
        "listeners": [{"name": "plain", "port": 9092, "type": "internal"},
                      {"name": "outside", "port": 9094, "type": "nodeport"},
                      {"name": "tls", "port": 9093}]}}},
        namespace="kafka", workdir=tmp_path / "listeners")
    assert [line for line in two.splitlines() if "-bootstrap." in line] == [
        "  events-bootstrap.kafka.svc:9092   (listener plain)",
        "  events-bootstrap.kafka.svc:9093   (listener tls)"]
    assert "my-cluster-bootstrap.kafka.svc:9092" in notes
