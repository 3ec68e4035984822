"""A KafkaCluster's spec as typed values, and the checks the CRD's schema cannot make.

The API server already refuses what the schema and its CEL rules catch (types, enums,
minimums, name patterns); `parse_spec` raises SpecError for the rest (a cluster without a
controller, duplicate names, unknown config keys), whose message the status reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moldau.operator.config_keys import config_problems

CONTROLLER = "controller"
BROKER = "broker"
# Ports the operator uses on every node; listeners may not take them.
CONTROLLER_PORT = 9090
REPLICATION_PORT = 9091
HTTP_PORT = 9404
RESERVED_PORTS = {CONTROLLER_PORT: "the controller listener",
                  REPLICATION_PORT: "the replication listener",
                  HTTP_PORT: "metrics and health"}
# A StatefulSet `<cluster>-<pool>` labels its pods `controller-revision-hash=<name>-<10
# characters>`, and label values stop at 63 characters.
MAX_STATEFULSET_NAME = 52


class SpecError(ValueError):
    """The spec cannot be run; the message says why, for the status and the events."""


@dataclass(frozen=True)
class Storage:
    size: str
    storage_class: str | None = None
    delete_claim: bool = False


@dataclass(frozen=True)
class NodePool:
    name: str
    roles: frozenset[str]
    replicas: int
    storage: Storage
    resources: Mapping[str, Any] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    template: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_controller(self) -> bool:
        return CONTROLLER in self.roles

    @property
    def is_broker(self) -> bool:
        return BROKER in self.roles


SCRAM = "scram-sha-512"
TLS_AUTH = "tls"


@dataclass(frozen=True)
class Listener:
    name: str
    port: int
    type: str  # internal | nodeport | loadbalancer
    tls: bool = False
    authentication: str | None = None  # scram-sha-512 | tls

    @property
    def security_protocol(self) -> str:
        """Kafka's security protocol of the listener."""
        if self.authentication == SCRAM:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    @property
    def kafka_name(self) -> str:
        """Kafka's listener name: upper case (`plain` -> PLAIN)."""
        return self.name.upper()

    @property
    def external(self) -> bool:
        return self.type != "internal"


@dataclass(frozen=True)
class CaSpec:
    """A certificate authority the operator runs (Strimzi's clusterCa / clientsCa)."""

    validity_days: int = 365
    renewal_days: int = 30


@dataclass(frozen=True)
class Authorization:
    """`authorization: simple`: Kafka's StandardAuthorizer with the spec's super users."""

    super_users: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    namespace: str
    image: str
    pools: tuple[NodePool, ...]
    listeners: tuple[Listener, ...]
    config: Mapping[str, str]
    rack_topology_key: str | None = None
    metrics: bool = True
    # After a broker pool grows, move partitions until brokers are balanced.
    rebalance_on_scale: bool = True
    # Bytes per second for the partition moves of drains and rebalances (None: unthrottled).
    replication_throttle: int | None = None
    authorization: Authorization | None = None
    cluster_ca: CaSpec = CaSpec()
    clients_ca: CaSpec = CaSpec()

    @property
    def secured(self) -> bool:
        """Any listener with TLS or authentication, or authorization on: then the operator
        runs the CAs and the nodes' own listeners (controller, replication) speak mutual
        TLS, so no one reaches the cluster's inside without a certificate of its CA."""
        return self.authorization is not None or any(
            listener.tls or listener.authentication for listener in self.listeners)

    @property
    def controller_pools(self) -> tuple[NodePool, ...]:
        return tuple(pool for pool in self.pools if pool.is_controller)

    @property
    def broker_pools(self) -> tuple[NodePool, ...]:
        return tuple(pool for pool in self.pools if pool.is_broker)

    def pool(self, name: str) -> NodePool:
        return next(pool for pool in self.pools if pool.name == name)


def _pool(raw: Mapping[str, Any]) -> NodePool:
    storage = raw.get("storage") or {}
    return NodePool(
        name=raw["name"], roles=frozenset(raw.get("roles") or ()),
        replicas=int(raw.get("replicas", 1)),
        storage=Storage(size=str(storage.get("size", "1Gi")),
                        storage_class=storage.get("storageClassName"),
                        delete_claim=bool(storage.get("deleteClaim", False))),
        resources=raw.get("resources") or {}, affinity=raw.get("affinity") or {},
        tolerations=tuple(raw.get("tolerations") or ()), template=raw.get("template") or {})


def _listener(raw: Mapping[str, Any]) -> Listener:
    authentication = (raw.get("authentication") or {}).get("type")
    return Listener(raw["name"], int(raw["port"]), raw.get("type", "internal"),
                    tls=bool(raw.get("tls", False)), authentication=authentication)


def _authorization(raw: Mapping[str, Any] | None) -> Authorization | None:
    if not raw:
        return None
    return Authorization(super_users=tuple(str(user) for user in raw.get("superUsers") or ()))


def _ca(raw: Mapping[str, Any] | None) -> CaSpec:
    raw = raw or {}
    return CaSpec(validity_days=int(raw.get("validityDays", 365)),
                  renewal_days=int(raw.get("renewalDays", 30)))


def _duplicates(values: list[Any]) -> list[Any]:
    return sorted({value for value in values if values.count(value) > 1}, key=str)


def _throttle(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SpecError(f"replicationThrottle must be a number of bytes per second, "
                        f"not {value!r}") from None


def broker_image(spec: Mapping[str, Any], default_image: str) -> str:
    """spec.image, else the default image at spec.version's tag, else the default image."""
    if spec.get("image"):
        return str(spec["image"])
    if spec.get("version"):
        repository = default_image.rsplit("@", 1)[0]
        if ":" in repository.rsplit("/", 1)[-1]:
            repository = repository.rsplit(":", 1)[0]
        return f"{repository}:{spec['version']}"
    return default_image


def parse_spec(name: str, namespace: str, spec: Mapping[str, Any],
               default_image: str) -> ClusterSpec:
    """The spec as typed values; SpecError (every problem, one per line) if it cannot run."""
    pools = tuple(_pool(raw) for raw in spec.get("nodePools") or ())
    listeners = tuple(_listener(raw) for raw in spec.get("listeners") or ())
    config = {str(key): str(value) for key, value in (spec.get("config") or {}).items()}
    cluster = ClusterSpec(
        name=name, namespace=namespace, image=broker_image(spec, default_image),
        pools=pools, listeners=listeners, config=config,
        rack_topology_key=(spec.get("rack") or {}).get("topologyKey"),
        metrics=bool((spec.get("metrics") or {}).get("enabled", True)),
        rebalance_on_scale=bool(spec.get("rebalanceOnScale", True)),
        replication_throttle=_throttle(spec.get("replicationThrottle")),
        authorization=_authorization(spec.get("authorization")),
        cluster_ca=_ca(spec.get("clusterCa")), clients_ca=_ca(spec.get("clientsCa")))
    problems = spec_problems(cluster)
    if problems:
        raise SpecError("; ".join(problems))
    return cluster


def spec_problems(cluster: ClusterSpec) -> list[str]:
    problems = []
    if not cluster.pools:
        problems.append("no node pools: at least one is needed")
    elif not cluster.controller_pools:
        problems.append("no node pool has the controller role")
    elif not cluster.broker_pools:
        problems.append("no node pool has the broker role")
    for pool in _duplicates([pool.name for pool in cluster.pools]):
        problems.append(f"node pool name {pool!r} is used twice")
    for listener in _duplicates([listener.name for listener in cluster.listeners]):
        problems.append(f"listener name {listener!r} is used twice")
    if cluster.replication_throttle is not None and cluster.replication_throttle < 1:
        problems.append(f"replicationThrottle must be at least 1 byte per second, not "
                        f"{cluster.replication_throttle}")
    for port in _duplicates([listener.port for listener in cluster.listeners]):
        problems.append(f"listener port {port} is used twice")
    for listener in cluster.listeners:
        if listener.port in RESERVED_PORTS:
            problems.append(f"listener {listener.name!r}: port {listener.port} is taken by "
                            f"{RESERVED_PORTS[listener.port]}")
    for listener in cluster.listeners:
        if listener.authentication == TLS_AUTH and not listener.tls:
            problems.append(f"listener {listener.name!r}: authentication tls needs tls: true")
        if listener.authentication not in (None, SCRAM, TLS_AUTH):
            problems.append(f"listener {listener.name!r}: authentication "
                            f"{listener.authentication!r} is not scram-sha-512 or tls")
    for role, ca in (("clusterCa", cluster.cluster_ca), ("clientsCa", cluster.clients_ca)):
        if not 0 < ca.renewal_days < ca.validity_days:
            problems.append(f"{role}: renewalDays ({ca.renewal_days}) must be at least 1 and "
                            f"less than validityDays ({ca.validity_days})")
    if cluster.broker_pools and all(listener.external for listener in cluster.listeners):
        problems.append("no internal listener: clients in the cluster need one")
    if sum(pool.replicas for pool in cluster.controller_pools) == 0 and cluster.controller_pools:
        problems.append("the controller pools have no replicas: the quorum needs one")
    for pool in cluster.pools:
        name = f"{cluster.name}-{pool.name}"
        if len(name) > MAX_STATEFULSET_NAME:
            problems.append(f"StatefulSet name {name!r} is longer than {MAX_STATEFULSET_NAME} "
                            "characters: shorten the cluster or pool name")
    problems.extend(config_problems(cluster.config))
    if cluster.authorization is not None:
        problems += [f"config {key!r} is set by the operator from spec.authorization"
                     for key in ("authorizer.class.name", "super.users") if key in cluster.config]
    return problems
