"""Names and labels of what the operator makes for a KafkaCluster, and the node ids of pools.

Every object is named after the cluster: `<cluster>-<pool>` StatefulSets (pods
`<cluster>-<pool>-<ordinal>`), the headless `<cluster>-nodes` Service that gives each pod its
DNS name, the `<cluster>-bootstrap` Service clients start from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from moldau.operator.pki import CA_CERT, CLIENTS_CA_CERT
from moldau.operator.resource import CLUSTER_LABEL
from moldau.operator.spec import REPLICATION_PORT, ClusterSpec, NodePool

# Each pool owns node ids base .. base+NODE_ID_BLOCK-1 (the CRD caps replicas below this).
NODE_ID_BLOCK = 100
POOL_LABEL = "moldau.io/pool"
# On pods of pools with the broker role: the bootstrap Service selects them.
BROKER_LABEL = "moldau.io/broker"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
DATA_VOLUME = "data"
DATA_DIR = "/var/lib/moldau/data"
CONFIG_DIR = "/etc/moldau"
CONFIG_FILE = "server.properties"
# A secured cluster's certificates in each pod: `<pod>.pem` (the node's key and chain) and
# the CA bundles, from the `<cluster>-broker-certs` Secret (pki.py).
CERTS_DIR = "/etc/moldau/certs"
CERTS_VOLUME = "certs"


def headless_service(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-nodes"


def bootstrap_service(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-bootstrap"


def bootstrap_servers(name: str, namespace: str, ports: Iterable[int]) -> list[str]:
    """host:port of a cluster's bootstrap Service on each of the given (internal
    listeners') ports."""
    return [f"{name}-bootstrap.{namespace}.svc:{port}" for port in ports]


def admin_ports(cluster: ClusterSpec) -> list[int]:
    """The ports the operator's admin client bootstraps from: a secured cluster's
    replication listener, where the operator's certificate lets it in; else the internal
    listeners."""
    if cluster.secured:
        return [REPLICATION_PORT]
    return [listener.port for listener in cluster.listeners if not listener.external]


def statefulset(cluster: ClusterSpec, pool: NodePool) -> str:
    return f"{cluster.name}-{pool.name}"


def config_map(cluster: ClusterSpec, pool: NodePool) -> str:
    return f"{cluster.name}-{pool.name}-config"


def cluster_ca_file() -> str:
    return f"{CERTS_DIR}/{CA_CERT}"


def clients_ca_file() -> str:
    return f"{CERTS_DIR}/{CLIENTS_CA_CERT}"


def service_account(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-node"


def pod(cluster: ClusterSpec, pool: NodePool, ordinal: int) -> str:
    return f"{statefulset(cluster, pool)}-{ordinal}"


def pod_dns_suffix(cluster: ClusterSpec) -> str:
    """What follows a pod's name in its DNS name."""
    return f"{headless_service(cluster)}.{cluster.namespace}.svc.cluster.local"


def pod_dns(cluster: ClusterSpec, pool: NodePool, ordinal: int) -> str:
    return f"{pod(cluster, pool, ordinal)}.{pod_dns_suffix(cluster)}"


def labels(cluster: ClusterSpec, pool: NodePool | None = None,
           component: str = "kafka") -> dict[str, str]:
    """The recommended app.kubernetes.io labels and Moldau's own."""
    result = {"app.kubernetes.io/name": "moldau", "app.kubernetes.io/instance": cluster.name,
              "app.kubernetes.io/component": component,
              "app.kubernetes.io/managed-by": "moldau-operator", CLUSTER_LABEL: cluster.name}
    if pool is not None:
        result[POOL_LABEL] = pool.name
    return result


def metadata(cluster: ClusterSpec, name: str, pool: NodePool | None = None,
             component: str = "kafka") -> dict[str, object]:
    """An object's metadata: its name in the cluster's namespace, with the cluster's labels."""
    return {"name": name, "namespace": cluster.namespace,
            "labels": labels(cluster, pool, component)}


def selector(cluster: ClusterSpec, pool: NodePool | None = None) -> dict[str, str]:
    """The labels that pick a cluster's (or a pool's) pods: stable, never changed."""
    result = {CLUSTER_LABEL: cluster.name, "app.kubernetes.io/component": "kafka"}
    if pool is not None:
        result[POOL_LABEL] = pool.name
    return result


def assign_node_id_bases(pools: Iterable[str], known: Mapping[str, int]) -> dict[str, int]:
    """Each pool's first node id: pools keep the base they had; a new pool takes the lowest
    free block, so adding or reordering pools never renumbers a node."""
    bases = {name: base for name, base in known.items()}
    taken = set(bases.values())
    for name in pools:
        if name not in bases:
            base = next(n * NODE_ID_BLOCK for n in range(len(taken) + 1)
                        if n * NODE_ID_BLOCK not in taken)
            bases[name] = base
            taken.add(base)
    return bases
