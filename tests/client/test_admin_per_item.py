"""The admin client's per-item calls against a scripted broker on a real socket: many items
in one request, each item's own answer kept, only the items with a retriable error sent
again, and those still failing at the deadline reported as timed out, alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_broker import FakeBroker, FakeRequest, metadata_response

from moldau.client.admin import AlterConfigOp, AsyncAdmin, ConfigResource, NewTopic
from moldau.client.errors import (
    InvalidConfigError,  # type: ignore[attr-defined]
    KafkaTimeoutError,
    TopicAlreadyExistsError,  # type: ignore[attr-defined]
)
from moldau.client.versions import ApiKey
from moldau.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

VERSIONS = {3: (0, 12), 18: (0, 4), 19: (0, 7), 44: (0, 1)}


async def next_request(broker: FakeBroker) -> FakeRequest:
    """The next request other than Metadata (answered: one broker, this one)."""
    while True:
        request = await asyncio.wait_for(broker.requests.get(), 20)
        if request.api_key != ApiKey.METADATA:
            return request
        await request.reply(metadata_response("fake", broker.port))


def topic_result(name: str, code: ErrorCode = ErrorCode.none,
                 message: str | None = None) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message}


async def with_admin(broker: FakeBroker, scenario: Any, timeout_ms: int = 10000) -> Any:
    async with AsyncAdmin({"bootstrap.servers": broker.address, "retry.backoff.ms": 10,
                           "retry.backoff.max.ms": 50,
                           "default.api.timeout.ms": timeout_ms}) as admin:
        return await scenario(admin)


def test_one_request_carries_every_topic_and_each_keeps_its_answer() -> None:
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            async def scenario(admin: AsyncAdmin) -> dict:
                call = asyncio.create_task(admin.create_topics_each(
                    [NewTopic("a", 1), NewTopic("b", 1), NewTopic("c", 1)]))
                request = await next_request(broker)
                assert request.api_key == ApiKey.CREATE_TOPICS
                assert [t.name for t in request.body.topics] == ["a", "b", "c"]
                await request.reply({"topics": [
                    topic_result("a"),
                    topic_result("b", ErrorCode.topic_already_exists,
                                 "Topic 'b' already exists."),
                    topic_result("c", ErrorCode.invalid_config, "Unknown topic config name: x")]})
                return await call

            found = await with_admin(broker, scenario)
            assert found["a"] is None
            assert isinstance(found["b"], TopicAlreadyExistsError)
            assert str(found["b"]) == "Topic 'b' already exists."
            assert isinstance(found["c"], InvalidConfigError)
            assert str(found["c"]) == "Topic 'c': Unknown topic config name: x"
            assert list(found) == ["a", "b", "c"]
    asyncio.run(main())


def test_only_the_items_with_a_retriable_error_are_sent_again() -> None:
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            async def scenario(admin: AsyncAdmin) -> dict:
                call = asyncio.create_task(admin.create_topics_each(
                    [NewTopic("a", 1), NewTopic("b", 1)]))
                first = await next_request(broker)
                await first.reply({"topics": [
                    topic_result("a"), topic_result("b", ErrorCode.not_controller)]})
                again = await next_request(broker)
                # Sending "a" again would answer TOPIC_ALREADY_EXISTS for a topic just made.
                assert [t.name for t in again.body.topics] == ["b"]
                await again.reply({"topics": [topic_result("b")]})
                return await call

            assert await with_admin(broker, scenario) == {"a": None, "b": None}
    asyncio.run(main())


def test_an_item_still_failing_at_the_deadline_times_out_alone() -> None:
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            async def scenario(admin: AsyncAdmin) -> dict:
                call = asyncio.create_task(admin.incremental_alter_configs_each({
                    ConfigResource.topic("a"): [AlterConfigOp.set("retention.ms", "1")],
                    ConfigResource.topic("b"): [AlterConfigOp.delete("retention.ms")]},
                    timeout=1.5))
                request = await next_request(broker)
                assert request.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
                assert [r.resource_name for r in request.body.resources] == ["a", "b"]
                answers = [("a", ErrorCode.none), ("b", ErrorCode.request_timed_out)]
                while not call.done():
                    await request.reply({"responses": [
                        {"resource_type": 2, "resource_name": name, "error_code": code,
                         "error_message": None} for name, code in answers]})
                    answers = [("b", ErrorCode.request_timed_out)]
                    try:
                        request = await asyncio.wait_for(next_request(broker), 3)
                    except TimeoutError:
                        break
                    assert [r.resource_name for r in request.body.resources] == ["b"]
                return await call

            found = await with_admin(broker, scenario)
            assert found[ConfigResource.topic("a")] is None
            error = found[ConfigResource.topic("b")]
            assert isinstance(error, KafkaTimeoutError)
            assert "incrementalAlterConfigs timed out after" in str(error)
            assert "REQUEST_TIMED_OUT" in str(error)
    asyncio.run(main())


def test_the_raising_call_raises_the_first_items_error() -> None:
    async def main() -> None:
        async with FakeBroker(VERSIONS) as broker:
            async def scenario(admin: AsyncAdmin) -> None:
                call = asyncio.create_task(admin.create_topics(
                    [NewTopic("a", 1), NewTopic("b", 1)]))
                request = await next_request(broker)
                await request.reply({"topics": [
                    topic_result("a"), topic_result("b", ErrorCode.topic_already_exists)]})
                await call

            with pytest.raises(TopicAlreadyExistsError, match="Topic 'b': TOPIC_ALREADY_EXISTS"):
                await with_admin(broker, scenario)
    asyncio.run(main())
