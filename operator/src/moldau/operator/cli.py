"""`moldau operator`: run the KafkaCluster operator against the cluster of the kubeconfig (or
the pod's service account)."""

from __future__ import annotations

import argparse
import os
from typing import Any

NAMESPACES_ENV = "MOLDAU_OPERATOR_NAMESPACES"
DEFAULT_HTTP_PORT = 8080


def _namespaces(args: argparse.Namespace) -> list[str]:
    """--namespace wins; else MOLDAU_OPERATOR_NAMESPACES; empty means every namespace."""
    if args.namespace:
        return list(dict.fromkeys(args.namespace))
    text = os.environ.get(NAMESPACES_ENV, "")
    return [name.strip() for name in text.split(",") if name.strip()]


def _run(args: argparse.Namespace) -> int:
    from moldau.operator.main import run

    return run(namespaces=_namespaces(args), http_port=args.http_port,
               standalone=args.standalone, log_level=args.log_level)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return port


def add_commands(commands: Any) -> None:
    """Add `operator` to the `moldau` command's subparsers."""
    parser = commands.add_parser(
        "operator", help="run the Kubernetes operator for KafkaCluster resources",
        description="Reconcile KafkaCluster resources (moldau.io/v1alpha1) into Moldau "
                    "clusters: StatefulSets, Services, ConfigMaps, a PodDisruptionBudget. "
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
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    parser.set_defaults(run=_run)
