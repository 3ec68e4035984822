"""The reconcile's certificate step for a secured cluster: read the CA and certificate
Secrets, let pki.py decide what they must hold (new CAs, renewals, a certificate per node
with its names), apply them, and give the operator's own client settings for the cluster's
mutual-TLS replication listener.

A renewal only rewrites Secrets: the kubelet updates the mounted files and the brokers reload
them, so no pod restarts. `moldau.io/force-renew` on the KafkaCluster (`cluster-ca`,
`clients-ca`, or both, comma-separated) renews a CA now, as Strimzi's force-renew does.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from moldau.operator import naming, pki
from moldau.operator.apply import Change, apply_all
from moldau.operator.external import ExternalAddresses
from moldau.operator.pki import CaSettings, PkiInput, plan
from moldau.operator.pools import Refusal
from moldau.operator.spec import ClusterSpec

FORCE_RENEW = "moldau.io/force-renew"
SECURITY_SWITCH = "SecuritySwitchRefused"
CA_NAMES = frozenset({pki.CLUSTER_CA, pki.CLIENTS_CA})
NOT_FOUND = 404


def pki_secret_names(cluster: ClusterSpec) -> list[str]:
    name = cluster.name
    return [*(secret(name, which) for which in (pki.CLUSTER_CA, pki.CLIENTS_CA)
              for secret in (pki.ca_key_secret, pki.ca_cert_secret)),
            pki.broker_secret(name), pki.operator_secret(name)]


def security_switch(cluster: ClusterSpec, statefulsets: Mapping[str, Mapping[str, Any]]
                    ) -> Refusal | None:
    """Security turned on or off for nodes that run: refused. Their controller and
    replication listeners would change protocol pod by pod, and nodes of the old and the new
    kind could not reach each other in the middle of the roll."""
    for pool, sts in sorted(statefulsets.items()):
        volumes = ((((sts.get("spec") or {}).get("template") or {}).get("spec") or {})
                   .get("volumes") or [])
        has_certs = any(volume.get("name") == naming.CERTS_VOLUME for volume in volumes)
        if has_certs != cluster.secured:
            now, then = ("plain", "mutual TLS") if cluster.secured else ("mutual TLS", "plain")
            return Refusal(SECURITY_SWITCH, (
                f"node pool '{pool}' runs with {now} between its nodes; the spec asks for "
                f"{then} (TLS, authentication or authorization "
                f"{'added' if cluster.secured else 'removed'}), which a running cluster "
                "cannot switch: create a new cluster and move the data"))
    return None


def force_renew(annotations: Mapping[str, Any] | None) -> frozenset[str]:
    value = str((annotations or {}).get(FORCE_RENEW) or "")
    return frozenset(part.strip() for part in value.split(",") if part.strip()) & CA_NAMES


def node_names(cluster: ClusterSpec, external: ExternalAddresses | None,
               host_ips: Mapping[str, str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per pod, the DNS names and addresses its certificate must carry: its own DNS names,
    the bootstrap Service's, and for brokers the external addresses clients use."""
    bootstrap = naming.bootstrap_service(cluster)
    service_names = [bootstrap, f"{bootstrap}.{cluster.namespace}",
                     f"{bootstrap}.{cluster.namespace}.svc",
                     f"{bootstrap}.{cluster.namespace}.svc.cluster.local"]
    external_hosts = _external_hosts(external)
    dns: dict[str, list[str]] = {}
    ips: dict[str, list[str]] = {}
    for pool in cluster.pools:
        for ordinal in range(pool.replicas):
            pod = naming.pod(cluster, pool, ordinal)
            full = naming.pod_dns(cluster, pool, ordinal)
            names = [full, full.removesuffix(".cluster.local")]
            addresses: list[str] = []
            if pool.is_broker:
                names += service_names
                for host in external_hosts.get((pool.name, ordinal), []):
                    (addresses if _is_ip(host) else names).append(host)
                if any(listener.type == "nodeport" for listener in cluster.listeners) \
                        and host_ips.get(pod):
                    addresses.append(host_ips[pod])
            dns[pod] = sorted(set(names))
            ips[pod] = sorted(set(addresses))
    return dns, ips


def _external_hosts(external: ExternalAddresses | None) -> dict[tuple[str, int], list[str]]:
    """(pool, ordinal) -> the hosts of its external addresses (`<ordinal>.<LISTENER>=host:port`
    lines; an empty host is the node's address)."""
    hosts: dict[tuple[str, int], list[str]] = {}
    for pool, lines in (external.files if external else {}).items():
        for line in lines:
            key, _, address = line.partition("=")
            host = address.rpartition(":")[0]
            ordinal = key.partition(".")[0]
            if host and ordinal.isdigit():
                hosts.setdefault((pool, int(ordinal)), []).append(host)
    return hosts


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def read_secrets(client: AsyncClient, namespace: str, names: list[str]
                       ) -> dict[str, dict[str, bytes]]:
    found = {}
    for name in names:
        try:
            secret = await client.get(Secret, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == NOT_FOUND:
                continue
            raise
        found[name] = {key: base64.b64decode(value)
                       for key, value in (secret.data or {}).items()}
    return found


def secret_manifest(metadata: Mapping[str, Any], data: Mapping[str, bytes],
                    owner: Mapping[str, Any]) -> dict[str, Any]:
    """An Opaque Secret with `metadata` (name, namespace, labels), owned by `owner`, its
    data base64-encoded as the API wants it; read_secrets reads it back."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**metadata, "ownerReferences": [dict(owner)]},
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def operator_security(secret: Mapping[str, bytes]) -> dict[str, str]:
    """The operator's admin client settings: mutual TLS with its certificate."""
    return {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": secret[pki.OPERATOR_CERT].decode(),
            "ssl.keystore.key": secret[pki.OPERATOR_KEY].decode(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": secret[pki.CA_CERT].decode()}


async def ensure_certificates(client: AsyncClient, cluster: ClusterSpec,
                              owner: Mapping[str, Any], annotations: Mapping[str, Any] | None,
                              external: ExternalAddresses | None = None,
                              host_ips: Mapping[str, str] | None = None,
                              ) -> tuple[dict[str, str], list[Change]]:
    """Apply the cluster's certificate Secrets; the operator's client settings and what
    changed. Raises pki.PkiError when existing Secrets cannot be used."""
    names = pki_secret_names(cluster)
    existing = await read_secrets(client, cluster.namespace, names)
    dns, ips = node_names(cluster, external, host_ips or {})
    inputs = PkiInput(
        cluster=cluster.name, namespace=cluster.namespace, broker_pods=sorted(dns),
        dns_names=dns, ip_addresses=ips,
        cluster_ca=CaSettings(cluster.cluster_ca.validity_days,
                              cluster.cluster_ca.renewal_days),
        clients_ca=CaSettings(cluster.clients_ca.validity_days,
                              cluster.clients_ca.renewal_days),
        force_renew=force_renew(annotations))
    wanted = plan(inputs, existing)
    manifests = [secret_manifest(naming.metadata(cluster, name, component="certificates"),
                                 data, owner)
                 for name, data in wanted.items() if existing.get(name) != data]
    changes = await apply_all(client, manifests) if manifests else []
    return operator_security(wanted[pki.operator_secret(cluster.name)]), changes
