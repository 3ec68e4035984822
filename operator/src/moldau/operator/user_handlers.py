"""kopf handlers of KafkaUser: the user's credentials (a SCRAM-SHA-512 password, or a client
certificate of the clients CA) in a Secret named after it, and its ACLs in the cluster,
through the cluster's shared admin client (topic_handlers.py). Deletion removes the ACLs and
the SCRAM credential (a finalizer holds the object until then); the Secret goes with its
owner."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import kopf
from lightkube import AsyncClient

from moldau.client.admin import (
    AsyncAdmin,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.errors import KafkaError
from moldau.operator.apply import ApplyError, apply_all
from moldau.operator.certificates import read_secrets, secret_manifest
from moldau.operator.conditions import status_changed
from moldau.operator.pki import PkiError, issue_user
from moldau.operator.resource import (
    API_VERSION,
    CLUSTER_LABEL,
    FIELD_MANAGER,
    GROUP,
    PLURAL,
    USER_KIND,
    USER_PLURAL,
    VERSION,
)
from moldau.operator.topic_handlers import cluster_client
from moldau.operator.topics.resource import cluster_of
from moldau.operator.users import (
    SCRAM,
    DesiredUser,
    UserSpecError,
    desired_user,
    principal_filter,
    scram_secret,
    user_status,
)

USER_RESYNC_SECONDS = 30.0
SCRAM_ITERATIONS = 4096
MECHANISM = ScramMechanism.SCRAM_SHA_512


class NotReady(Exception):
    """The user cannot be reconciled now: (reason, message)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@kopf.index(GROUP, VERSION, PLURAL)
def clients_ca_settings(name: str, namespace: str, spec: kopf.Spec, **_: Any
                        ) -> dict[Hashable, tuple[int, int]]:
    """(namespace, cluster) -> the clients CA's (validityDays, renewalDays)."""
    ca = spec.get("clientsCa") or {}
    return {(namespace, name): (int(ca.get("validityDays", 365)),
                                int(ca.get("renewalDays", 30)))}


def _owner(body: kopf.Body) -> dict[str, Any]:
    meta = body["metadata"]
    return {"apiVersion": API_VERSION, "kind": USER_KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _secret(body: kopf.Body, cluster: str, data: Mapping[str, bytes]) -> dict[str, Any]:
    meta = body["metadata"]
    labels = {"app.kubernetes.io/name": "moldau", "app.kubernetes.io/component": "user",
              "app.kubernetes.io/managed-by": FIELD_MANAGER, CLUSTER_LABEL: cluster}
    return secret_manifest({"name": meta["name"], "namespace": meta["namespace"],
                            "labels": labels}, data, _owner(body))


async def _credentials(api: AsyncClient, admin: AsyncAdmin, body: kopf.Body, cluster: str,
                       user: DesiredUser, ca: tuple[int, int]) -> None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    found = await read_secrets(api, namespace, [name, f"{cluster}-clients-ca",
                                                f"{cluster}-clients-ca-cert"])
    existing = found.get(name)
    known = await admin.describe_user_scram_credentials([user.name])
    has_scram = any(info.mechanism == MECHANISM for info in known.get(user.name, []))
    if user.authentication == SCRAM:
        data = scram_secret(user, existing if existing and "password" in existing else None)
        if not has_scram or data != existing:
            await admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                user.name, MECHANISM, data["password"].decode(), SCRAM_ITERATIONS)])
    else:
        key, cert = found.get(f"{cluster}-clients-ca"), found.get(f"{cluster}-clients-ca-cert")
        if key is None or cert is None:
            raise NotReady("ClientsCaMissing", f"KafkaCluster {cluster} has no clients CA: "
                                               "it needs a listener with TLS authentication")
        validity, renewal = ca
        data = issue_user(key, cert, user.name, validity, existing, renewal) or existing or {}
        if has_scram:  # the user moved from SCRAM to TLS
            await admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(user.name, MECHANISM)])
    if data != existing:
        await apply_all(api, [_secret(body, cluster, data)])


async def _acls(admin: AsyncAdmin, user: DesiredUser) -> list[str]:
    """Make the principal's ACLs exactly the wanted ones; what changed, for the Events."""
    current = set(await admin.describe_acls(principal_filter(user.principal)))
    extra = current - user.acls
    missing = user.acls - current
    changes = []
    if extra:
        await admin.delete_acls([binding.to_filter() for binding in extra])
        changes.append(f"{len(extra)} ACLs deleted")
    if missing:
        await admin.create_acls(sorted(missing, key=repr))
        changes.append(f"{len(missing)} ACLs created")
    return changes


async def _reconcile(body: kopf.Body, patch: kopf.Patch, clusters: kopf.Index,
                     cas: kopf.Index) -> None:
    meta = body["metadata"]
    previous = body.get("status") or {}
    user = None
    try:
        user = desired_user(body)
        cluster = cluster_of(body)
        if cluster is None:
            raise NotReady("InvalidResource", f"the label {CLUSTER_LABEL} is missing: it "
                                              "names the KafkaCluster the user belongs to")
        client = await cluster_client(meta["namespace"], cluster, clusters)
        if client is None:
            raise NotReady("ClusterNotFound", f"KafkaCluster {cluster} not found in "
                                              f"namespace {meta['namespace']}")
        ca = next(iter(cas.get((meta["namespace"], cluster), ())), (365, 30))
        async with AsyncClient(field_manager=FIELD_MANAGER) as api:
            await _credentials(api, client.admin, body, cluster, user, ca)
        for change in await _acls(client.admin, user):
            kopf.event(body, type="Normal", reason="AclsChanged", message=change)
        ready, reason, message = True, "Ready", f"principal {user.principal}"
    except UserSpecError as exc:
        ready, reason, message = False, "InvalidResource", str(exc)
    except NotReady as exc:
        ready, reason, message = False, exc.reason, str(exc)
    except (KafkaError, OSError) as exc:
        ready, reason, message = False, "ClusterError", f"the cluster refused or did not " \
                                                        f"answer: {exc}"
    except (PkiError, ApplyError) as exc:
        ready, reason, message = False, "SecretFailed", str(exc)
    old = next((c for c in previous.get("conditions") or [] if c.get("type") == "Ready"), {})
    if not ready and (old.get("reason") != reason or old.get("message") != message):
        kopf.event(body, type="Warning", reason=reason, message=message)
    status = user_status(user, meta["name"], ready, reason, message,
                         meta.get("generation", 0), previous)
    if status_changed(status, previous):
        patch.status.update(status)


@kopf.on.resume(GROUP, VERSION, USER_PLURAL)
@kopf.on.create(GROUP, VERSION, USER_PLURAL)
@kopf.on.update(GROUP, VERSION, USER_PLURAL)
async def user_changed(body: kopf.Body, patch: kopf.Patch, kafka_clusters: kopf.Index,
                       clients_ca_settings: kopf.Index, **_: Any) -> None:
    await _reconcile(body, patch, kafka_clusters, clients_ca_settings)


@kopf.timer(GROUP, VERSION, USER_PLURAL, interval=USER_RESYNC_SECONDS,
            initial_delay=USER_RESYNC_SECONDS)
async def user_resync(body: kopf.Body, patch: kopf.Patch, kafka_clusters: kopf.Index,
                      clients_ca_settings: kopf.Index, **_: Any) -> None:
    await _reconcile(body, patch, kafka_clusters, clients_ca_settings)


@kopf.on.delete(GROUP, VERSION, USER_PLURAL)
async def user_deleted(body: kopf.Body, kafka_clusters: kopf.Index, **_: Any) -> None:
    """The user's ACLs and SCRAM credential leave the cluster; returning lets kopf remove
    the finalizer, raising TemporaryError tries again."""
    meta = body["metadata"]
    cluster = cluster_of(body)
    try:
        user = desired_user(body)
    except UserSpecError:
        return
    client = await cluster_client(meta["namespace"], cluster, kafka_clusters) \
        if cluster else None
    if client is None:
        return
    try:
        await client.admin.delete_acls([principal_filter(user.principal)])
        if user.authentication == SCRAM:
            known = await client.admin.describe_user_scram_credentials([user.name])
            if known.get(user.name):
                await client.admin.alter_user_scram_credentials(
                    [UserScramCredentialDeletion(user.name, MECHANISM)])
    except (KafkaError, OSError) as exc:
        raise kopf.TemporaryError(f"user {user.name} not removed from KafkaCluster "
                                  f"{cluster} yet: {exc}", delay=10) from exc
    kopf.event(body, type="Normal", reason="UserDeleted",
               message=f"{user.principal}: ACLs and credentials removed")
