"""DescribeCluster, UnregisterBroker and DescribeLogDirs."""

from __future__ import annotations

import asyncio
import shutil
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import cluster_allowed, cluster_operations
from moldau.broker.handlers.metadata import brokers_for, controller_id
from moldau.broker.handlers.registry import Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from moldau.broker.server import Broker


@api(60, "DescribeCluster", 0, 2)
async def handle_describe_cluster(broker: Broker, request: Request) -> Result:
    # v2 (KIP-1073) may ask for fenced brokers too, each marked.
    include_fenced = bool(getattr(request.body, "include_fenced_brokers", False))
    brokers = [{"broker_id": node["node_id"], "host": node["host"], "port": node["port"],
                "rack": node["rack"], "is_fenced": node["is_fenced"]}
               for node in brokers_for(broker, request.listener, include_fenced=include_fenced)]
    operations = cluster_operations(broker, request) \
        if request.body.include_cluster_authorized_operations else -2**31
    return respond(request, {"error_code": ErrorCode.none, "cluster_id": broker.cluster_id,
                             "controller_id": controller_id(broker), "brokers": brokers,
                             "cluster_authorized_operations": operations})


@api(64, "UnregisterBroker", 0, 0)
async def handle_unregister_broker(broker: Broker, request: Request) -> Result:
    """Decided by the active controller: a broker that is not forwards it (FORWARDED_APIS).
    Kafka's controller asks ALTER on the cluster."""
    if not cluster_allowed(broker, request, Operation.ALTER):
        return respond(request, {"error_code": ErrorCode.cluster_authorization_failed,
                                 "error_message": None})
    try:
        await broker.controller.unregister_broker(int(request.body.broker_id))
    except KafkaError as exc:
        return respond(request, {"error_code": exc.code, "error_message": exc.message})
    return respond(request, {"error_code": ErrorCode.none, "error_message": None})


@api(35, "DescribeLogDirs", 1, 4)
async def handle_describe_log_dirs(broker: Broker, request: Request) -> Result:
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        return respond(request, {"error_code": ErrorCode.cluster_authorization_failed,
                                 "results": []})
    wanted = request.body.topics
    selected = None if wanted is None else {
        (topic.topic, index) for topic in wanted for index in topic.partitions}

    def describe() -> list[dict[str, Any]]:
        results = []
        for directory, partitions in broker.logs.describe_dirs():
            topics: dict[str, list[dict[str, Any]]] = {}
            for topic, index, size, lag in partitions:
                if selected is None or (topic, index) in selected:
                    topics.setdefault(topic, []).append({
                        "partition_index": index, "partition_size": size,
                        "offset_lag": lag, "is_future_key": False})
            usage = shutil.disk_usage(directory)
            results.append({"error_code": ErrorCode.none, "log_dir": directory,
                            "topics": [{"name": name, "partitions": parts}
                                       for name, parts in topics.items()],
                            "total_bytes": usage.total, "usable_bytes": usage.free})
        return results

    results = await asyncio.to_thread(describe)
    return respond(request, {"error_code": ErrorCode.none, "results": results})
