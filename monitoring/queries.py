"""The PromQL inside Moldau's dashboards and rules, in a form tests can run or parse.

Grafana fills in template variables before a query reaches Prometheus; `substitute` does the
same with each variable's "All" value (`.*`) and fixed ranges for Grafana's interval variables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

MONITORING_DIR = Path(__file__).resolve().parent
DASHBOARD_DIR = MONITORING_DIR / "dashboards"
RULES_FILE = MONITORING_DIR / "rules" / "moldau-rules.yaml"
RULE_TESTS_DIR = MONITORING_DIR / "rules" / "tests"

# Grafana's built-in interval variables, at values a 1 s scrape interval fills.
BUILTIN_RANGES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# `agg by (labels) (` at the start of a query, optionally inside `topk(n, ...)`.
GROUPING = re.compile(r"^\s*(?:(?:topk|bottomk)\(\s*\d+\s*,\s*)?"
                      r"(?:sum|max|min|avg|count|group)\s+by\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)")
# What is not a vector selector: label lists of grouping and matching clauses, range and
# subquery durations, and the binary operators' keywords.
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
DURATION = re.compile(r"\[[^\]]*\]")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
# A metric name (not a function's: no "(" follows) with its optional {matchers}.
SELECTOR = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])\s*(\{[^}]*\})?(?!\s*\()")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    legend: str

    @property
    def where(self) -> str:
        return f"{self.dashboard}: '{self.panel}' query {self.ref_id}"


# The dashboard of the operator's own metrics; the others read the brokers'.
OPERATOR_DASHBOARD = "moldau-operator.json"


def load_dashboards() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text())
            for path in sorted(DASHBOARD_DIR.glob("*.json"))}


def broker_dashboards() -> dict[str, dict]:
    return {name: dashboard for name, dashboard in load_dashboards().items()
            if name != OPERATOR_DASHBOARD}


def iter_panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def iter_panel_queries(dashboards: dict[str, dict] | None = None) -> Iterator[PanelQuery]:
    for name, dashboard in (dashboards or load_dashboards()).items():
        for panel in iter_panels(dashboard):
            for target in panel.get("targets", []):
                yield PanelQuery(name, panel.get("title", ""), target.get("refId", ""),
                                 target.get("expr", ""), target.get("legendFormat", ""))


def variable_label_values(dashboard: dict) -> dict[str, tuple[str, str | None]]:
    """Each query variable's (PromQL selector, label) of its label_values(selector, label);
    a variable whose query is plain PromQL has no label."""
    found: dict[str, tuple[str, str | None]] = {}
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"]
            match = LABEL_VALUES.fullmatch(query)
            found[var["name"]] = (match.group(1), match.group(2)) if match else (query, None)
    return found


def variable_queries(dashboard: dict) -> dict[str, str]:
    """Each query variable's PromQL selector (the first argument of its label_values)."""
    return {name: selector for name, (selector, _) in variable_label_values(dashboard).items()}


def rule_expressions(path: Path = RULES_FILE) -> dict[str, str]:
    """Alert or record name -> expression, for every rule of a rules file."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return {rule.get("alert") or rule["record"]: rule["expr"]
            for group in groups for rule in group["rules"]}


def substitute(expr: str) -> str:
    """The query as Grafana sends it with every variable at "All"."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return BUILTIN_RANGES.get(name, ".*")
    return VARIABLE.sub(value, expr)


def variables_used(expr: str) -> set[str]:
    return {a or b for a, b in VARIABLE.findall(expr)}


def legend_labels(legend: str) -> set[str]:
    return set(LEGEND_LABEL.findall(legend))


def kept_labels(expr: str) -> set[str] | None:
    """The labels a query's outermost `agg by (...)` keeps; None when it does not start so."""
    match = GROUPING.match(expr)
    if match is None:
        return None
    return {label.strip() for label in match.group(1).split(",") if label.strip()}


def vector_selectors(expr: str) -> list[str]:
    """The vector selectors (`name{matchers}`) of an expression, in order, without their
    ranges; enough for the expressions Moldau ships (no strings outside matchers)."""
    plain = DURATION.sub("", LABEL_LIST.sub("", expr))
    return [name + (matchers or "") for name, matchers in SELECTOR.findall(plain)
            if name not in KEYWORDS]
