"""The metric names the dashboards and rules read are the ones monitoring/README.md lists,
so whoever changes the brokers' or the operator's /metrics endpoint can see what depends on
each name."""

from __future__ import annotations

import re

from monitoring.queries import MONITORING_DIR, iter_panel_queries, rule_expressions

# Names the brokers and the operator export: Kafka's (kafka_*) and Moldau's own (moldau_*).
EXPORTED = re.compile(r"\b(?:kafka|moldau)_[a-z0-9_]+\b")
LABELS = {"moldau_io_cluster"}
CODE_SPAN = re.compile(r"`([^`]+)`")
# `prefix_{a,b}_suffix` in the README stands for prefix_a_suffix and prefix_b_suffix.
ALTERNATIVES = re.compile(r"_\{([^}]*)\}")


def names_in_expressions() -> set[str]:
    exprs = [query.expr for query in iter_panel_queries()] + list(rule_expressions().values())
    return {name for expr in exprs for name in EXPORTED.findall(expr)} - LABELS


def expand(span: str) -> set[str]:
    match = ALTERNATIVES.search(span)
    if match is None:
        return {re.sub(r"\{.*\}$", "", span)}
    head, tail = span[:match.start()], span[match.end():]
    return {name for option in match.group(1).split(",")
            for name in expand(f"{head}_{option.strip()}{tail}")}


def names_in_readme() -> set[str]:
    text = (MONITORING_DIR / "README.md").read_text()
    section = text.split("## Metrics read", 1)[1].split("\n## ", 1)[0]
    return {name for span in CODE_SPAN.findall(section) for name in expand(span)
            if EXPORTED.fullmatch(name)}


def test_readme_lists_exactly_the_metrics_the_queries_read():
    used, listed = names_in_expressions(), names_in_readme()
    assert sorted(used - listed) == [], "read by a query but not listed in monitoring/README.md"
    assert sorted(listed - used) == [], "listed in monitoring/README.md but read by no query"


def test_readme_shorthand_expands():
    assert expand("kafka_x_{a,b}_total{topic}") == {"kafka_x_a_total", "kafka_x_b_total"}
