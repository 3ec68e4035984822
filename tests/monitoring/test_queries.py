"""monitoring.queries' reading of PromQL: the vector selectors of an expression and the
label_values of a dashboard variable."""

from __future__ import annotations

from monitoring.queries import variable_label_values, vector_selectors


def test_selectors_skip_functions_groupings_ranges_and_keywords():
    expr = ('sum by (topic, instance) (rate(kafka_x_total{topic!=""}[5m] offset 1m)) > 1e3 '
            "and on (instance) up unless ignoring(job) moldau:lag:sum")
    assert vector_selectors(expr) == ['kafka_x_total{topic!=""}', "up", "moldau:lag:sum"]


def test_selectors_skip_one_to_many_modifiers_with_or_without_labels():
    expr = ("a - on (topic) group_right b * on (topic) group_left (owner) c "
            "+ ignoring (x) group_left d")
    assert vector_selectors(expr) == ["a", "b", "c", "d"]


def test_selectors_keep_matchers_with_regex_and_braces_of_both_sides():
    expr = ('node_a{mountpoint=~"/var/lib/moldau.*",fstype!~"tmpfs|overlay"} '
            "/ node_b{mountpoint=~\"/x\"} * 100 < 15")
    assert vector_selectors(expr) == [
        'node_a{mountpoint=~"/var/lib/moldau.*",fstype!~"tmpfs|overlay"}',
        'node_b{mountpoint=~"/x"}']


def test_variable_label_values_splits_selector_and_label():
    dashboard = {"templating": {"list": [
        {"type": "datasource", "name": "datasource"},
        {"type": "query", "name": "topic",
         "query": {"query": 'label_values(kafka_log_log_size{namespace=~"$namespace"}, topic)'}},
        {"type": "query", "name": "raw", "query": {"query": "up"}}]}}
    assert variable_label_values(dashboard) == {
        "topic": ('kafka_log_log_size{namespace=~"$namespace"}', "topic"),
        "raw": ("up", None)}
