"""`moldau operator`: registered through the moldau.commands group, its flags and their
environment fallbacks."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from moldau.cli import build_parser
from moldau.operator.cli import NAMESPACES_ENV, TOPIC_DELETION_TIMEOUT_ENV, _namespaces


def parse(*argv: str):
    return build_parser().parse_args(["operator", *argv])


def test_defaults_watch_every_namespace_and_serve_on_8080(monkeypatch) -> None:
    monkeypatch.delenv(NAMESPACES_ENV, raising=False)
    args = parse()
    assert _namespaces(args) == []
    assert args.http_port == 8080


def test_namespaces_repeat_and_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(NAMESPACES_ENV, "team-a, team-b,,")
    assert _namespaces(parse()) == ["team-a", "team-b"]
    # The command line wins over the environment.
    assert _namespaces(parse("--namespace", "x", "--namespace", "y", "--namespace", "x")) \
        == ["x", "y"]


@pytest.mark.parametrize("port", ["http", "70000", "-1"])
def test_a_bad_port_is_one_line_without_a_traceback(port: str) -> None:
    done = subprocess.run([sys.executable, "-m", "moldau.cli", "operator", "--http-port", port],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f"not a port number: '{port}'")



def test_the_operator_never_imports_the_broker() -> None:
    code = ("import sys, moldau.operator.main, moldau.operator.handlers; "
            "print(sorted(m for m in sys.modules if m.startswith('moldau.broker')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_a_kubeconfig_the_operator_says_so_in_one_line(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "KUBECONFIG": str(tmp_path / "missing")}
    done = subprocess.run([sys.executable, "-m", "moldau.cli", "operator"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("moldau operator: no Kubernetes configuration: ")


def test_only_the_topic_deletion_handler_puts_a_finalizer() -> None:
    """A finalizer would keep KafkaClusters from being deleted once the operator is gone;
    a Topic's holds it until its Kafka topic is deleted (or that is given up)."""
    import kopf

    import moldau.operator.handlers  # noqa: F401

    registry = kopf.get_default_registry()
    handlers = [*registry._spawning.get_all_handlers(), *registry._changing.get_all_handlers()]
    assert {h.selector.any_name for h in handlers} == {"kafkaclusters", "topics"}
    assert [(h.selector.any_name, h.id) for h in handlers if h.requires_finalizer] == [
        ("topics", "topic_deleted")]


def test_the_topic_deletion_timeout_comes_from_the_flag_or_the_environment(monkeypatch
                                                                          ) -> None:
    monkeypatch.delenv(TOPIC_DELETION_TIMEOUT_ENV, raising=False)
    assert parse().topic_deletion_timeout == 60.0
    assert parse("--topic-deletion-timeout", "5").topic_deletion_timeout == 5.0
    monkeypatch.setenv(TOPIC_DELETION_TIMEOUT_ENV, "90")
    assert parse().topic_deletion_timeout == 90.0
    done = subprocess.run([sys.executable, "-m", "moldau.cli", "operator",
                           "--topic-deletion-timeout", "soon"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("not a number of seconds: 'soon'")


def test_a_replica_started_later_has_a_lower_peering_priority() -> None:
    # kopf pauses every peer sharing a priority, and the peer of highest priority acts.
    from moldau.operator.main import peer_priority

    first = peer_priority()
    time.sleep(0.01)
    second = peer_priority()
    assert 0 < second < first < 2**63
