"""Moldau's shipped dashboards and alert rules against a real Prometheus scraping a real
three-node cluster under load: every dashboard query and variable returns series carrying the
labels its legend names, every alert's selectors match real series, and killing a broker fires
the under-replicated and broker-down alerts through Prometheus' own rule evaluation, which
resolve once the broker is back and caught up."""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path

import yaml
from confluent_kafka import Consumer, KafkaException
from kafka.admin import NewTopic

from e2e.support import ck_producer, kp_admin, unique, wait_until
from moldau.cluster.launcher import LocalCluster
from monitoring.queries import (
    RULES_FILE,
    broker_dashboards,
    iter_panel_queries,
    legend_labels,
    rule_expressions,
    substitute,
    variable_label_values,
    vector_selectors,
)

PARTITIONS = 6
SERIES_TIMEOUT = 120.0
ALERT_TIMEOUT = 120.0
RESTART_TIMEOUT = 120.0
# The alerts the test drives, and the `for` their test copy waits instead of the shipped
# one (see shortened_rules).
DRIVEN_ALERTS = ("MoldauUnderReplicatedPartitions", "MoldauBrokerDown")
TEST_FOR = "5s"
# Labels Prometheus' relabelling adds on Kubernetes; outside it the variables reading them
# are empty and stay at "All" (monitoring/README.md, "Scraping").
KUBERNETES_LABELS = {"namespace", "moldau_io_cluster"}
# A matcher choosing among literal values, as request=~"Produce|Fetch": each must exist, or
# the panel silently shows fewer lines than it names.
ALTERNATIVES = re.compile(r'(\w+)=~"(\w+(?:\|\w+)+)"')


class Load:
    """A producer writing to `topic` and a group consuming it, committing every second what
    it has read, so produce, fetch, commit and lag series all exist. Failures while a broker
    is down are expected and retried: the load only has to keep going."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.stopping = threading.Event()
        self.produced = 0
        self.commits = 0
        self.threads = [threading.Thread(target=self._produce, name="load-producer"),
                        threading.Thread(target=self._consume, name="load-consumer")]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _produce(self) -> None:
        producer = ck_producer(self.bootstrap, acks="all")

        def delivered(err, _msg) -> None:
            if err is None:
                self.produced += 1

        number = 0
        while not self.stopping.is_set():
            with contextlib.suppress(BufferError):  # queue full while a leader moves
                producer.produce(self.topic, value=b"%d" % number, key=b"%d" % number,
                                 on_delivery=delivered)
                number += 1
            producer.poll(0.02)
        producer.flush(30)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                consumer.consume(100, timeout=1.0)
                # Commits once a second trail the producer: the group's lag stays above 0.
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
                    self.commits += 1
        finally:
            consumer.close()


def metrics_targets(cluster: LocalCluster) -> list[str]:
    return [f"127.0.0.1:{node.http_port}" for node in cluster.nodes]


def create_replicated_topic(bootstrap: str, topic: str) -> None:
    admin = kp_admin(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    finally:
        admin.close()


def shortened_rules(directory: Path) -> Path:
    """A copy of the shipped rules whose driven alerts wait TEST_FOR instead of their `for`
    (1 m): `for` only delays how long a true expression must stay true, and waiting minutes
    per alert on a shared machine buys nothing. Each expression stays the shipped one."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in DRIVEN_ALERTS:
                rule["for"] = TEST_FOR
    path = directory / "moldau-rules-short-for.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    assert rule_expressions(path) == rule_expressions(RULES_FILE)
    return path


def dashboard_checks(dashboards: dict[str, dict]) -> dict[str, tuple[str, set[str]]]:
    """Where -> (query as Grafana sends it with every variable at "All", labels each series
    must carry): each panel query with its legend's labels, each variable's selector with
    the label it lists (unless only Kubernetes' relabelling adds it)."""
    checks = {q.where: (substitute(q.expr), legend_labels(q.legend))
              for q in iter_panel_queries(dashboards)}
    for name, dashboard in dashboards.items():
        for variable, (selector, label) in variable_label_values(dashboard).items():
            wanted = {label} - KUBERNETES_LABELS if label else set()
            checks[f"{name}: variable {variable}"] = (substitute(selector), wanted)
    return checks


def unmet(prom, checks: dict[str, tuple[str, set[str]]]) -> dict[str, str]:
    """Where -> why, for each check whose query has no series yet or whose series lack a
    wanted label."""
    problems = {}
    for where, (expr, labels) in checks.items():
        series = prom.query(expr)
        if not series:
            problems[where] = f"no series for {expr}"
            continue
        lacking = sorted({label for s in series for label in labels - set(s["metric"])})
        if lacking:
            problems[where] = f"series without {lacking}: {series[0]['metric']}"
            continue
        absent = missing_alternatives(prom, expr)
        if absent:
            problems[where] = f"no series with {absent} for {expr}"
    return problems


def missing_alternatives(prom, expr: str) -> list[str]:
    """The literal values of `label=~"a|b"` matchers in `expr` that no series carries."""
    missing = []
    for selector in vector_selectors(expr):
        for label, options in ALTERNATIVES.findall(selector):
            grouped = prom.query(f"group by ({label}) ({selector})")
            seen = {series["metric"].get(label) for series in grouped}
            missing += [f'{label}="{value}"' for value in options.split("|")
                        if value not in seen]
    return missing


def lagging_partitions(prom, topic: str) -> set[str]:
    """The partitions of `topic` in the consumer-lag dashboard's per-partition table."""
    (table,) = [q for q in iter_panel_queries() if q.dashboard == "moldau-consumer-lag.json"
                and "partition" in legend_labels(q.legend)]
    return {series["metric"]["partition"] for series in prom.query(substitute(table.expr))
            if series["metric"]["topic"] == topic}


def rule_selectors() -> dict[str, list[str]]:
    return {name: vector_selectors(expr) for name, expr in rule_expressions().items()}


def active_alerts(prom, name: str, state: str | None = None) -> list[dict]:
    return [alert for alert in prom.alerts() if alert["labels"]["alertname"] == name
            and state in (None, alert["state"])]


def test_dashboards_and_alerts_against_a_live_cluster(cluster: LocalCluster,
                                                      prometheus_factory,
                                                      tmp_path: Path) -> None:
    topic, group = unique("monitored"), unique("monitored-group")
    create_replicated_topic(cluster.bootstrap_servers, topic)
    prom = prometheus_factory(metrics_targets(cluster), [shortened_rules(tmp_path)])
    with Load(cluster.bootstrap_servers, topic, group) as load:
        wait_until(lambda: load.produced > 0 and load.commits > 0, 60,
                   "the load producing and committing")

        # Rates need two scrapes and lag a commit: poll until every query answers.
        checks = dashboard_checks(broker_dashboards())
        problems: dict[str, str] = {}

        def dashboards_answer() -> bool:
            problems.clear()
            problems.update(unmet(prom, checks))
            return not problems

        with contextlib.suppress(AssertionError):
            wait_until(dashboards_answer, SERIES_TIMEOUT, "every dashboard query answering",
                       interval=2.0)
        assert problems == {}
        # Lag shows for every partition the group commits, whichever broker leads it.
        every_partition = {str(index) for index in range(PARTITIONS)}
        with contextlib.suppress(AssertionError):
            wait_until(lambda: lagging_partitions(prom, topic) == every_partition,
                       SERIES_TIMEOUT, "lag of every partition", interval=2.0)
        assert lagging_partitions(prom, topic) == every_partition

        # Every selector of every rule matches series (the disk alert's too: brokers report
        # their log directories' file systems themselves).
        empty = {selector for selectors in rule_selectors().values()
                 for selector in selectors if not prom.query(selector)}
        assert empty == set()
        absent = {name: missing_alternatives(prom, expr)
                  for name, expr in rule_expressions().items()}
        assert {name: values for name, values in absent.items() if values} == {}

        # Neither driven alert is active while the cluster is healthy (waited for: on a busy
        # machine a follower may briefly fall out of the ISR).
        wait_until(lambda: not any(active_alerts(prom, alert) for alert in DRIVEN_ALERTS),
                   ALERT_TIMEOUT, "no driven alert active before the kill")

        cluster.kill(3)
        for alert in DRIVEN_ALERTS:
            wait_until(lambda alert=alert: active_alerts(prom, alert, "firing"),
                       ALERT_TIMEOUT, f"{alert} to fire")
        down = active_alerts(prom, "MoldauBrokerDown", "firing")
        assert [a["labels"]["instance"] for a in down] == [
            f"127.0.0.1:{cluster.node(3).http_port}"]

        cluster.start_node(3, timeout=RESTART_TIMEOUT)
        for alert in DRIVEN_ALERTS:
            wait_until(lambda alert=alert: not active_alerts(prom, alert), ALERT_TIMEOUT,
                       f"{alert} to resolve after the broker caught up")
        assert prom.query("sum(kafka_server_replicamanager_underreplicatedpartitions)"
                          )[0]["value"][1] == "0"
