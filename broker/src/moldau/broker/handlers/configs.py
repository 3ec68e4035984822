"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers (dynamic
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
from moldau.config import DYNAMIC_BROKER_KEYS
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
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Broker settings that are several names for one value, most specific first (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms).
_SAME_VALUE = [["log.roll.ms", "log.roll.hours"], ["log.roll.jitter.ms", "log.roll.jitter.hours"],
               ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
               ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]]


def _broker_names(name: str) -> list[str]:
    return next((names for names in _SAME_VALUE if name in names), [name])


def _synonym_chain(broker: Broker, primary: str, names: list[str]
                   ) -> list[tuple[str, str | None, int]]:
    """Kafka's rule: each layer (this broker's dynamic configs, the cluster default,
    server.properties, Kafka's defaults) lists every name it sets, most specific layer
    first; leading entries are dropped until `primary` appears. So retention.ms shows
    nothing when only the derived log.retention.hours default exists."""
    config = broker.config
    layers = [(config.dynamic_broker, DYNAMIC_BROKER_CONFIG),
              (config.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
              (config.overrides, STATIC_BROKER_CONFIG)]
    chain = [(prop, BROKER_CONFIG[prop].render(values[prop]), source)
             for values, source in layers for prop in names if prop in values]
    chain += [(prop, BROKER_CONFIG[prop].render(BROKER_CONFIG[prop].default), DEFAULT_CONFIG)
              for prop in names if BROKER_CONFIG[prop].default is not None]
    while chain and chain[0][0] != primary:
        chain.pop(0)
    return chain


def _broker_synonyms(broker: Broker, name: str) -> list[tuple[str, str | None, int]]:
    """The broker-level chain behind a topic setting."""
    props = BROKER_SYNONYMS[name]
    return _synonym_chain(broker, props[0], props) if props else []


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


def _broker_config_entries(broker: Broker, keys: Any, synonyms: bool, documentation: bool,
                           *, cluster_default: bool) -> list[dict[str, Any]]:
    """A broker's settings with their sources; for the cluster default resource ("") only
    those the cluster default sets, as Kafka answers."""
    entries = []
    for name, key in sorted(BROKER_CONFIG.keys.items()):
        if (keys and name not in keys) or \
                (cluster_default and name not in broker.config.dynamic_default):
            continue
        chain = _synonym_chain(broker, name, [n for n in _broker_names(name)
                                              if n in BROKER_CONFIG])
        if cluster_default:
            chain = [link for link in chain if link[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = key.render(broker.config.dynamic_default[name])
        else:
            value = key.render(broker.config[name])
        entries.append({"name": name, "value": value,
                        "read_only": name not in DYNAMIC_BROKER_KEYS,
                        "config_source": chain[0][2] if chain else DEFAULT_CONFIG,
                        "is_sensitive": key.sensitive, "config_type": key.type.value,
                        "synonyms": [{"name": n, "value": v, "source": src}
                                     for n, v, src in chain] if synonyms else [],
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
            result["configs"] = _broker_config_entries(
                broker, keys, synonyms, documentation,
                cluster_default=resource.resource_name == "")
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
