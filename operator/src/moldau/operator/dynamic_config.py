"""The part of a KafkaCluster's `config` applied without restarting pods, as Strimzi does
for Kafka's dynamically updatable broker settings.

Those keys (moldau.config.DYNAMIC_BROKER_KEYS: log.retention.*, log.segment.bytes,
min.insync.replicas, ...) are left out of server.properties, so changing them changes no
pod's config hash and rolls nothing. The operator keeps the cluster-wide default broker
resource ("") equal to them instead, with one IncrementalAlterConfigs per change: brokers
apply it at once and read it from the metadata log when they start. A key removed from the
spec is deleted there, so brokers fall back to Kafka's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from moldau.client.admin import (
    AlterConfigOp,
    AlterConfigOpType,
    AsyncAdmin,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from moldau.config import DYNAMIC_BROKER_KEYS

CLUSTER_DEFAULT = ConfigResource.broker("")


def static_part(config: Mapping[str, str]) -> dict[str, str]:
    """What goes into server.properties: every key that needs a restart."""
    return {key: value for key, value in config.items() if key not in DYNAMIC_BROKER_KEYS}


def dynamic_part(config: Mapping[str, str]) -> dict[str, str]:
    """What the cluster default resource holds."""
    return {key: value for key, value in config.items() if key in DYNAMIC_BROKER_KEYS}


def changes_to(wanted: Mapping[str, str], current: Mapping[str, ConfigEntry]
               ) -> list[AlterConfigOp]:
    """The operations that make the cluster default (as described) hold exactly `wanted`
    among the dynamic keys: set what differs, delete what the spec no longer has."""
    ops = [AlterConfigOp.set(key, value) for key, value in sorted(wanted.items())
           if key not in current or current[key].value != value]
    ops += [AlterConfigOp(key, None, AlterConfigOpType.DELETE) for key in sorted(current)
            if key in DYNAMIC_BROKER_KEYS and key not in wanted
            and current[key].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
    return ops


@dataclass(frozen=True)
class Applied:
    """What one reconcile changed in the cluster default: keys set, keys deleted."""

    set: dict[str, str]
    deleted: list[str]

    def describe(self) -> str:
        parts = [f"{key}={value}" for key, value in self.set.items()]
        parts += [f"{key} (deleted)" for key in self.deleted]
        return ", ".join(parts)


async def apply_dynamic(admin: AsyncAdmin, config: Mapping[str, str], timeout: float
                        ) -> Applied | None:
    """Bring the cluster default in line with the spec's dynamic keys; None when it already
    was. Raises the client's errors (the cluster did not answer, a value was refused)."""
    wanted = dynamic_part(config)
    described = await admin.describe_configs([CLUSTER_DEFAULT], timeout=timeout)
    ops = changes_to(wanted, described[CLUSTER_DEFAULT])
    if not ops:
        return None
    await admin.incremental_alter_configs({CLUSTER_DEFAULT: ops}, timeout=timeout)
    return Applied({op.name: op.value for op in ops if op.op is AlterConfigOpType.SET
                    and op.value is not None},
                   [op.name for op in ops if op.op is AlterConfigOpType.DELETE])
