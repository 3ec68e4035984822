"""The TLS Secrets of a cluster, computed from those that exist (pure: the reconcile reads
and applies them), with Strimzi's names, keys and renewal rules.

Two CAs: the cluster CA signs the nodes' certificates and the operator's, the clients CA the
users'. A CA is made once and then only renewed with its own key (certs.renew_ca), so what it
signed stays trusted; its previous certificate stays in the `ca.crt` bundle until it expires.
A CA key is never replaced on its own: a key Secret without its certificate Secret, or one
that cannot be read, stops the plan with PkiError, since a new key would cut every client
off. Certificates signed by a CA (nodes, operator, users) are re-issued when missing,
unreadable, due for renewal, issued before the CA's current certificate, or, for nodes, when
the names asked for changed. Data that need not change comes back byte for byte, so a
settled cluster has nothing to rewrite.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from moldau.operator import certs

log = logging.getLogger("moldau.operator.pki")

# Values of PkiInput.force_renew (Strimzi's force-renew annotation on a CA's Secrets).
CLUSTER_CA = "cluster-ca"
CLIENTS_CA = "clients-ca"
# Secret keys.
CA_KEY = "ca.key"
CA_CERT = "ca.crt"
CLIENTS_CA_CERT = "clients-ca.crt"
OPERATOR_CERT = "operator.crt"
OPERATOR_KEY = "operator.key"
USER_CERT = "user.crt"
USER_KEY = "user.key"

SecretData = Mapping[str, bytes]


class PkiError(Exception):
    """A cluster's TLS Secrets are in a state the operator must not repair by itself."""


@dataclass(frozen=True)
class CaSettings:
    # Strimzi's defaults (spec.clusterCa / spec.clientsCa: validityDays, renewalDays).
    validity_days: int = 365
    renewal_days: int = 30


@dataclass(frozen=True)
class PkiInput:
    cluster: str
    namespace: str
    # Every broker and controller pod: each gets a certificate of its own.
    broker_pods: Sequence[str]
    # pod -> its DNS names (pod DNS name, bootstrap Services, external names)
    dns_names: Mapping[str, Sequence[str]]
    # pod -> IP addresses (external NodePort addresses); a pod may have none
    ip_addresses: Mapping[str, Sequence[str]]
    cluster_ca: CaSettings = field(default_factory=CaSettings)
    clients_ca: CaSettings = field(default_factory=CaSettings)
    # CLUSTER_CA / CLIENTS_CA: renewed by this plan whatever their dates. Every plan given
    # one renews it again: the caller clears the annotation once the plan is applied.
    force_renew: frozenset[str] = frozenset()


def ca_key_secret(cluster: str, which: str) -> str:
    """`<cluster>-cluster-ca` or `<cluster>-clients-ca`: the CA's key."""
    return f"{cluster}-{which}"


def ca_cert_secret(cluster: str, which: str) -> str:
    """`<cluster>-cluster-ca-cert` or `<cluster>-clients-ca-cert`: the CA's trust bundle."""
    return f"{cluster}-{which}-cert"


def broker_secret(cluster: str) -> str:
    return f"{cluster}-broker-certs"


def operator_secret(cluster: str) -> str:
    return f"{cluster}-operator-certs"


def broker_common_name(cluster: str) -> str:
    return f"{cluster}-kafka"


def broker_principal(cluster: str) -> str:
    """Every node's principal, for super.users."""
    return f"User:CN={broker_common_name(cluster)},O={certs.ORGANIZATION}"


def operator_common_name(cluster: str) -> str:
    return f"{cluster}-operator"


def operator_principal(cluster: str) -> str:
    """The operator's principal on the cluster's mutual-TLS listeners, for super.users."""
    return f"User:CN={operator_common_name(cluster)},O={certs.ORGANIZATION}"


def keystore_key(pod: str) -> str:
    """The key of a pod's PEM keystore (private key, then chain) in the broker Secret."""
    return f"{pod}.pem"


@dataclass(frozen=True)
class _Ca:
    current: certs.Issued  # the key and the newest certificate
    bundle: bytes          # the newest certificate first, then older ones not yet expired


def plan(inputs: PkiInput, existing: Mapping[str, SecretData],
         now: datetime | None = None) -> dict[str, dict[str, bytes]]:
    """The complete data of every TLS Secret the cluster needs, by Secret name."""
    moment = certs.utc(now)
    cluster = inputs.cluster
    cas = {}
    for which, settings, field_name in ((CLUSTER_CA, inputs.cluster_ca, "clusterCa"),
                                        (CLIENTS_CA, inputs.clients_ca, "clientsCa")):
        _check_settings(settings, field_name)
        cas[which] = _ca(inputs, which, settings, existing, moment)
    secrets: dict[str, dict[str, bytes]] = {}
    for which, ca in cas.items():
        secrets[ca_key_secret(cluster, which)] = {CA_KEY: ca.current.key}
        secrets[ca_cert_secret(cluster, which)] = {CA_CERT: ca.bundle}
    secrets[broker_secret(cluster)] = _broker_certs(
        inputs, cas[CLUSTER_CA], cas[CLIENTS_CA], existing.get(broker_secret(cluster), {}),
        moment)
    secrets[operator_secret(cluster)] = _operator_certs(
        inputs, cas[CLUSTER_CA], existing.get(operator_secret(cluster), {}), moment)
    return secrets


def issue_user(clients_ca_key_secret: SecretData | None,
               clients_ca_cert_secret: SecretData | None, user: str, validity_days: int,
               existing_user_secret: SecretData | None, renewal_days: int,
               now: datetime | None = None) -> dict[str, bytes] | None:
    """The Secret data of a KafkaUser with TLS authentication: `user.crt` (CN=<user>, so its
    principal is `User:CN=<user>`), `user.key` and the clients CA bundle `ca.crt`. None while
    the clients CA does not exist yet (the cluster's plan makes it)."""
    if clients_ca_key_secret is None and clients_ca_cert_secret is None:
        return None
    moment = certs.utc(now)
    _check_settings(CaSettings(validity_days, renewal_days), "clientsCa")
    ca = _loaded_ca(clients_ca_key_secret, clients_ca_cert_secret, "the clients CA key Secret",
                    "the clients CA certificate Secret")
    old = existing_user_secret or {}
    cert, key = old.get(USER_CERT), old.get(USER_KEY)
    if cert is None or key is None or _stale(cert, key, ca, renewal_days, moment,
                                             f"user {user}"):
        with _context(f"KafkaUser {user}"):
            issued = certs.issue(ca.current, user, validity_days=validity_days, client=True,
                                 organization=None, now=moment)
        log.info("Issued the certificate of user %s (expires %s)", user,
                 certs.not_after(issued.cert))
        cert, key = issued.cert, issued.key
    with _context("the clients CA certificate Secret"):
        bundle = certs.without_expired(ca.bundle, moment)
    return {USER_CERT: cert, USER_KEY: key, CA_CERT: bundle}


def _check_settings(settings: CaSettings, field_name: str) -> None:
    if settings.validity_days < 1 or settings.renewal_days < 1:
        raise PkiError(f"{field_name}: validityDays ({settings.validity_days}) and renewalDays "
                       f"({settings.renewal_days}) must be at least 1")
    if settings.renewal_days >= settings.validity_days:
        raise PkiError(f"{field_name}: renewalDays ({settings.renewal_days}) must be less than "
                       f"validityDays ({settings.validity_days})")


@contextmanager
def _context(what: str) -> Iterator[None]:
    """certs' ValueErrors (unreadable PEM, a name too long) as PkiError naming `what`."""
    try:
        yield
    except ValueError as exc:
        raise PkiError(f"{what}: {exc}") from None


def _ca(inputs: PkiInput, which: str, settings: CaSettings,
        existing: Mapping[str, SecretData], now: datetime) -> _Ca:
    """The CA as it must be now: made when neither of its Secrets exists, renewed (same key)
    when due or forced, its bundle without expired certificates."""
    key_name = ca_key_secret(inputs.cluster, which)
    cert_name = ca_cert_secret(inputs.cluster, which)
    key_data, cert_data = existing.get(key_name), existing.get(cert_name)
    if key_data is None and cert_data is None:
        with _context(f"the {which} of cluster {inputs.cluster}"):
            made = certs.new_ca(f"{inputs.cluster}-{which}", settings.validity_days, now)
        log.info("Created the %s of %s/%s (expires %s)", which, inputs.namespace,
                 inputs.cluster, certs.not_after(made.cert))
        return _Ca(made, made.cert)
    ca = _loaded_ca(key_data, cert_data, f"Secret {inputs.namespace}/{key_name}",
                    f"Secret {inputs.namespace}/{cert_name}")
    forced = which in inputs.force_renew
    with _context(f"Secret {inputs.namespace}/{cert_name}"):
        if not (forced or certs.due_for_renewal(ca.current.cert, settings.renewal_days, now)):
            return _Ca(ca.current, certs.without_expired(ca.bundle, now))
        renewed = certs.renew_ca(ca.current, settings.validity_days, now)
        older = certs.split(certs.without_expired(ca.bundle, now))
    log.info("Renewed the %s certificate of %s/%s%s (same key; expires %s)", which,
             inputs.namespace, inputs.cluster, " as asked" if forced else "",
             certs.not_after(renewed.cert))
    return _Ca(renewed, certs.bundle([renewed.cert, *older]))


def _loaded_ca(key_data: SecretData | None, cert_data: SecretData | None, key_label: str,
               cert_label: str) -> _Ca:
    """A CA from its two Secrets, both of which must be there and readable."""
    if key_data is None:
        raise PkiError(f"{cert_label} exists without {key_label}: the CA key is lost; restore "
                       "it, or delete both Secrets to make a new CA that every client must "
                       "then trust")
    if cert_data is None:
        raise PkiError(f"{key_label} exists without {cert_label}: restore it, or delete both "
                       "Secrets to make a new CA that every client must then trust")
    key, bundle = key_data.get(CA_KEY), cert_data.get(CA_CERT)
    if key is None:
        raise PkiError(f"{key_label} has no {CA_KEY}")
    if bundle is None:
        raise PkiError(f"{cert_label} has no {CA_CERT}")
    with _context(f"{cert_label}, {CA_CERT}"):
        chain = certs.split(bundle)
        if not chain:
            raise ValueError("no PEM certificate found")
    with _context(f"{key_label}, {CA_KEY}"):
        if not certs.key_matches(chain[0], key):
            raise ValueError(f"not the key of the first certificate of {cert_label}")
    return _Ca(certs.Issued(chain[0], key), bundle)


def _stale(cert: bytes, key: bytes, ca: _Ca, renewal_days: int, now: datetime, what: str,
           wanted_names: frozenset[str] | None = None) -> bool:
    """Whether a certificate signed by `ca` must be issued anew; unreadable ones must."""
    try:
        reason = (
            "its key does not match" if not certs.key_matches(cert, key)
            else "another CA signed it" if not certs.issued_by(cert, ca.current.cert)
            # Issued before the CA's current certificate: issued anew, it chains to it.
            else "the CA was renewed" if certs.not_before(cert) < certs.not_before(
                ca.current.cert)
            # Unless it already ends with its CA certificate (which is then due too): issued
            # anew it would end there again; it is once the CA is renewed.
            else "it is due for renewal" if certs.due_for_renewal(
                cert, renewal_days, now) and certs.not_after(cert) < certs.not_after(
                ca.current.cert)
            else "its names changed" if wanted_names is not None and certs.names(
                cert) != wanted_names
            else None)
    except ValueError as exc:
        reason = f"it cannot be read ({exc})"
    if reason:
        log.info("Issuing the certificate of %s anew: %s", what, reason)
    return reason is not None


def _keystore(issued: certs.Issued, ca_cert: bytes) -> bytes:
    """Kafka's PEM keystore: the private key, then the certificate chain."""
    return issued.key + certs.bundle([issued.cert, ca_cert])


def _broker_certs(inputs: PkiInput, cluster_ca: _Ca, clients_ca: _Ca, old: SecretData,
                  now: datetime) -> dict[str, bytes]:
    settings = inputs.cluster_ca
    data: dict[str, bytes] = {}
    for pod in inputs.broker_pods:
        dns_names = list(inputs.dns_names.get(pod, ()))
        ip_addresses = list(inputs.ip_addresses.get(pod, ()))
        if not dns_names:
            raise PkiError(f"pod {inputs.namespace}/{pod}: no DNS names to certify")
        with _context(f"pod {inputs.namespace}/{pod}"):
            wanted = frozenset(dns_names) | {certs.ip_name(ip) for ip in ip_addresses}
        current = old.get(keystore_key(pod))
        if current is not None and not _stale_keystore(current, cluster_ca, settings, now,
                                                       f"pod {pod}", wanted):
            data[keystore_key(pod)] = current
            continue
        with _context(f"pod {inputs.namespace}/{pod}"):
            issued = certs.issue(cluster_ca.current, broker_common_name(inputs.cluster),
                                 validity_days=settings.validity_days, dns_names=dns_names,
                                 ip_addresses=ip_addresses, server=True, client=True, now=now)
        data[keystore_key(pod)] = _keystore(issued, cluster_ca.current.cert)
    data[CA_CERT] = cluster_ca.bundle
    data[CLIENTS_CA_CERT] = clients_ca.bundle
    return data


def _stale_keystore(keystore: bytes, ca: _Ca, settings: CaSettings, now: datetime, what: str,
                    wanted_names: frozenset[str]) -> bool:
    try:
        key, chain = certs.private_key(keystore), certs.split(keystore)
    except ValueError as exc:
        log.info("Issuing the certificate of %s anew: its keystore cannot be read (%s)", what,
                 exc)
        return True
    return not chain or _stale(chain[0], key, ca, settings.renewal_days, now, what,
                               wanted_names)


def _operator_certs(inputs: PkiInput, cluster_ca: _Ca, old: SecretData,
                    now: datetime) -> dict[str, bytes]:
    """The operator's client certificate for the cluster's mutual-TLS internal listener."""
    settings = inputs.cluster_ca
    cert, key = old.get(OPERATOR_CERT), old.get(OPERATOR_KEY)
    if cert is None or key is None or _stale(cert, key, cluster_ca, settings.renewal_days,
                                             now, "the operator"):
        with _context(f"cluster {inputs.namespace}/{inputs.cluster}"):
            issued = certs.issue(cluster_ca.current, operator_common_name(inputs.cluster),
                                 validity_days=settings.validity_days, client=True, now=now)
        cert, key = issued.cert, issued.key
    return {OPERATOR_CERT: cert, OPERATOR_KEY: key, CA_CERT: cluster_ca.bundle}
