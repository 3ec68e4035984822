"""Dynamic broker configs at the controller: BROKER resources ("" the cluster default, a
broker id that broker) are stored as ConfigRecords through the metadata quorum, survive
reopening, and only settings Moldau applies without a restart are accepted, with Kafka's
errors for the rest."""

import asyncio
import contextlib

import pytest
from quorum_helpers import make_controller, open_quorum, register_live

from moldau.broker.metadata.controller import ConfigChange, NewTopic
from moldau.broker.metadata.records import BROKER_RESOURCE
from moldau.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def controller_on(path):
    controller = make_controller(await open_quorum(path))
    try:
        yield controller
    finally:
        await controller.quorum.close()


def broker_configs(controller, name):
    return controller.image.configs.get((BROKER_RESOURCE, name), {})


async def refused(controller, name, changes, *, incremental=True):
    with pytest.raises(KafkaError) as info:
        await controller.alter_configs(BROKER_RESOURCE, name, changes,
                                       incremental=incremental, validate_only=False)
    return info.value.code, info.value.message


def test_cluster_default_and_per_broker_configs_persist(tmp_path):
    async def main():
        async with controller_on(tmp_path) as controller:
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.retention.ms", "60000"),
                ConfigChange("log.cleanup.policy", "compact", 2)],
                incremental=True, validate_only=False)
            await controller.alter_configs(BROKER_RESOURCE, "2", [
                ConfigChange("log.segment.bytes", "2097152")], incremental=True,
                validate_only=False)
            assert broker_configs(controller, "") == {
                "log.retention.ms": "60000", "log.cleanup.policy": "delete,compact"}
            assert broker_configs(controller, "2") == {"log.segment.bytes": "2097152"}
            # Deleting one key leaves the others.
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.cleanup.policy", None, 1)], incremental=True,
                validate_only=False)
            assert broker_configs(controller, "") == {"log.retention.ms": "60000"}
        async with controller_on(tmp_path) as reopened:
            assert broker_configs(reopened, "") == {"log.retention.ms": "60000"}
            assert broker_configs(reopened, "2") == {"log.segment.bytes": "2097152"}

    asyncio.run(main())


def test_legacy_alter_replaces_the_set_and_validate_only_writes_nothing(tmp_path):
    async def main():
        async with controller_on(tmp_path) as controller:
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.retention.ms", "60000"),
                ConfigChange("min.insync.replicas", "2")], incremental=True,
                validate_only=False)
            end = controller.quorum.driver.log.end_offset
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.retention.bytes", "1000")], incremental=False,
                validate_only=True)
            assert controller.quorum.driver.log.end_offset == end
            assert broker_configs(controller, "") == {
                "log.retention.ms": "60000", "min.insync.replicas": "2"}
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.retention.bytes", "1000")], incremental=False,
                validate_only=False)
            assert broker_configs(controller, "") == {"log.retention.bytes": "1000"}

    asyncio.run(main())


def test_refusals_use_kafkas_errors_and_change_nothing(tmp_path):
    async def main():
        async with controller_on(tmp_path) as controller:
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("log.retention.ms", "60000")], incremental=True,
                validate_only=False)
            end = controller.quorum.driver.log.end_offset
            assert await refused(controller, "", [
                ConfigChange("log.retention.bytes", "5"),
                ConfigChange("num.partitions", "3"), ConfigChange("log.dirs", "/x")]) == (
                ErrorCode.invalid_request,
                "Cannot update these configs dynamically: Set(log.dirs, num.partitions)")
            # Dynamic in Kafka, but not (yet) applied by Moldau without a restart.
            code, message = await refused(controller, "", [
                ConfigChange("log.cleaner.threads", "2")])
            assert code is ErrorCode.invalid_request
            assert "log.cleaner.threads" in message
            assert await refused(controller, "", [ConfigChange("no.such.config", "1")]) == (
                ErrorCode.invalid_config, "Unknown broker config name: no.such.config")
            assert await refused(controller, "", [
                ConfigChange("log.retention.ms", "abc")]) == (
                ErrorCode.invalid_request,
                "Invalid value abc for configuration log.retention.ms: Not a number of type "
                "LONG")
            code, message = await refused(controller, "", [
                ConfigChange("log.segment.bytes", "10")])
            assert code is ErrorCode.invalid_request and "log.segment.bytes" in message
            assert await refused(controller, "", [
                ConfigChange("log.retention.ms", "1", 2)]) == (
                ErrorCode.invalid_config,
                "Config value append is not allowed for config key: log.retention.ms")
            assert await refused(controller, "one", [
                ConfigChange("log.retention.ms", "1")]) == (
                ErrorCode.invalid_request, "Unable to parse broker name as a base 10 number.")
            assert await refused(controller, "-1", [
                ConfigChange("log.retention.ms", "1")]) == (
                ErrorCode.invalid_request, "Invalid negative broker ID.")
            assert controller.quorum.driver.log.end_offset == end
            assert broker_configs(controller, "") == {"log.retention.ms": "60000"}

    asyncio.run(main())


def test_unclean_election_follows_the_cluster_default(tmp_path):
    """The controller decides unclean elections: a topic without its own setting follows the
    cluster's dynamic default, a topic's own setting wins over it."""
    async def main():
        async with controller_on(tmp_path) as controller:
            await register_live(controller, 1)
            await controller.create_topics([NewTopic("plain"), NewTopic(
                "strict", configs={"unclean.leader.election.enable": "false"})],
                validate_only=False)
            plain = controller.image.topics["plain"].topic_id
            strict = controller.image.topics["strict"].topic_id
            assert not controller._unclean_allowed(plain)
            await controller.alter_configs(BROKER_RESOURCE, "", [
                ConfigChange("unclean.leader.election.enable", "true")], incremental=True,
                validate_only=False)
            assert controller._unclean_allowed(plain)
            assert not controller._unclean_allowed(strict)

    asyncio.run(main())
