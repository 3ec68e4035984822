"""Structural checks of Prometheus Operator objects (monitoring.coreos.com/v1).

Their CRDs are not among kubernetes-validate's schemas and no package here ships them, so
these checks stand in: the fields Prometheus Operator requires, their types, and the field
names it knows for what the chart writes (a misspelled field is silently dropped by the API
server's pruning, so it is caught here instead).
"""

from __future__ import annotations

import re

from e2e.charts.helm import check_metadata

DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                      r"(([0-9]+)s)?(([0-9]+)ms)?)$")

SELECTOR_FIELDS = {"matchLabels", "matchExpressions"}
NAMESPACE_SELECTOR_FIELDS = {"any", "matchNames"}
# Common to PodMonitor's podMetricsEndpoints and ServiceMonitor's endpoints.
ENDPOINT_FIELDS = {
    "port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
    "tlsConfig", "bearerTokenSecret", "authorization", "basicAuth", "oauth2",
    "honorLabels", "honorTimestamps", "trackTimestampsStaleness", "metricRelabelings",
    "relabelings", "proxyUrl", "followRedirects", "enableHttp2", "filterRunning",
}
MONITOR_SPEC_FIELDS = {
    "jobLabel", "podTargetLabels", "selector", "selectorMechanism", "namespaceSelector",
    "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
    "labelValueLengthLimit", "keepDroppedTargets", "attachMetadata", "scrapeClass",
    "scrapeProtocols", "bodySizeLimit",
}
MONITORS = {
    # kind: (the endpoint list's field, fields only that kind has, fields of its endpoints)
    "PodMonitor": ("podMetricsEndpoints", {"podMetricsEndpoints"},
                   ENDPOINT_FIELDS | {"portNumber"}),
    "ServiceMonitor": ("endpoints", {"endpoints", "targetLabels"},
                       ENDPOINT_FIELDS | {"bearerTokenFile"}),
}
RULE_GROUP_FIELDS = {"name", "interval", "rules", "limit", "partial_response_strategy",
                     "query_offset", "labels"}
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


def _unknown(obj: dict, known: set[str], where: str) -> None:
    unknown = set(obj) - known
    assert not unknown, f"{where}: fields Prometheus Operator does not know: {sorted(unknown)}"


def _string_map(value: object, where: str) -> None:
    assert isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()), \
        f"{where} must map strings to strings: {value!r}"


def check_monitor(obj: dict) -> None:
    kind = obj["kind"]
    where = f"{kind} {obj['metadata']['name']}"
    endpoints_field, own_fields, endpoint_fields = MONITORS[kind]
    spec = obj["spec"]
    _unknown(spec, MONITOR_SPEC_FIELDS | own_fields, where)
    # selector is the one field the CRD requires.
    assert isinstance(spec.get("selector"), dict), f"{where}: spec.selector is required"
    _unknown(spec["selector"], SELECTOR_FIELDS, f"{where} selector")
    _unknown(spec.get("namespaceSelector", {}), NAMESPACE_SELECTOR_FIELDS,
             f"{where} namespaceSelector")
    endpoints = spec.get(endpoints_field)
    assert isinstance(endpoints, list) and endpoints, f"{where}: no {endpoints_field}"
    for endpoint in endpoints:
        _unknown(endpoint, endpoint_fields, f"{where} endpoint")
        assert isinstance(endpoint.get("port"), str) or isinstance(
            endpoint.get("portNumber"), int), f"{where}: an endpoint names no port"
        if "portNumber" in endpoint:
            assert 1 <= endpoint["portNumber"] <= 65535, f"{where}: portNumber out of range"
        for field in ("interval", "scrapeTimeout"):
            if field in endpoint:
                assert DURATION.match(endpoint[field]), f"{where}: bad {field}"


def check_prometheus_rule(obj: dict) -> None:
    where = f"PrometheusRule {obj['metadata']['name']}"
    _unknown(obj["spec"], {"groups"}, where)
    groups = obj["spec"]["groups"]
    names = [group["name"] for group in groups]
    assert len(names) == len(set(names)), f"{where}: group names repeat: {names}"
    for group in groups:
        _unknown(group, RULE_GROUP_FIELDS, f"{where} group {group['name']}")
        assert group["rules"], f"{where}: group {group['name']} has no rules"
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            _unknown(rule, RULE_FIELDS, f"{where} rule {name}")
            assert ("alert" in rule) != ("record" in rule), \
                f"{where}: a rule needs exactly one of alert and record: {rule}"
            assert isinstance(rule.get("expr"), str) and rule["expr"].strip(), \
                f"{where}: rule {name} has no expr"
            if "for" in rule:
                assert DURATION.match(rule["for"]), f"{where}: rule {name}: bad for"
            for field in ("labels", "annotations"):
                if field in rule:
                    _string_map(rule[field], f"{where}: rule {name} {field}")


def check_monitoring_object(obj: dict) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1", obj["apiVersion"]
    check_metadata(obj)
    if obj["kind"] == "PrometheusRule":
        check_prometheus_rule(obj)
    else:
        assert obj["kind"] in MONITORS, f"unexpected kind {obj['kind']}"
        check_monitor(obj)
