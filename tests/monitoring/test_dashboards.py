"""Moldau's Grafana dashboards, checked without a Grafana: through grafana-foundation-sdk's
Grafana 11.6 models (which drop keys they do not know, so a misspelled key shows), and for
layout, datasource references, refIds, variables and legends."""

from __future__ import annotations

import copy
import json

import pytest
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from monitoring import dashboards as generator
from monitoring.queries import (
    OPERATOR_DASHBOARD,
    iter_panel_queries,
    iter_panels,
    kept_labels,
    legend_labels,
    load_dashboards,
    variable_queries,
    variables_used,
)

DASHBOARDS = load_dashboards()
NAMES = sorted(DASHBOARDS)
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}
SCOPE_MATCHERS = ('namespace=~"$namespace"', 'moldau_io_cluster=~"$cluster"')

register_default_plugins()


def plain(value: object) -> object:
    """The SDK's to_json() output as plain JSON values."""
    return json.loads(json.dumps(value, default=lambda obj: obj.to_json()))


def dropped_keys(original: object, loaded: object, path: str = "") -> list[str]:
    """Paths of keys in `original` that are missing or different in `loaded`."""
    if isinstance(original, dict):
        if not isinstance(loaded, dict):
            return [path or "/"]
        found = []
        for key, value in original.items():
            where = f"{path}/{key}"
            if key not in loaded:
                found.append(where)
            else:
                found += dropped_keys(value, loaded[key], where)
        return found
    if isinstance(original, list):
        if not isinstance(loaded, list) or len(loaded) != len(original):
            return [path]
        return [where for index, (a, b) in enumerate(zip(original, loaded, strict=True))
                for where in dropped_keys(a, b, f"{path}/{index}")]
    return [] if original == loaded else [path]


def through_sdk(dashboard: dict) -> dict:
    return plain(Dashboard.from_json(copy.deepcopy(dashboard)).to_json())


def test_there_is_a_dashboard_for_each_area():
    titles = {d["title"] for d in DASHBOARDS.values()}
    assert titles == {"Moldau / Cluster overview", "Moldau / Topics", "Moldau / Consumer lag",
                      "Moldau / KRaft quorum", "Moldau / Operator"}


@pytest.mark.parametrize("name", sorted(generator.DASHBOARDS))
def test_committed_json_is_what_the_generator_writes(name):
    path = generator.OUT_DIR / name
    assert path.read_text() == generator.render(generator.DASHBOARDS[name]), (
        f"{path} is stale: run `python monitoring/dashboards.py`")


@pytest.mark.parametrize("name", NAMES)
def test_grafana_model_keeps_every_key(name):
    assert dropped_keys(DASHBOARDS[name], through_sdk(DASHBOARDS[name])) == []


def test_a_misspelled_key_is_reported():
    broken = copy.deepcopy(DASHBOARDS["moldau-cluster.json"])
    broken["panels"][6]["fieldConfig"]["defaults"]["unti"] = "bytes"
    broken["panels"][6]["targets"][0]["legendFromat"] = "{{instance}}"
    broken["refersh"] = "1m"
    assert sorted(dropped_keys(broken, through_sdk(broken))) == [
        "/panels/6/fieldConfig/defaults/unti", "/panels/6/targets/0/legendFromat", "/refersh"]


@pytest.mark.parametrize("name", NAMES)
def test_panels_fit_the_grid_without_overlapping(name):
    taken: dict[tuple[int, int], str] = {}
    for panel in iter_panels(DASHBOARDS[name]):
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"'{panel['title']}' overlaps '{taken[x, y]}'"
                taken[x, y] = panel["title"]


@pytest.mark.parametrize("name", NAMES)
def test_every_datasource_is_the_datasource_variable(name):
    dashboard = DASHBOARDS[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    sources = [panel["datasource"] for panel in iter_panels(dashboard)]
    sources += [t["datasource"] for p in iter_panels(dashboard) for t in p["targets"]]
    sources += [v["datasource"] for v in variables.values() if v["type"] == "query"]
    assert sources and all(s == {"type": "prometheus", "uid": "${datasource}"} for s in sources)


@pytest.mark.parametrize("name", NAMES)
def test_ref_ids_are_unique_within_each_panel(name):
    for panel in iter_panels(DASHBOARDS[name]):
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_asks_a_question_with_a_unit_and_thresholds(name):
    for panel in iter_panels(DASHBOARDS[name]):
        assert panel["title"].endswith("?"), panel["title"]
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"], panel["title"]
        steps = defaults["thresholds"]["steps"]
        assert steps[0]["value"] is None and all(s["value"] is not None for s in steps[1:])


@pytest.mark.parametrize("name", NAMES)
def test_scope_variables_default_to_everything_even_unlabelled_series(name):
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    for var in variables.values():
        if var["type"] == "query":
            assert var["includeAll"] and var["allValue"] == ".*", var["name"]
            assert var["current"]["value"] == ["$__all"], var["name"]
    # The operator's series name the namespace it runs in, not a cluster.
    wanted = {"namespace"} if name == OPERATOR_DASHBOARD else {"namespace", "cluster"}
    assert wanted <= set(variables)


def test_every_query_selects_on_namespace_and_cluster():
    for query in iter_panel_queries(DASHBOARDS):
        matchers = SCOPE_MATCHERS[:1] if query.dashboard == OPERATOR_DASHBOARD \
            else SCOPE_MATCHERS
        for matcher in matchers:
            assert matcher in query.expr, f"{query.where} lacks {matcher}"


def test_every_variable_a_query_uses_is_defined():
    for name, dashboard in DASHBOARDS.items():
        defined = {v["name"] for v in dashboard["templating"]["list"]} | GRAFANA_VARIABLES
        exprs = [q.expr for q in iter_panel_queries({name: dashboard})]
        exprs += list(variable_queries(dashboard).values())
        for expr in exprs:
            assert variables_used(expr) <= defined, f"{name}: {expr}"


def test_every_legend_label_is_kept_by_its_query():
    for query in iter_panel_queries(DASHBOARDS):
        wanted = legend_labels(query.legend)
        if wanted:
            kept = kept_labels(query.expr)
            assert kept is not None, f"{query.where}: legend needs a top-level `agg by (...)`"
            assert wanted <= kept, f"{query.where}: legend uses {sorted(wanted - kept)}"


def test_a_legend_label_the_query_aggregates_away_is_reported():
    assert legend_labels("{{topic}}-{{partition}}") == {"topic", "partition"}
    assert kept_labels("sum by (topic) (kafka_log_log_size)") == {"topic"}
    assert kept_labels("topk(20, max by (a, b) (x))") == {"a", "b"}
    assert kept_labels("sum(rate(x[1m])) by (topic)") is None
