"""maxOffsetsPerTrigger, minOffsetsPerTrigger and maxTriggerDelay as Spark's Kafka connector
applies them (the end-to-end tests run both connectors side by side)."""

from __future__ import annotations

import pytest
from pyspark_moldau.limits import TriggerDelay, rate_limit
from pyspark_moldau.options import OptionError, source_options

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def test_rate_limit_shares_by_backlog_and_starves_no_partition() -> None:
    start = {A: 0, B: 10, C: 5}
    end = {A: 90, B: 19, C: 6}
    # 100 waiting, 10 allowed: 9 of A's 90, 0.9 -> 1 of B's 9, 0.1 -> 1 of C's 1.
    assert rate_limit(start, end, 10) == {A: 9, B: 11, C: 6}
    assert rate_limit(start, end, 100) == end
    # A partition not in start yet is read from its earliest offset: nothing waiting here.
    assert rate_limit({A: 0}, {A: 50, B: 7}, 10) == {A: 10, B: 7}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_waits_for_min_rows_until_the_delay_passes() -> None:
    clock = Clock()
    gate = TriggerDelay(10, 5000, clock)
    # The first trigger never waits; it starts the delay.
    assert not gate.should_wait({A: 0}, {A: 0})
    clock.now += 1
    assert gate.should_wait({A: 0}, {A: 9})
    # Enough rows, counted over every partition: a batch, and the delay starts again.
    assert not gate.should_wait({A: 0, B: 0}, {A: 6, B: 4})
    clock.now += 4.9
    assert gate.should_wait({A: 10}, {A: 12})
    clock.now += 0.1  # 5 s since the last batch
    assert not gate.should_wait({A: 10}, {A: 12})
    clock.now += 1
    assert gate.should_wait({A: 12}, {A: 12})


BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}


@pytest.mark.parametrize(("delay", "ms"), [(None, 900_000), ("15m", 900_000), ("10s", 10_000),
                                           ("250", 250), ("2 min", 120_000), ("1h", 3_600_000)])
def test_max_trigger_delay_reads_sparks_time_strings(delay, ms) -> None:
    options = {**BOOTSTRAP, "minOffsetsPerTrigger": "5"}
    if delay is not None:
        options["maxTriggerDelay"] = delay
    parsed = source_options(options, streaming=True)
    assert (parsed.min_offsets_per_trigger, parsed.max_trigger_delay_ms) == (5, ms)


@pytest.mark.parametrize(("options", "message"), [
    ({"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "15"},
     "The value of minOffsetPerTrigger(20) is higher than the maxOffsetsPerTrigger(15)."),
    ({"minOffsetsPerTrigger": "0"},
     "Option 'minOffsetsPerTrigger' must be a positive integer, got '0'"),
    ({"maxTriggerDelay": "soon"},
     "Option 'maxTriggerDelay' must be a time such as 50s, 100ms or 15m (units: us, ms, s, "
     "m or min, h, d), got 'soon'"),
])
def test_bad_trigger_options_are_named(options, message) -> None:
    with pytest.raises(OptionError) as caught:
        source_options({**BOOTSTRAP, **options}, streaming=True)
    assert str(caught.value) == message
