"""Moldau's Grafana dashboards, written to monitoring/dashboards/*.json.

The JSON files are what users import; this module is where they are edited, so that the
variables, datasource references and panel layout are defined once. Regenerate with
`python monitoring/dashboards.py` (tests/monitoring checks the files match).

Every query selects on `namespace` and `moldau_io_cluster` (the Kubernetes labels
`moldau.io/cluster` becomes once relabelled) through regex matchers whose "All" value is `.*`,
which also matches a series without the label, so the dashboards work outside Kubernetes too.
Per-broker series are told apart by `instance`, the label Prometheus always sets.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = 'namespace=~"$namespace",moldau_io_cluster=~"$cluster"'
# The operator's series carry the namespace it runs in, not a cluster's.
OPERATOR_SCOPE = 'namespace=~"$namespace"'
RATE = "[$__rate_interval]"
GRID_WIDTH = 24
# Kafka's BrokerTopicMetrics counters, per topic and broker.
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"

# Threshold steps: the base colour applies from -infinity (value None), each later step from
# its value upwards.
OK_UNLESS_ANY = [("green", None), ("red", 1)]


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    title: str
    queries: list[Query]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    thresholds: list[tuple[str, float | None]] = field(
        default_factory=lambda: [("green", None)])
    description: str = ""


@dataclass
class Variable:
    name: str
    label: str
    query: str
    attribute: str


def variable(var: Variable) -> dict:
    """A multi-select variable listing the values of one label; "All" means `.*`."""
    return {
        "type": "query",
        "name": var.name,
        "label": var.label,
        "datasource": DATASOURCE,
        "query": {"query": f"label_values({var.query}, {var.attribute})", "refId": "A"},
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def scope_variables(metric: str, node: tuple[str, str] | None = None) -> list[Variable]:
    """Namespace and cluster, each read from a metric every Moldau broker exports, and with
    `node` = (name, label) a variable choosing among the nodes (`instance`) exporting it."""
    found = [
        Variable("namespace", "Namespace", metric, "namespace"),
        Variable("cluster", "Cluster", f'{metric}{{namespace=~"$namespace"}}',
                 "moldau_io_cluster"),
    ]
    if node is not None:
        found.append(Variable(node[0], node[1], f"{metric}{{{SCOPE}}}", "instance"))
    return found


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    targets = []
    for index, query in enumerate(panel.queries):
        target = {"refId": chr(ord("A") + index), "datasource": DATASOURCE, "expr": query.expr,
                  "legendFormat": query.legend or "__auto", "range": not query.instant,
                  "instant": query.instant}
        if panel.kind == "table":
            target["format"] = "table"
        targets.append(target)
    steps = [{"color": color, "value": value} for color, value in panel.thresholds]
    defaults: dict = {"unit": panel.unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if panel.kind == "timeseries":
        defaults["custom"] = {"fillOpacity": 10, "showPoints": "never",
                              "thresholdsStyle": {"mode": "line"}}
    body = {
        "type": panel.kind,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": panel_options(panel.kind),
    }
    if panel.kind == "table":
        body["transformations"] = [{"id": "merge", "options": {}},
                                   {"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return body


def panel_options(kind: str) -> dict:
    if kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "background", "graphMode": "none", "textMode": "value",
                "justifyMode": "auto", "orientation": "auto"}
    if kind == "table":
        return {"showHeader": True, "cellHeight": "sm"}
    return {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"}}


def dashboard(uid: str, title: str, description: str, variables: list[Variable],
              panels: list[Panel]) -> dict:
    """Lays panels out left to right, starting a new line when the next does not fit."""
    laid_out, x, y, line_height = [], 0, 0, 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.width > GRID_WIDTH:
            x, y, line_height = 0, y + line_height, 0
        laid_out.append(panel_json(panel, panel_id, x, y))
        x += panel.width
        line_height = max(line_height, panel.height)
    datasource_var = {"type": "datasource", "name": "datasource", "label": "Data source",
                      "query": "prometheus", "current": {}, "refresh": 1}
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["moldau", "kafka"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": [datasource_var] + [variable(v) for v in variables]},
        "panels": laid_out,
    }


def rate_by(labels: str, counter: str, selector: str) -> str:
    """The per-second rate of a counter, summed per value of `labels`."""
    return f"sum by ({labels}) (rate({counter}{{{selector}}}{RATE}))"


def stat(title: str, expr: str, thresholds: list[tuple[str, float | None]] = OK_UNLESS_ANY,
         unit: str = "none", description: str = "") -> Panel:
    return Panel(title, [Query(expr, instant=True)], kind="stat", unit=unit, width=4,
                 height=4, thresholds=thresholds, description=description)


def active_controllers() -> Panel:
    return stat("Is exactly one controller active?",
                f"sum(kafka_controller_kafkacontroller_activecontrollercount{{{SCOPE}}})",
                [("red", None), ("green", 1), ("red", 2)])


def cluster_overview() -> dict:
    broker = f'{SCOPE},instance=~"$broker"'
    topics = f'{broker},topic!=""'
    variables = scope_variables("kafka_server_replicamanager_leadercount", ("broker", "Broker"))
    panels = [
        stat("How many brokers report metrics?",
             f"count(kafka_server_replicamanager_leadercount{{{SCOPE}}})",
             [("red", None), ("green", 1)]),
        active_controllers(),
        stat("How many partitions are under-replicated?",
             f"sum(kafka_server_replicamanager_underreplicatedpartitions{{{SCOPE}}})"),
        stat("How many partitions are under min ISR?",
             f"sum(kafka_server_replicamanager_underminisrpartitioncount{{{SCOPE}}})"),
        stat("How many partitions have no leader?",
             f"sum(kafka_controller_kafkacontroller_offlinepartitionscount{{{SCOPE}}})"),
        stat("How many unclean leader elections in the last hour?",
             "sum(increase(kafka_controller_controllerstats_uncleanleaderelections_total"
             f"{{{SCOPE}}}[1h]))"),
        Panel("How many bytes per second do clients produce and fetch?", [
            Query(rate_by("instance", BYTES_IN, topics), "{{instance}} in"),
            Query(rate_by("instance", BYTES_OUT, topics), "{{instance}} out")],
              unit="Bps"),
        Panel("How many messages per second arrive at each broker?", [
            Query(rate_by("instance", MESSAGES_IN, topics), "{{instance}}")],
              unit="cps"),
        Panel("How long do requests take (p99)?", [
            Query(f"max by (request) (kafka_network_requestmetrics_totaltimems{{{broker},"
                  'quantile="0.99",request=~"Produce|FetchConsumer|FetchFollower|Metadata|'
                  'OffsetCommit"})', "{{request}}")], unit="ms",
              thresholds=[("green", None), ("orange", 500), ("red", 1000)],
              description="Fetch requests include the time they wait for data: "
                          "FetchConsumer (consumers) up to fetch.max.wait.ms, FetchFollower "
                          "(replication) up to replica.fetch.wait.max.ms."),
        Panel("Is each broker's event loop keeping up?", [
            Query(f"max by (instance) (moldau_event_loop_lag_seconds{{{broker}}})",
                  "{{instance}}")], unit="s",
              thresholds=[("green", None), ("orange", 0.1), ("red", 0.5)],
              description="How late the broker's asyncio loop runs a callback scheduled "
                          "to run now."),
        Panel("How many requests wait to be handled?", [
            Query(f"sum by (instance) (moldau_request_queue_size{{{broker}}})",
                  "{{instance}}")], thresholds=[("green", None), ("orange", 100), ("red", 500)]),
        Panel("How many client connections does each broker hold?", [
            Query("sum by (instance, listener) (kafka_server_socket_server_metrics_"
                  f"connection_count{{{broker}}})", "{{instance}} {{listener}}")]),
        Panel("How many partitions does each broker lead and host?", [
            Query(f"sum by (instance) (kafka_server_replicamanager_leadercount{{{broker}}})",
                  "{{instance}} leader"),
            Query(f"sum by (instance) (kafka_server_replicamanager_partitioncount{{{broker}}})",
                  "{{instance}} replicas")]),
        Panel("How much disk do each broker's logs use?", [
            Query(f"sum by (instance) (kafka_log_log_size{{{broker}}})", "{{instance}}")],
              unit="bytes"),
    ]
    return dashboard("moldau-cluster", "Moldau / Cluster overview",
                     "Health and throughput of a Moldau cluster's brokers.", variables, panels)


def topics() -> dict:
    chosen = f'{SCOPE},topic=~"$topic",topic!=""'
    variables = scope_variables("kafka_server_replicamanager_leadercount") + [
        Variable("topic", "Topic", f"kafka_log_log_size{{{SCOPE}}}", "topic")]
    # kafka-exporter style series may come from every broker: max per partition counts each
    # partition once.
    per_partition = "max by (topic, partition) ({metric}{{" + chosen + "}})"
    panels = [
        Panel("How many bytes per second does each topic receive?", [
            Query(rate_by("topic", BYTES_IN, chosen), "{{topic}}")],
              unit="Bps"),
        Panel("How many bytes per second do consumers fetch from each topic?", [
            Query(rate_by("topic", BYTES_OUT, chosen), "{{topic}}")],
              unit="Bps"),
        Panel("How many messages per second does each topic receive?", [
            Query(rate_by("topic", MESSAGES_IN, chosen), "{{topic}}")],
              unit="cps"),
        Panel("How much disk does each topic take (all replicas)?", [
            Query(f"sum by (topic) (kafka_log_log_size{{{chosen}}})", "{{topic}}")],
              unit="bytes"),
        Panel("How many messages does each topic retain?", [
            Query("sum by (topic) ("
                  + per_partition.format(metric="kafka_topic_partition_current_offset")
                  + " - "
                  + per_partition.format(metric="kafka_topic_partition_oldest_offset")
                  + ")", "{{topic}}")]),
        Panel("Which topics have partitions under min ISR?", [
            Query(f"sum by (topic) (kafka_cluster_partition_underminisr{{{chosen}}})",
                  "{{topic}}")], thresholds=OK_UNLESS_ANY),
        Panel("Where does each partition end and start?", [
            Query(per_partition.format(metric="kafka_topic_partition_current_offset"),
                  "{{topic}}-{{partition}} end", instant=True),
            Query(per_partition.format(metric="kafka_topic_partition_oldest_offset"),
                  "{{topic}}-{{partition}} start", instant=True)], kind="table",
              width=24, height=10),
    ]
    return dashboard("moldau-topics", "Moldau / Topics",
                     "Traffic, size and replication of each topic.", variables, panels)


def partition_lag(groups: str) -> str:
    """Each group's lag per partition, as its coordinator exports it (once per partition;
    max keeps it so while a group moves to another coordinator)."""
    return f"max by (consumergroup, topic, partition) (kafka_consumergroup_lag{{{groups}}})"


def consumer_lag() -> dict:
    chosen = f'{SCOPE},consumergroup=~"$consumergroup",topic=~"$topic"'
    variables = scope_variables("kafka_consumergroup_current_offset") + [
        Variable("consumergroup", "Consumer group",
                 f"kafka_consumergroup_current_offset{{{SCOPE}}}", "consumergroup"),
        Variable("topic", "Topic",
                 f'kafka_consumergroup_current_offset{{{SCOPE},consumergroup=~"$consumergroup"}}',
                 "topic")]
    lag = partition_lag(chosen)
    committed_rate = ("max by (consumergroup, topic, partition) "
                      f"(rate(kafka_consumergroup_current_offset{{{chosen}}}{RATE}))")
    lag_thresholds = [("green", None), ("orange", 1000), ("red", 10000)]
    panels = [
        Panel("Is any group's lag growing?", [
            Query(f"sum by (consumergroup, topic) ({lag})", "{{consumergroup}} {{topic}}")],
              thresholds=lag_thresholds, width=24),
        Panel("How many messages per second does each group commit?", [
            Query(f"sum by (consumergroup, topic) ({committed_rate})",
                  "{{consumergroup}} {{topic}}")], unit="cps",
              description="The rate of the group's committed offsets: what it has finished."),
        Panel("How many messages per second are produced to those topics?", [
            Query("sum by (topic) (max by (topic, partition) (rate("
                  f'kafka_topic_partition_current_offset{{{SCOPE},topic=~"$topic"}}{RATE})))',
                  "{{topic}}")],
              unit="cps"),
        Panel("Which partitions lag the most?", [
            Query(f"topk(20, {lag})", "{{consumergroup}} {{topic}}-{{partition}}",
                  instant=True)], kind="table", unit="none", thresholds=lag_thresholds,
              width=24, height=10),
    ]
    return dashboard("moldau-consumer-lag", "Moldau / Consumer lag",
                     "How far each consumer group is behind the end of its partitions.",
                     variables, panels)


def kraft() -> dict:
    node = f'{SCOPE},instance=~"$node"'
    variables = scope_variables("kafka_server_raftmetrics_current_leader", ("node", "Node"))
    panels = [
        stat("Which node leads the quorum?",
             f"max(kafka_server_raftmetrics_current_leader{{{SCOPE}}})",
             [("red", None), ("green", 0)],
             description="The node id of the leader; -1 (red) means no leader is known."),
        stat("Do all nodes agree on the leader?",
             f"max(kafka_server_raftmetrics_current_leader{{{SCOPE}}}) - "
             f"min(kafka_server_raftmetrics_current_leader{{{SCOPE}}})",
             description="0 when every node names the same leader."),
        stat("What epoch is the quorum in?",
             f"max(kafka_server_raftmetrics_current_epoch{{{SCOPE}}})",
             [("blue", None)]),
        stat("How many leader elections in the last hour?",
             f"max(changes(kafka_server_raftmetrics_current_epoch{{{SCOPE}}}[1h]))",
             [("green", None), ("orange", 1), ("red", 5)]),
        active_controllers(),
        Panel("What role does each node play?", [
            Query(f"max by (instance, current_state) (kafka_server_raftmetrics_current_state"
                  f"{{{node}}})", "{{instance}} {{current_state}}", instant=True)],
              kind="table", width=4, height=4),
        Panel("Has each node's log caught up with the high watermark?", [
            Query(f"max by (instance) (kafka_server_raftmetrics_high_watermark{{{node}}})",
                  "{{instance}} high watermark"),
            Query(f"max by (instance) (kafka_server_raftmetrics_log_end_offset{{{node}}})",
                  "{{instance}} log end")]),
        Panel("How long does committing a metadata record take?", [
            Query(f"max by (instance) (kafka_server_raftmetrics_commit_latency_avg{{{node}}})",
                  "{{instance}}")], unit="ms",
              thresholds=[("green", None), ("orange", 100), ("red", 1000)]),
        Panel("How many metadata records per second are appended and fetched?", [
            Query(f"sum by (instance) (kafka_server_raftmetrics_append_records_rate{{{node}}})",
                  "{{instance}} appended"),
            Query(f"sum by (instance) (kafka_server_raftmetrics_fetch_records_rate{{{node}}})",
                  "{{instance}} fetched")], unit="cps"),
        Panel("Which leader and epoch does each node see?", [
            Query(f"max by (instance) (kafka_server_raftmetrics_current_leader{{{node}}})",
                  "{{instance}} leader"),
            Query(f"max by (instance) (kafka_server_raftmetrics_current_epoch{{{node}}})",
                  "{{instance}} epoch")]),
    ]
    return dashboard("moldau-kraft", "Moldau / KRaft quorum",
                     "Leadership, replication and latency of the metadata quorum.",
                     variables, panels)


def per_minute(counter: str, labels: str) -> str:
    return f"sum by ({labels}) (rate({counter}{{{OPERATOR_SCOPE}}}{RATE})) * 60"


def quantiles(histogram: str) -> list[Query]:
    """The median and the 99th percentile of an operator histogram."""
    return [Query(f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket"
                  f"{{{OPERATOR_SCOPE}}}{RATE})))", f"p{int(q * 100)}")
            for q in (0.5, 0.99)]


def operator() -> dict:
    """The operator's own metrics: it runs one replica at a time per namespace it is in."""
    variables = [Variable("namespace", "Namespace", "moldau_operator_reconciles_total",
                          "namespace")]
    panels = [
        stat("How many KafkaCluster reconciles failed in the last hour?",
             f"sum(increase(moldau_operator_reconcile_errors_total{{{OPERATOR_SCOPE}}}[1h]))",
             description="Specs that cannot run (InvalidSpec), objects the API server "
                         "refused (ApplyFailed) and unexpected errors."),
        stat("How many objects did the operator apply in the last hour?",
             f"sum(increase(moldau_operator_applied_objects_total{{{OPERATOR_SCOPE}}}[1h]))",
             [("blue", None)],
             description="A settled cluster needs none: a steady count means something "
                         "keeps changing."),
        stat("How many Topic reconciles failed in the last hour?",
             "sum(increase(moldau_operator_topic_reconciles_total"
             f'{{{OPERATOR_SCOPE},outcome!="ready"}}[1h]))'),
        Panel("How many KafkaCluster reconciles per minute, by outcome?", [
            Query(per_minute("moldau_operator_reconciles_total", "outcome"), "{{outcome}}")],
              unit="none", width=12),
        Panel("How long does a KafkaCluster reconcile take?",
              quantiles("moldau_operator_reconcile_duration_seconds"), unit="s",
              thresholds=[("green", None), ("orange", 10), ("red", 60)], width=12),
        Panel("Why do KafkaCluster reconciles fail?", [
            Query("sum by (reason) (increase(moldau_operator_reconcile_errors_total"
                  f"{{{OPERATOR_SCOPE}}}[1h]))", "{{reason}}")],
              thresholds=OK_UNLESS_ANY),
        Panel("Which objects does the operator apply, per minute?", [
            Query(per_minute("moldau_operator_applied_objects_total", "kind"), "{{kind}}")]),
        Panel("How many Topic reconciles per minute, by outcome?", [
            Query(per_minute("moldau_operator_topic_reconciles_total", "outcome"),
                  "{{outcome}}")]),
        Panel("How long does a Topic resource wait for its reconcile?",
              quantiles("moldau_operator_topic_reconcile_duration_seconds"), unit="s",
              thresholds=[("green", None), ("orange", 10), ("red", 60)],
              description="Topic resources are reconciled in batches: this is the time from "
                          "a change to its batch's end."),
        Panel("How many Topic resources go in one batch?",
              quantiles("moldau_operator_topic_batch_size"), unit="none"),
        Panel("How long does one batch of Topic resources take?",
              quantiles("moldau_operator_topic_batch_duration_seconds"), unit="s",
              thresholds=[("green", None), ("orange", 10), ("red", 60)]),
    ]
    return dashboard("moldau-operator", "Moldau / Operator",
                     "What the operator reconciles, how long it takes and why it fails.",
                     variables, panels)


DASHBOARDS = {
    "moldau-cluster.json": cluster_overview,
    "moldau-topics.json": topics,
    "moldau-consumer-lag.json": consumer_lag,
    "moldau-kraft.json": kraft,
    "moldau-operator.json": operator,
}


def render(build: object) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    for name, build in DASHBOARDS.items():
        (OUT_DIR / name).write_text(render(build))
    return 0


if __name__ == "__main__":
    sys.exit(main())
