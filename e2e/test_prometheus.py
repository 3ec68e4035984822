"""A real Prometheus process loading Moldau's rules file, scraping itself and a target where
nothing listens, evaluating rules and answering through its HTTP API.

The live test, against brokers serving `GET /metrics` under load, is
e2e/test_monitoring_live.py.
"""

from __future__ import annotations

import pytest

from e2e.support import free_port, wait_until
from monitoring.queries import RULES_FILE, rule_expressions

ALERT_TIMEOUT = 60.0
NOTHING_LISTENS_RULE = """\
groups:
  - name: test
    rules:
      - alert: NothingListens
        expr: up{job="moldau"} == 0
        labels:
          severity: test
        annotations:
          summary: "{{ $labels.instance }} does not answer"
"""


def alerts_named(prom, name: str) -> list[dict]:
    return [alert for alert in prom.alerts() if alert["labels"]["alertname"] == name]


@pytest.fixture
def nothing_listens_rules(tmp_path):
    path = tmp_path / "nothing-listens.yaml"
    path.write_text(NOTHING_LISTENS_RULE)
    return path


def test_prometheus_scrapes_itself_and_evaluates_rules(prometheus_factory,
                                                       nothing_listens_rules):
    ghost = f"127.0.0.1:{free_port()}"
    prom = prometheus_factory([ghost], [RULES_FILE, nothing_listens_rules])

    # Its own /metrics, scraped and stored.
    own = prom.query('up{job="prometheus"}')
    assert [series["value"][1] for series in own] == ["1"]
    assert prom.query('prometheus_build_info{job="prometheus"}')
    assert [s["value"][1] for s in prom.query(f'up{{job="moldau",instance="{ghost}"}}')] == ["0"]

    # Moldau's rules are loaded, each group and rule as the file has them.
    groups = prom.api("rules")["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]
              if group["file"] == str(RULES_FILE)}
    assert loaded == set(rule_expressions())

    # A rule with no `for` fires on the next evaluation; MoldauBrokerDown waits its minute.
    firing = wait_until(lambda: [a for a in alerts_named(prom, "NothingListens")
                                 if a["state"] == "firing"], ALERT_TIMEOUT,
                        "NothingListens to fire")
    assert firing[0]["labels"]["instance"] == ghost
    assert firing[0]["annotations"]["summary"] == f"{ghost} does not answer"
    down = wait_until(lambda: alerts_named(prom, "MoldauBrokerDown"), ALERT_TIMEOUT,
                      "MoldauBrokerDown to be pending")
    assert [(a["state"], a["labels"]["instance"]) for a in down] == [("pending", ghost)]


def test_prometheus_stops_and_its_files_go(prometheus_factory):
    prom = prometheus_factory([])
    assert prom.query('up{job="prometheus"}')
    prom.close()
    assert prom.proc.poll() is not None
    assert not prom.workdir.exists()


def test_a_bad_query_is_a_clear_error(prometheus_factory):
    prom = prometheus_factory([])
    with pytest.raises(ValueError, match="bad_data: .*parse error"):
        prom.query("sum(")
