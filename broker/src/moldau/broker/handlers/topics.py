"""CreateTopics, DeleteTopics and CreatePartitions, decided by the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.configs import topic_config_entries
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.metadata.controller import CreatedTopic, NewTopic
from moldau.broker.network.channel import Request
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
    results = await broker.controller.create_topics(wanted, validate_only=body.validate_only)
    topics: list[dict[str, Any]] = []
    for topic, result in zip(wanted, results, strict=True):
        if isinstance(result, KafkaError):
            topics.append({"name": topic.name, "error_code": result.code,
                           "error_message": result.message, "configs": None})
            continue
        assert isinstance(result, CreatedTopic)
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
    for name, topic_id in items:
        if name is None and topic_id is not None:
            topic = broker.image.topics_by_id.get(topic_id)
            if topic is None:
                responses.append({"name": None, "topic_id": topic_id,
                                  "error_code": ErrorCode(UNKNOWN_TOPIC_ID)})
                continue
            name = topic.name
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
    results = []
    for topic in body.topics:
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
