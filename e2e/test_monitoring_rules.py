"""Moldau's alert rules and every PromQL expression of its dashboards, checked by promtool
(Debian's prometheus package): the rules load, their unit tests pass, every alert has a test
that fires it and one that does not, and every expression parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e.prometheus import promtool
from monitoring.queries import (
    RULE_TESTS_DIR,
    RULES_FILE,
    iter_panel_queries,
    load_dashboards,
    rule_expressions,
    substitute,
    variable_queries,
)

RULE_TESTS = sorted(RULE_TESTS_DIR.glob("*.yaml"))


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def expressions_as_rules(expressions: dict[str, str]) -> dict:
    """A rules file holding each expression as a recording rule in a group named after where
    it comes from, so promtool's error names the panel."""
    return {"groups": [{"name": where, "rules": [{"record": "moldau:check", "expr": expr}]}
                       for where, expr in expressions.items()]}


def check_expressions(expressions: dict[str, str], tmp_path: Path) -> tuple[bool, str]:
    path = tmp_path / "expressions.yaml"
    path.write_text(yaml.safe_dump(expressions_as_rules(expressions)))
    result = promtool("check", "rules", str(path))
    return result.returncode == 0, result.stdout


def dashboard_expressions() -> dict[str, str]:
    found = {q.where: substitute(q.expr) for q in iter_panel_queries()}
    for name, dashboard in load_dashboards().items():
        for variable, selector in variable_queries(dashboard).items():
            found[f"{name}: variable {variable}"] = substitute(selector)
    return found


def test_rules_file_loads():
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout
    assert f"SUCCESS: {len(rule_expressions())} rules found" in result.stdout


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=[path.name for path in RULE_TESTS])
def test_rule_unit_tests_pass(test_file):
    result = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    for rule in alert_rules():
        assert cases.get(rule["alert"]) == {True, False}, (
            f"{rule['alert']} needs a promtool test where it fires and one where it does not")


def test_every_alert_has_a_severity_summary_and_description():
    required = {
        "MoldauUnderReplicatedPartitions", "MoldauOfflinePartitions",
        "MoldauUnderMinIsrPartitions", "MoldauNoActiveController",
        "MoldauMultipleActiveControllers", "MoldauBrokerDown", "MoldauDiskNearlyFull",
        "MoldauConsumerLagGrowing", "MoldauRequestLatencyHigh"}
    rules = alert_rules()
    assert required <= {rule["alert"] for rule in rules}
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_dashboard_expression_parses(tmp_path):
    expressions = dashboard_expressions()
    assert len(expressions) > 40
    ok, output = check_expressions(expressions, tmp_path)
    assert ok, output


def test_a_broken_expression_is_reported_with_its_panel(tmp_path):
    ok, output = check_expressions(
        {"moldau-topics.json: 'Broken?' query A": 'sum by (topic) (rate(x{topic=~".*"}))'},
        tmp_path)
    assert not ok
    assert "Broken?" in output and "range vector" in output
