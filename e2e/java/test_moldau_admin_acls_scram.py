"""The Moldau admin client's ACL and SCRAM credential APIs against Moldau and against Apache
Kafka, each with StandardAuthorizer, a super user and SASL users (acl_bed.py). What the client
writes is what kafka-python and librdkafka read; a SCRAM credential it sets logs librdkafka
in, so its salted password is the one a broker expects; what a broker refuses raises Kafka's
error. Passing against Kafka shows the client speaks these APIs as Kafka's broker expects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import pytest
from confluent_kafka import KafkaError as CkError
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import AdminClient as CkAdmin
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from e2e.java.acl_bed import ADMIN, USERS, AclBed
from e2e.support import unique, wait_until
from moldau.client.admin import (
    AclBinding,
    AclBindingFilter,
    Admin,
    AsyncAdmin,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.admin import AclOperation as Op
from moldau.client.admin import AclPatternType as Pattern
from moldau.client.admin import AclPermissionType as Perm
from moldau.client.admin import AclResourceType as Res
from moldau.client.errors import (
    ClusterAuthorizationFailedError,  # type: ignore[attr-defined]
    DuplicateResourceError,  # type: ignore[attr-defined]
    InvalidRequestError,  # type: ignore[attr-defined]
    ResourceNotFoundError,  # type: ignore[attr-defined]
    UnacceptableCredentialError,  # type: ignore[attr-defined]
    UnsupportedSaslMechanismError,  # type: ignore[attr-defined]
)

pytestmark = pytest.mark.timeout(300)

T = TypeVar("T")
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
# Both brokers also take SCRAM logins on their SASL listener (Kafka needs a JAAS entry per
# mechanism; the credentials themselves are what the tests set).
ACL_BED_EXTRA: dict[str, object] = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    **{f"listener.name.sasl_plaintext.{mechanism}.sasl.jaas.config": SCRAM_MODULE
       for mechanism in ("scram-sha-256", "scram-sha-512")},
}
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
# acl_bed's PLAIN users that are no super users, one per test that needs one.
ACL_USER, SCRAM_USER = USERS[40], USERS[41]
WAIT = 60


@pytest.fixture(scope="module")
def bed(acls_target: AclBed) -> AclBed:
    return acls_target


def allow(principal: str, kind: Res, name: str, operation: Op,
          pattern: Pattern = Pattern.LITERAL, permission: Perm = Perm.ALLOW,
          host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


async def settled(admin: AsyncAdmin, acl_filter: AclBindingFilter,
                  expected: set[AclBinding]) -> None:
    """Wait until the ACLs matching the filter are `expected`: a broker applies the
    controller's ACL records a moment after CreateAcls or DeleteAcls answers."""
    deadline = time.monotonic() + WAIT
    while (found := set(await admin.describe_acls(acl_filter))) != expected:
        assert time.monotonic() < deadline, f"{acl_filter}: {found} != {expected}"
        await asyncio.sleep(0.2)


async def once_allowed(call: Callable[[], Awaitable[T]]) -> T:
    """The call's result once the broker has applied the ACLs that allow it."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return await call()
        except ClusterAuthorizationFailedError:
            assert time.monotonic() < deadline, "the new ACLs were never applied"
            await asyncio.sleep(0.2)


def kp_acls(bed: AclBed, principal: str) -> set[AclBinding]:
    """The principal's ACLs as kafka-python's admin client describes them."""
    admin = KafkaAdminClient(bootstrap_servers=bed.bootstrap, **bed.kp(ADMIN))
    try:
        acls, error = admin.describe_acls(ACLFilter(
            principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        admin.close()
    assert error.errno == 0, error
    return {AclBinding(Res(int(acl.resource_pattern.resource_type)),
                       acl.resource_pattern.resource_name,
                       Pattern(int(acl.resource_pattern.pattern_type)), acl.principal,
                       acl.host, Op(int(acl.operation)), Perm(int(acl.permission_type)))
            for acl in acls}


def kp_create_acl(bed: AclBed, binding: AclBinding) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bed.bootstrap, **bed.kp(ADMIN))
    try:
        result = admin.create_acls([ACL(
            binding.principal, binding.host, ACLOperation(binding.operation),
            ACLPermissionType(binding.permission_type),
            ResourcePattern(ResourceType(binding.resource_type), binding.resource_name,
                            ACLResourcePatternType(binding.pattern_type)))])
    finally:
        admin.close()
    assert not result["failed"], result


def ck_login(bed: AclBed, mechanism: ScramMechanism, user: str, secret: str,
             topic: str) -> str | None:
    """Produce one record with librdkafka as a SCRAM user: None once it is delivered, else
    why not (the authentication error librdkafka reports, or the delivery error)."""
    errors: list[CkError] = []
    delivered: list[CkError | None] = []
    producer = CkProducer({"bootstrap.servers": bed.bootstrap,
                           "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanisms": mechanism.mechanism_name,
                           "sasl.username": user, "sasl.password": secret,
                           "message.timeout.ms": 20000, "error_cb": errors.append})
    producer.produce(topic, b"value", on_delivery=lambda error, _: delivered.append(error))
    deadline = time.monotonic() + 30
    try:
        while not delivered:
            producer.poll(0.1)
            refused = [e for e in errors if e.code() == CkError._AUTHENTICATION]
            if refused:
                return refused[0].str()
            assert time.monotonic() < deadline, f"neither delivered nor refused: {errors}"
        return None if delivered[0] is None else delivered[0].str()
    finally:
        producer.purge()


def refused_login(outcome: str | None) -> bool:
    return outcome is not None and "Authentication failed" in outcome


def test_acls_written_are_what_other_clients_read(bed: AclBed) -> None:
    principal = f"User:{unique('reader')}"
    orders, payments, billing = unique("orders"), unique("payments") + ".", unique("billing")
    read_orders = allow(principal, Res.TOPIC, orders, Op.READ)
    deny_orders = allow(principal, Res.TOPIC, orders, Op.WRITE, permission=Perm.DENY,
                        host="10.0.0.7")
    write_payments = allow(principal, Res.TOPIC, payments, Op.WRITE, Pattern.PREFIXED)
    read_billing = allow(principal, Res.GROUP, billing, Op.READ)
    describe_cluster = allow(principal, Res.CLUSTER, "kafka-cluster", Op.DESCRIBE)
    topic_acls = {read_orders, deny_orders, write_payments}
    written = topic_acls | {read_billing, describe_cluster}
    # Written by kafka-python, read by Moldau's client.
    describe_billing = allow(principal, Res.GROUP, billing, Op.DESCRIBE)
    mine = AclBindingFilter(principal=principal)

    async def scenario() -> None:
        async with AsyncAdmin(bed.moldau(ADMIN)) as admin:
            await admin.create_acls(written)
            await settled(admin, mine, written)
            assert kp_acls(bed, principal) == written

            async def matching(**fields: object) -> set[AclBinding]:
                return set(await admin.describe_acls(AclBindingFilter(**fields)))

            assert await matching(resource_type=Res.TOPIC, principal=principal) == topic_acls
            assert await matching(resource_type=Res.GROUP, resource_name=billing) == {
                read_billing}
            assert await matching(pattern_type=Pattern.PREFIXED, principal=principal) == {
                write_payments}
            # MATCH: the ACLs that apply to one resource, a prefixed one among them.
            assert await matching(resource_type=Res.TOPIC, resource_name=f"{payments}eu",
                                  pattern_type=Pattern.MATCH) == {write_payments}
            assert await matching(resource_type=Res.TOPIC, resource_name=orders,
                                  pattern_type=Pattern.MATCH) == {read_orders, deny_orders}
            assert await matching(principal=principal, host="10.0.0.7") == {deny_orders}
            assert await matching(principal=principal, operation=Op.READ,
                                  permission_type=Perm.ALLOW) == {read_orders, read_billing}
            assert written <= await matching()  # every field ANY
            assert await matching(principal=f"User:{unique('nobody')}") == set()

            kp_create_acl(bed, describe_billing)
            await settled(admin, mine, written | {describe_billing})

            deleted = await admin.delete_acls([AclBindingFilter(resource_type=Res.TOPIC,
                                                                principal=principal)])
            assert sorted(deleted, key=str) == sorted(topic_acls, key=str)
            left = {read_billing, describe_billing, describe_cluster}
            await settled(admin, mine, left)
            assert kp_acls(bed, principal) == left
            assert await admin.delete_acls([AclBindingFilter(resource_type=Res.TOPIC,
                                                             principal=principal)]) == []
            each = await admin.delete_acls_each([read_billing.to_filter(),
                                                 describe_cluster.to_filter()])
            assert each == {read_billing.to_filter(): [read_billing],
                            describe_cluster.to_filter(): [describe_cluster]}
            await settled(admin, mine, {describe_billing})
            assert kp_acls(bed, principal) == {describe_billing}

    asyncio.run(scenario())


def test_refused_acls_raise_kafkas_errors(bed: AclBed) -> None:
    principal = f"User:{ACL_USER}"
    granted = allow(principal, Res.TOPIC, unique("granted"), Op.READ)
    no_principal_type = replace(granted, principal=ACL_USER)
    other_cluster = allow(principal, Res.CLUSTER, "not-kafka-cluster", Op.ALTER)

    async def scenario() -> None:
        async with AsyncAdmin(bed.moldau(ADMIN)) as admin:
            with pytest.raises(InvalidRequestError, match=ACL_USER):
                await admin.create_acls([no_principal_type])
            outcome = await admin.create_acls_each([granted, no_principal_type,
                                                    other_cluster])
            assert outcome[granted] is None, outcome
            assert isinstance(outcome[no_principal_type], InvalidRequestError), outcome
            assert isinstance(outcome[other_cluster], InvalidRequestError), outcome
            await settled(admin, AclBindingFilter(principal=principal), {granted})

            # A filter's ANY, MATCH or UNKNOWN: refused before anything is sent.
            started = time.monotonic()
            with pytest.raises(InvalidRequestError, match="operation is ANY"):
                await admin.create_acls([replace(granted, operation=Op.ANY)])
            with pytest.raises(InvalidRequestError, match="pattern type is MATCH"):
                await admin.create_acls([replace(granted, pattern_type=Pattern.MATCH)])
            with pytest.raises(InvalidRequestError, match="UNKNOWN"):
                await admin.describe_acls(AclBindingFilter(operation=Op.UNKNOWN))
            with pytest.raises(InvalidRequestError, match="UNKNOWN"):
                await admin.delete_acls([AclBindingFilter(resource_type=Res.UNKNOWN)])
            assert time.monotonic() - started < 2

            # A user that is no super user may not touch ACLs until allowed on the cluster.
            own = allow(principal, Res.GROUP, unique("own"), Op.READ)
            async with AsyncAdmin(bed.moldau(ACL_USER)) as user:
                with pytest.raises(ClusterAuthorizationFailedError):
                    await user.create_acls([own])
                with pytest.raises(ClusterAuthorizationFailedError):
                    await user.describe_acls(AclBindingFilter())
                with pytest.raises(ClusterAuthorizationFailedError):
                    await user.delete_acls([own.to_filter()])
                cluster = {allow(principal, Res.CLUSTER, "kafka-cluster", operation)
                           for operation in (Op.ALTER, Op.DESCRIBE)}
                await admin.create_acls(cluster)
                await once_allowed(lambda: user.create_acls([own]))
                await once_allowed(lambda: settled(user, own.to_filter(), {own}))
                assert await user.delete_acls([own.to_filter()]) == [own]
            assert set(await admin.delete_acls([AclBindingFilter(principal=principal)])) == \
                cluster | {granted}

    asyncio.run(scenario())


def test_scram_credentials_log_librdkafka_in(bed: AclBed) -> None:
    """Through the blocking face, Admin."""
    u512, u256 = unique("scram512"), unique("scram256")
    topic = unique("scram-topic")
    with Admin(bed.moldau(ADMIN)) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.create_acls([allow(f"User:{user}", Res.TOPIC, topic, Op.WRITE)
                           for user in (u512, u256)])
        admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(u512, SHA512, "pw-512", iterations=8192),
            UserScramCredentialUpsertion(u256, SHA256, "pw-256")])
        wait_until(lambda: ck_login(bed, SHA512, u512, "pw-512", topic) is None, WAIT,
                   f"librdkafka producing as {u512} with SCRAM-SHA-512")
        wait_until(lambda: ck_login(bed, SHA256, u256, "pw-256", topic) is None, WAIT,
                   f"librdkafka producing as {u256} with SCRAM-SHA-256")
        assert refused_login(ck_login(bed, SHA512, u512, "wrong", topic))
        assert refused_login(ck_login(bed, SHA256, u512, "pw-512", topic)), \
            "no SCRAM-SHA-256 credential yet"

        nobody = unique("nobody")
        expected = {u512: [ScramCredentialInfo(SHA512, 8192)],
                    u256: [ScramCredentialInfo(SHA256, 4096)]}
        assert admin.describe_user_scram_credentials([u512, u256, nobody]) == expected
        everyone = admin.describe_user_scram_credentials()
        assert {user: everyone[user] for user in expected} == expected
        assert nobody not in everyone
        ck = CkAdmin(bed.ck(ADMIN))
        for user, infos in expected.items():
            seen = ck.describe_user_scram_credentials([user])[user].result(30)
            assert [(i.mechanism.value, i.iterations) for i in seen.scram_credential_infos] \
                == [(int(i.mechanism), i.iterations) for i in infos]

        # A second mechanism for a user, then deletions.
        admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(u512, SHA256, "other-256")])
        infos = admin.describe_user_scram_credentials([u512])[u512]
        assert {(i.mechanism, i.iterations) for i in infos} == {(SHA512, 8192), (SHA256, 4096)}
        wait_until(lambda: ck_login(bed, SHA256, u512, "other-256", topic) is None, WAIT,
                   f"librdkafka producing as {u512} with SCRAM-SHA-256")
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(u512, SHA512),
                                            UserScramCredentialDeletion(u256, SHA256)])
        wait_until(lambda: refused_login(ck_login(bed, SHA512, u512, "pw-512", topic)), WAIT,
                   f"{u512}'s SCRAM-SHA-512 login refused")
        wait_until(lambda: refused_login(ck_login(bed, SHA256, u256, "pw-256", topic)), WAIT,
                   f"{u256}'s login refused")
        assert ck_login(bed, SHA256, u512, "other-256", topic) is None
        assert admin.describe_user_scram_credentials([u512, u256]) == {
            u512: [ScramCredentialInfo(SHA256, 4096)]}


def test_refused_scram_changes_raise_kafkas_errors(bed: AclBed) -> None:
    twice, few, unknown, empty, fine = (unique(name) for name in
                                        ("twice", "few", "unknown", "empty", "fine"))

    async def scenario() -> None:
        async with AsyncAdmin(bed.moldau(ADMIN)) as admin:
            with pytest.raises(ResourceNotFoundError, match=twice):
                await admin.alter_user_scram_credentials([
                    UserScramCredentialDeletion(twice, SHA512)])
            outcome = await admin.alter_user_scram_credentials_each([
                UserScramCredentialUpsertion(twice, SHA512, "a"),
                UserScramCredentialUpsertion(twice, SHA256, "b"),
                UserScramCredentialUpsertion(few, SHA512, "c", iterations=1024),
                UserScramCredentialUpsertion(unknown, ScramMechanism.UNKNOWN, "d"),
                UserScramCredentialUpsertion(empty, SHA512, ""),
                UserScramCredentialDeletion("", SHA256),
                UserScramCredentialUpsertion(fine, SHA512, "e")])
            kinds = {user: type(error) for user, error in outcome.items()}
            assert kinds == {twice: DuplicateResourceError, few: UnacceptableCredentialError,
                             unknown: UnsupportedSaslMechanismError,
                             empty: UnacceptableCredentialError,
                             "": UnacceptableCredentialError, fine: type(None)}, outcome
            assert "less than the minimum 4096" in str(outcome[few])
            assert await admin.describe_user_scram_credentials(
                [twice, few, unknown, empty, fine]) == {
                fine: [ScramCredentialInfo(SHA512, 4096)]}

            async with AsyncAdmin(bed.moldau(SCRAM_USER)) as user:
                with pytest.raises(ClusterAuthorizationFailedError):
                    await user.alter_user_scram_credentials([
                        UserScramCredentialUpsertion(SCRAM_USER, SHA512, "mine")])
                with pytest.raises(ClusterAuthorizationFailedError):
                    await user.describe_user_scram_credentials()
            assert await admin.describe_user_scram_credentials([SCRAM_USER]) == {}

    asyncio.run(scenario())
