"""Resolve Kubernetes DNS names (`*.svc`, `*.svc.cluster.local`) from a host process.

The host's resolver does not know the cluster's names; the test bed's CoreDNS does. With
`install(server)` this process asks that server for them (through dns_probe) and everything
else as before; e2e/kube/cluster_dns/sitecustomize.py does the same for a child process
started with MOLDAU_E2E_CLUSTER_DNS set (the operator run on the host).
"""

from __future__ import annotations

import socket
from typing import Any

from e2e.kube.dns_probe import resolve

DOMAIN = "cluster.local"
SERVER_ENV = "MOLDAU_E2E_CLUSTER_DNS"


def cluster_name(host: str) -> str | None:
    """The fully qualified cluster name of `host`, or None if it is not one."""
    host = host.rstrip(".")
    if host.endswith(f".svc.{DOMAIN}"):
        return host
    if host.endswith(".svc"):
        return f"{host}.{DOMAIN}"
    return None


def install(server: str) -> None:
    original = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = cluster_name(host) if isinstance(host, str) else None
        if name is not None:
            addresses = resolve(server, name)
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, f"{name}: no such cluster name")
            return [entry for address in addresses
                    for entry in original(address, port, *args, **kwargs)]
        return original(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
