"""The replication quota's window (Kafka's ReplicationQuotaManager with its Rate): which
replicas a throttled-replicas list names, and when the measured rate is over the setting."""

import pytest

from moldau.broker.log.config import TOPIC_CONFIG
from moldau.broker.replication.quota import ReplicationQuota, is_throttled
from moldau.config import LONG_MAX, ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quota(rate: int, clock: Clock, windows: int = 11) -> ReplicationQuota:
    return ReplicationQuota(lambda: rate, windows, 1.0, clock)


def test_the_lists_name_partition_and_broker():
    assert is_throttled(["0:1", "1:2"], 0, 1)
    assert is_throttled(["0:1", "1:2"], 1, 2)
    assert not is_throttled(["0:1", "1:2"], 0, 2)
    assert not is_throttled(["0:1", "1:2"], 2, 1)
    assert is_throttled(["*"], 7, 3)
    assert not is_throttled([], 0, 1)
    assert not is_throttled((), 0, 1)


def test_the_topic_configs_take_only_kafkas_format():
    key = TOPIC_CONFIG["leader.replication.throttled.replicas"]
    assert key.parse("0:1, 1:2") == ["0:1", "1:2"]
    assert key.parse("*") == ["*"]
    assert key.parse("") == []
    for bad in ("0", "a:1", "0:b", "0:1,*", "0-1"):
        with pytest.raises(ConfigError, match="must be the literal"):
            key.parse(bad)


def test_a_young_quota_counts_all_but_one_window_as_elapsed():
    clock = Clock()
    limit = quota(100, clock)
    limit.record(1000)  # 1000 bytes over the 10 s a young quota counts: exactly 100/s
    assert limit.observed_rate() == pytest.approx(100.0)
    assert not limit.is_exceeded()
    limit.record(1)
    assert limit.is_exceeded()


def test_the_rate_falls_as_windows_expire():
    clock = Clock()
    limit = quota(100, clock, windows=3)  # counts at least 2 s
    limit.record(500)
    assert limit.observed_rate() == pytest.approx(250.0)
    assert limit.is_exceeded()
    clock.now += 2.5  # the same window, now 2.5 s old
    assert limit.observed_rate() == pytest.approx(200.0)
    assert limit.is_exceeded()
    clock.now += 0.6  # past three windows: forgotten
    assert limit.observed_rate() == 0.0
    assert not limit.is_exceeded()
    assert limit.throttled_bytes_total == 500


def test_bytes_fill_one_window_per_window_length():
    clock = Clock()
    limit = quota(1000, clock, windows=2)
    for _ in range(10):
        limit.record(100)
        clock.now += 0.25
    # At 2.5 s the window started at 0 s has expired (two windows ago); those started at
    # 1 s and 2 s hold 400 + 200 bytes over the 1.5 s since the older one began.
    assert limit.observed_rate() == pytest.approx(600 / 1.5)


def test_an_unset_rate_is_never_exceeded():
    clock = Clock()
    limit = quota(LONG_MAX, clock)
    limit.record(10**12)
    assert not limit.is_exceeded()


def test_the_rate_is_read_at_each_check():
    clock = Clock()
    rate = {"value": LONG_MAX}
    limit = ReplicationQuota(lambda: rate["value"], 11, 1.0, clock)
    limit.record(5000)
    assert not limit.is_exceeded()
    rate["value"] = 100
    assert limit.is_exceeded()
