"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and read-only
broker configs), with Kafka's config sources and synonyms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.config import BROKER_CONFIG
from moldau.broker.handlers.authz import CLUSTER, GROUP, MESSAGES, TOPIC, allowed
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.log.config import BROKER_SYNONYMS, TOPIC_CONFIG
from moldau.broker.metadata.controller import ConfigChange
from moldau.broker.metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import CLUSTER_NAME, Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

BROKER_LOGGER_RESOURCE = 8
CLIENT_METRICS_RESOURCE = 16
GROUP_RESOURCE = 32


def config_refusal(broker: Broker, request: Request, operation: Operation,
                   resource_type: int, name: str) -> ErrorCode | None:
    """Kafka's rule for a config resource: topics need the operation (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on the topic, groups on the group, brokers on the cluster."""
    if resource_type == TOPIC_RESOURCE:
        target, denied = (TOPIC, name), ErrorCode.topic_authorization_failed
    elif resource_type == GROUP_RESOURCE:
        target, denied = (GROUP, name), ErrorCode.group_authorization_failed
    elif resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE):
        target, denied = (CLUSTER, CLUSTER_NAME), ErrorCode.cluster_authorization_failed
    else:
        return None  # refused later as an unknown resource
    return None if allowed(broker, request, operation, *target) else denied


# DescribeConfigsResponse config sources.
TOPIC_CONFIG_SOURCE = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


def _broker_value(broker: Broker, prop: str) -> tuple[str | None, int]:
    key = BROKER_CONFIG[prop]
    source = STATIC_BROKER_CONFIG if prop in broker.config.overrides else DEFAULT_CONFIG
    return key.render(broker.config[prop]), source


def _broker_synonyms(broker: Broker, name: str) -> list[tuple[str, str | None, int]]:
    """Kafka's rule: every synonym's value set in server.properties, then every synonym's
    own default, with leading entries dropped until the primary synonym appears. So
    retention.ms shows nothing when only the derived log.retention.hours default exists."""
    props = BROKER_SYNONYMS[name]
    chain = [(prop, BROKER_CONFIG[prop].render(broker.config.overrides[prop]),
              STATIC_BROKER_CONFIG) for prop in props if prop in broker.config.overrides]
    chain += [(prop, BROKER_CONFIG[prop].render(BROKER_CONFIG[prop].default), DEFAULT_CONFIG)
              for prop in props if BROKER_CONFIG[prop].default is not None]
    while chain and chain[0][0] != props[0]:
        chain.pop(0)
    return chain


def topic_config_entries(broker: Broker, topic: str, *, keys: Any = None,
                         synonyms: bool = False, documentation: bool = False
                         ) -> list[dict[str, Any]]:
    overrides = broker.image.topic_configs(topic)
    effective = broker.config.topic_log_config(overrides)
    entries = []
    for name, key in sorted(TOPIC_CONFIG.keys.items()):
        if keys and name not in keys:
            continue
        chain = _broker_synonyms(broker, name)
        if name in overrides:
            chain.insert(0, (name, overrides[name], TOPIC_CONFIG_SOURCE))
        value = key.render(getattr(effective, name.replace(".", "_")))
        entries.append({
            "name": name, "value": value, "read_only": False,
            "config_source": chain[0][2] if chain else DEFAULT_CONFIG,
            "is_sensitive": key.sensitive, "config_type": key.type.value,
            "documentation": key.doc if documentation else None,
            "synonyms": [{"name": n, "value": v, "source": src} for n, v, src in chain]
            if synonyms else [],
        })
    return entries


def _broker_config_entries(broker: Broker, keys: Any, documentation: bool
                           ) -> list[dict[str, Any]]:
    entries = []
    for name, key in sorted(BROKER_CONFIG.keys.items()):
        if keys and name not in keys:
            continue
        value, source = _broker_value(broker, name)
        entries.append({"name": name, "value": value, "read_only": True,
                        "config_source": source, "is_sensitive": key.sensitive,
                        "config_type": key.type.value, "synonyms": [],
                        "documentation": key.doc if documentation else None})
    return entries


@api(32, "DescribeConfigs", 1, 4)
async def handle_describe_configs(broker: Broker, request: Request) -> Result:
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        result: dict[str, Any] = {"resource_type": resource.resource_type,
                                  "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.none, "configs": []}
        keys = resource.configuration_keys
        refusal = config_refusal(broker, request, Operation.DESCRIBE_CONFIGS,
                                 resource.resource_type, resource.resource_name)
        if refusal is not None:
            result.update(error_code=refusal, error_message=MESSAGES[refusal])
        elif resource.resource_type == TOPIC_RESOURCE:
            if resource.resource_name in broker.image.topics:
                result["configs"] = topic_config_entries(
                    broker, resource.resource_name, keys=keys, synonyms=synonyms,
                    documentation=documentation)
            else:
                result.update(error_code=ErrorCode.unknown_topic_or_partition,
                              error_message=f"Topic {resource.resource_name} does not exist")
        elif resource.resource_type == BROKER_RESOURCE and \
                resource.resource_name in ("", str(broker.node_id)):
            result["configs"] = _broker_config_entries(broker, keys, documentation)
        else:
            result.update(error_code=ErrorCode.invalid_request,
                          error_message=f"Unsupported resource {resource.resource_type} "
                                        f"{resource.resource_name!r}")
        results.append(result)
    return respond(request, {"results": results})


async def _alter(broker: Broker, request: Request, incremental: bool) -> Result:
    body = request.body
    responses = []
    for resource in body.resources:
        changes = [ConfigChange(item.name, item.value,
                                getattr(item, "config_operation", 0))
                   for item in resource.configs]
        response = {"resource_type": resource.resource_type,
                    "resource_name": resource.resource_name, "error_code": ErrorCode.none}
        refusal = config_refusal(broker, request, Operation.ALTER_CONFIGS,
                                 resource.resource_type, resource.resource_name)
        if refusal is not None:
            response.update(error_code=refusal, error_message=MESSAGES[refusal])
            responses.append(response)
            continue
        try:
            await broker.controller.alter_configs(
                resource.resource_type, resource.resource_name, changes,
                incremental=incremental, validate_only=body.validate_only)
        except KafkaError as exc:
            response.update(error_code=exc.code, error_message=exc.message)
        responses.append(response)
    return respond(request, {"responses": responses})


@api(33, "AlterConfigs", 0, 2)
async def handle_alter_configs(broker: Broker, request: Request) -> Result:
    return await _alter(broker, request, incremental=False)


@api(44, "IncrementalAlterConfigs", 0, 1)
async def handle_incremental_alter_configs(broker: Broker, request: Request) -> Result:
    return await _alter(broker, request, incremental=True)
