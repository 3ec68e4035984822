"""`moldau operator`: run the KafkaCluster and Topic operator against the cluster of the
kubeconfig (or the pod's service account)."""

from __future__ import annotations

import argparse
import os
from typing import Any

NAMESPACES_ENV = "MOLDAU_OPERATOR_NAMESPACES"
TOPIC_DELETION_TIMEOUT_ENV = "MOLDAU_OPERATOR_TOPIC_DELETION_TIMEOUT"
DEFAULT_HTTP_PORT = 8080
DEFAULT_TOPIC_DELETION_TIMEOUT = 60.0


def _namespaces(args: argparse.Namespace) -> list[str]:
    """--namespace wins; else MOLDAU_OPERATOR_NAMESPACES; empty means every namespace."""
    if args.namespace:
        return list(dict.fromkeys(args.namespace))
    text = os.environ.get(NAMESPACES_ENV, "")
    return [name.strip() for name in text.split(",") if name.strip()]


def _run(args: argparse.Namespace) -> int:
    from moldau.operator.main import run

    return run(namespaces=_namespaces(args), http_port=args.http_port,
               standalone=args.standalone, log_level=args.log_level,
               topic_deletion_timeout=args.topic_deletion_timeout)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return seconds


def _default_deletion_timeout() -> float | str:
    """$MOLDAU_OPERATOR_TOPIC_DELETION_TIMEOUT, checked by argparse like the option."""
    return os.environ.get(TOPIC_DELETION_TIMEOUT_ENV) or DEFAULT_TOPIC_DELETION_TIMEOUT


def add_commands(commands: Any) -> None:
    """Add `operator` to the `moldau` command's subparsers."""
    parser = commands.add_parser(
        "operator", help="run the Kubernetes operator for KafkaCluster and Topic resources",
        description="Reconcile KafkaCluster resources (moldau.io/v1alpha1) into Moldau "
                    "clusters: StatefulSets, Services, ConfigMaps, a PodDisruptionBudget; "
                    "and Topic resources into their clusters' Kafka topics. "
                    "Uses the kubeconfig ($KUBECONFIG) or, in a pod, its service account.")
    parser.add_argument("--namespace", metavar="NS", action="append", default=[],
                        help="watch this namespace; repeat as needed (default: every "
                             f"namespace, or ${NAMESPACES_ENV}, comma-separated)")
    parser.add_argument("--http-port", type=_port, default=DEFAULT_HTTP_PORT,
                        help="port serving /metrics (Prometheus) and /healthz "
                             f"(default {DEFAULT_HTTP_PORT})")
    parser.add_argument("--standalone", action="store_true",
                        help="skip peering: for a single operator where kopf's peering "
                             "resources are not installed")
    parser.add_argument("--topic-deletion-timeout", metavar="SECONDS", type=_seconds,
                        default=_default_deletion_timeout(),
                        help="how long a deleted Topic waits for its KafkaCluster to delete "
                             "the Kafka topic before its finalizer is released anyway "
                             f"(default {DEFAULT_TOPIC_DELETION_TIMEOUT:.0f}, or "
                             f"${TOPIC_DELETION_TIMEOUT_ENV})")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    parser.set_defaults(run=_run)
