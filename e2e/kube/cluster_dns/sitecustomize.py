"""Loaded by Python at start when this folder is on PYTHONPATH: cluster names through the
DNS server MOLDAU_E2E_CLUSTER_DNS names (e2e/kube/cluster_names.py)."""

import os

if os.environ.get("MOLDAU_E2E_CLUSTER_DNS"):
    from e2e.kube.cluster_names import install

    install(os.environ["MOLDAU_E2E_CLUSTER_DNS"])
