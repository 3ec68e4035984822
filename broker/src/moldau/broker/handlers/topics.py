"""CreateTopics, DeleteTopics and CreatePartitions, decided by the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import TOPIC, allowed_names, cluster_allowed
from moldau.broker.handlers.configs import topic_config_entries
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.controller import CreatedTopic, NewTopic
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker

UNKNOWN_TOPIC_ID = 100


@api(19, "CreateTopics", 2, 7)
async def handle_create_topics(broker: Broker, request: Request) -> Result:
    body = request.body
    wanted = [NewTopic(name=topic.name, num_partitions=topic.num_partitions,
                       replication_factor=topic.replication_factor,
                       assignments={a.partition_index: list(a.broker_ids)
                                    for a in topic.assignments},
                       configs={c.name: c.value for c in topic.configs})
              for topic in body.topics]
    # CREATE on the cluster creates any topic, else CREATE on each; the configs of the new
    # topic are answered only with DESCRIBE_CONFIGS on it.
    names = [topic.name for topic in wanted]
    creatable = set(names) if cluster_allowed(broker, request, Operation.CREATE,
                                              log_denied=False) \
        else allowed_names(broker, request, Operation.CREATE, TOPIC, names)
    describable = allowed_names(broker, request, Operation.DESCRIBE_CONFIGS, TOPIC, names,
                                log_denied=False)
    created = iter(await broker.controller.create_topics(
        [topic for topic in wanted if topic.name in creatable],
        validate_only=body.validate_only))
    topics: list[dict[str, Any]] = []
    for topic in wanted:
        if topic.name not in creatable:
            topics.append({"name": topic.name, "error_code": ErrorCode.topic_authorization_failed,
                           "error_message": "Authorization failed.", "configs": None})
            continue
        result = next(created)
        if isinstance(result, KafkaError):
            topics.append({"name": topic.name, "error_code": result.code,
                           "error_message": result.message, "configs": None})
            continue
        assert isinstance(result, CreatedTopic)
        if topic.name not in describable:
            topics.append({"name": topic.name, "error_code": ErrorCode.none,
                           "topic_id": None if body.validate_only else result.topic_id,
                           "num_partitions": -1, "replication_factor": -1, "configs": None,
                           "topic_config_error_code": ErrorCode.topic_authorization_failed})
            continue
        entries = (topic_config_entries(broker, topic.name)
                   if topic.name in broker.image.topics else [])
        topics.append({
            "name": topic.name, "error_code": ErrorCode.none,
            "topic_id": None if body.validate_only else result.topic_id,
            "num_partitions": result.num_partitions,
            "replication_factor": result.replication_factor,
            "configs": [{k: entry[k] for k in ("name", "value", "read_only", "config_source",
                                               "is_sensitive")} for entry in entries]})
    return respond(request, {"topics": topics})


@api(20, "DeleteTopics", 1, 6)
async def handle_delete_topics(broker: Broker, request: Request) -> Result:
    body = request.body
    version = request.header.api_version
    if version >= 6:
        items = [(topic.name, topic.topic_id) for topic in body.topics]
    else:
        items = [(name, None) for name in body.topic_names]
    names: list[str] = []
    responses: list[dict[str, Any]] = []
    resolved = [(name if name is not None else
                 getattr(broker.image.topics_by_id.get(topic_id), "name", None)
                 if topic_id is not None else "", topic_id) for name, topic_id in items]
    # DELETE on the cluster deletes any topic; else DELETE on each, and a topic the client
    # may not DESCRIBE is refused without its name (Kafka does not disclose which exist).
    known = [name for name, _ in resolved if name is not None]
    if cluster_allowed(broker, request, Operation.DELETE, log_denied=False):
        describable = deletable = set(known)
    else:
        describable = allowed_names(broker, request, Operation.DESCRIBE, TOPIC, known)
        deletable = allowed_names(broker, request, Operation.DELETE, TOPIC, known)
    for (given, _), (name, topic_id) in zip(items, resolved, strict=True):
        if name is None:
            responses.append({"name": None, "topic_id": topic_id,
                              "error_code": ErrorCode(UNKNOWN_TOPIC_ID)})
            continue
        # A topic the client may describe but that does not exist is answered as unknown.
        if name not in deletable and (name not in describable
                                      or name in broker.image.topics):
            shown = name if given is not None or name in describable else None
            responses.append({"name": shown, "topic_id": topic_id,
                              "error_code": ErrorCode.topic_authorization_failed})
            continue
        names.append(name or "")
        responses.append({"name": name, "topic_id": topic_id})
    results = iter(await broker.controller.delete_topics(names))
    for response in responses:
        if "error_code" in response:
            continue
        result = next(results)
        if isinstance(result, KafkaError):
            response.update(error_code=result.code, error_message=result.message)
        else:
            response.update(error_code=ErrorCode.none, topic_id=result)
    return respond(request, {"responses": responses})


@api(37, "CreatePartitions", 0, 3)
async def handle_create_partitions(broker: Broker, request: Request) -> Result:
    body = request.body
    alterable = allowed_names(broker, request, Operation.ALTER, TOPIC,
                              (topic.name for topic in body.topics))
    results = []
    for topic in body.topics:
        if topic.name not in alterable:
            results.append({"name": topic.name,
                            "error_code": ErrorCode.topic_authorization_failed})
            continue
        assignments = ([list(a.broker_ids) for a in topic.assignments]
                       if topic.assignments is not None else None)
        result: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none}
        try:
            await broker.controller.create_partitions(topic.name, topic.count, assignments,
                                                      validate_only=body.validate_only)
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
        results.append(result)
    return respond(request, {"results": results})
