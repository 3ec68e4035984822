"""A broker with ACLs for tests that run against Moldau and against Apache Kafka alike.

One SASL_PLAINTEXT listener with PLAIN users from the listener's JAAS config: `admin` (a super
user, and the broker's own identity) and `user00`.. `user63`, each test case its own user so
that the ACLs of one case never grant another anything. Kafka's node also has a PLAINTEXT
controller listener, whose principal (User:ANONYMOUS) is therefore a super user too; the same
`super.users` is given to Moldau.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.kafka_dist import KafkaBroker, ensure_artifacts
from e2e.support import free_port

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = [f"user{number:02d}" for number in range(64)]
ADMIN = "admin"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def password(user: str) -> str:
    return f"{user}-secret"


def listener_jaas() -> str:
    users = " ".join(f'user_{user}="{password(user)}"' for user in [ADMIN, *USERS])
    return (f'{PLAIN_MODULE} required username="{ADMIN}" password="{password(ADMIN)}" '
            f"{users};")


# Settings both brokers run with, besides their listeners.
ACL_SETTINGS: dict[str, object] = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": f"User:{ADMIN};User:ANONYMOUS",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": listener_jaas(),
    "group.initial.rebalance.delay.ms": 0,
}


@dataclass
class AclBed:
    kind: str  # "moldau" or "kafka"
    bootstrap: str
    workdir: Path

    def kp(self, user: str) -> dict[str, object]:
        """kafka-python settings of a user."""
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": user, "sasl_plain_password": password(user)}

    def ck(self, user: str) -> dict[str, object]:
        """confluent-kafka settings of a user."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": password(user)}

    def moldau(self, user: str) -> dict[str, object]:
        """Moldau client settings of a user."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": password(user)}

    def command_config(self, user: str) -> Path:
        """A properties file for Kafka's tools (`--command-config`) as this user."""
        path = self.workdir / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                        f'sasl.jaas.config={PLAIN_MODULE} required username="{user}" '
                        f'password="{password(user)}";\n')
        return path


def acl_bed(kind: str, workdir: Path, moldau: Callable[[dict[str, object], int], object],
            extra: dict[str, object] | None = None) -> Iterator[AclBed]:
    """Start the broker of `kind` with ACLs; `moldau(overrides, port)` starts Moldau's."""
    settings = {**ACL_SETTINGS, **(extra or {})}
    if kind == "moldau":
        port = free_port()
        moldau({**settings, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}, port)
        yield AclBed(kind, f"127.0.0.1:{port}", workdir)
        return
    ensure_artifacts()
    kafka = KafkaBroker(workdir / "kafka", settings)
    kafka.settings.update({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{kafka.port},"
                     f"CONTROLLER://127.0.0.1:{kafka.controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{kafka.port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT"})
    try:
        kafka.start()
        yield AclBed(kind, kafka.bootstrap, workdir)
    finally:
        kafka.stop()
