"""Why a pod restarts: the reasons from what it runs against what its StatefulSet wants."""

from __future__ import annotations

from moldau.operator.restarts import (
    CONFIG_CHANGED,
    FILE_SYSTEM_RESIZE,
    IMAGE_CHANGED,
    MANUAL,
    POD_TEMPLATE_CHANGED,
    PodFacts,
    Wanted,
    explain,
    is_set,
    pod_facts,
    restart_reasons,
)

WANTED = Wanted("h2", "moldau:2", "rev-2")


def test_a_current_pod_has_no_reason() -> None:
    assert restart_reasons(PodFacts("h2", "moldau:2", "rev-2"), WANTED) == ()
    # A StatefulSet that has no update revision yet says nothing about revisions.
    assert restart_reasons(PodFacts("h2", "moldau:2", "rev-1"), Wanted("h2", "moldau:2")) == ()


def test_each_change_is_named_and_the_template_reason_only_for_what_else_changed() -> None:
    assert restart_reasons(PodFacts("h1", "moldau:2", "rev-1"), WANTED) == (CONFIG_CHANGED,)
    assert restart_reasons(PodFacts("h2", "moldau:1", "rev-1"), WANTED) == (IMAGE_CHANGED,)
    assert restart_reasons(PodFacts("h1", "moldau:1", "rev-1"), WANTED) == (
        CONFIG_CHANGED, IMAGE_CHANGED)
    assert restart_reasons(PodFacts("h2", "moldau:2", "rev-1"), WANTED) == (
        POD_TEMPLATE_CHANGED,)
    assert restart_reasons(PodFacts("h2", "moldau:2", "rev-2", manual=True,
                                    resize_pending=True), WANTED) == (MANUAL, FILE_SYSTEM_RESIZE)


def test_reasons_are_explained_in_words() -> None:
    assert explain((CONFIG_CHANGED, MANUAL)) == (
        "its config changed; the moldau.io/manual-rolling-update annotation asks for it")


def test_the_annotation_counts_only_when_true_as_strimzis_does() -> None:
    assert is_set({"moldau.io/manual-rolling-update": "true"})
    assert is_set({"moldau.io/manual-rolling-update": "True"})
    assert not is_set({"moldau.io/manual-rolling-update": "false"})
    assert not is_set({"strimzi.io/manual-rolling-update": "true"})
    assert not is_set(None)


def test_facts_are_read_from_a_pod_object() -> None:
    pod = {"metadata": {"annotations": {"moldau.io/config-hash": "h1",
                                        "moldau.io/manual-rolling-update": "true"},
                        "labels": {"controller-revision-hash": "kc-brokers-abc"}},
           "spec": {"containers": [{"name": "sidecar", "image": "other"},
                                   {"name": "kafka", "image": "moldau:1"}]}}
    assert pod_facts(pod, resize_pending=True) == PodFacts("h1", "moldau:1", "kc-brokers-abc",
                                                           True, True)
    assert pod_facts({}) == PodFacts(None, None, None)
