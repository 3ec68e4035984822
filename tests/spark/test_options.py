"""The options of format("moldau") checked as Spark's Kafka connector checks them, with its
messages (the end-to-end tests show one of them through Spark)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType
from pyspark_moldau.options import OptionError, source_options
from pyspark_moldau.sink_options import sink_options

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t"}, "Option 'kafka.bootstrap.servers' must be specified for configuring "
                         "Kafka consumer"),
    (BOOTSTRAP, "One of the following options must be specified for Kafka source: subscribe, "
                "subscribepattern, assign. See the docs for more details."),
    ({**BOOTSTRAP, "subscribe": "t", "assign": '{"t":[0]}'},
     "Only one of the following options can be specified for Kafka source: subscribe, "
     "subscribepattern, assign. See the docs for more details."),
    ({**BOOTSTRAP, "subscribe": " "},
     "No topics to subscribe to as specified value for option 'subscribe' is ' '"),
    ({**BOOTSTRAP, "subscribePattern": ""},
     "Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''"),
    ({**BOOTSTRAP, "assign": "nope"},
     "No topicpartitions to assign as specified value for option 'assign' is 'nope'"),
    ({**BOOTSTRAP, "assign": '{"t":0}'}, 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, '
                                         'got {"t":0}'),
    ({**BOOTSTRAP, "subscribe": "t", "startingOffsets": "oldest"},
     'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got oldest'),
    ({**BOOTSTRAP, "subscribe": "t", "startingOffsets": "latest"},
     "starting offset can't be latest for batch queries on Kafka"),
    ({**BOOTSTRAP, "subscribe": "t", "endingOffsets": "earliest"},
     "ending offset can't be earliest for batch queries on Kafka"),
    ({**BOOTSTRAP, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'},
     "startingOffsets for t-0 can't be latest for batch queries on Kafka"),
    ({**BOOTSTRAP, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'},
     "ending offset for t-0 can't be earliest for batch queries on Kafka"),
    ({**BOOTSTRAP, "subscribe": "t", "kafka.enable.auto.commit": "true"},
     "Kafka option 'enable.auto.commit' is not supported"),
    ({**BOOTSTRAP, "subscribe": "t", "includeHeaders": "maybe"},
     "Option 'includeHeaders' must be true or false, got 'maybe'"),
    ({**BOOTSTRAP, "subscribe": "t", "failOnDataLoss": "maybe"},
     "Option 'failOnDataLoss' must be true or false, got 'maybe'"),
    ({**BOOTSTRAP, "subscribe": "t", "maxRecordsPerPartition": "0"},
     "Option 'maxRecordsPerPartition' must be a positive integer, got '0'"),
])
def test_bad_batch_options_are_named(options, message) -> None:
    with pytest.raises(OptionError) as caught:
        source_options(options, streaming=False)
    assert str(caught.value) == message


def test_streaming_refuses_ending_offsets_and_defaults_to_latest() -> None:
    options = {**BOOTSTRAP, "subscribe": "t"}
    assert source_options(options, streaming=True).starting == "latest"
    assert source_options(options, streaming=False).starting == "earliest"
    with pytest.raises(OptionError, match="^ending offset not valid in streaming queries$"):
        source_options({**options, "endingOffsets": "latest"}, streaming=True)


def test_options_are_case_insensitive_and_kafka_settings_pass_through() -> None:
    parsed = source_options({**BOOTSTRAP, "SUBSCRIBE": "a, b", "MaxOffsetsPerTrigger": "7",
                             "kafka.isolation.level": "read_committed"}, streaming=True)
    assert parsed.strategy.topics == ("a", "b")
    assert parsed.max_offsets_per_trigger == 7
    assert parsed.client == {"bootstrap.servers": "127.0.0.1:1",
                             "isolation.level": "read_committed"}


def schema(*fields: tuple) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


@pytest.mark.parametrize(("columns", "options", "message"), [
    ([("value", StringType()), ("topic", StringType())], {"exactlyOnce": "true"},
     "Option 'exactlyOnce' needs the 'topic' option, or 'progressTopic' naming an existing "
     "topic when the rows carry their topic"),
    ([("value", StringType())], {"exactlyOnce": "yes", "topic": "t"},
     "Option 'exactlyOnce' must be true or false, got 'yes'"),
    ([("value", StringType())], {"exactlyOnce": "true", "topic": "t",
                                 "kafka.enable.idempotence": "false"},
     "Kafka option 'enable.idempotence' cannot be false with 'exactlyOnce': transactions "
     "need the idempotent producer"),
    ([("value", StringType())], {"topic": "t", "kafka.transactional.id": "mine"},
     "Kafka option 'transactional.id' is not supported: with 'exactlyOnce' set to 'true' "
     "the sink gives each write task its own"),
    ([("value", StringType())], {}, "topic option required when no 'topic' attribute is "
                                    "present. Use the topic option for setting a topic."),
    ([("x", IntegerType())], {"topic": "t"}, "Required attribute 'value' not found"),
    ([("key", IntegerType()), ("value", StringType())], {"topic": "t"},
     "key attribute unsupported type int. key must be a(n) string or binary"),
    ([("value", StringType())], {"topic": "t", "kafka.value.serializer": "x"},
     "Kafka option 'value.serializer' is not supported as values are serialized as byte "
     "arrays. Use DataFrame operations to explicitly serialize the values into either "
     "strings or byte arrays."),
    ([("value", StringType())], {"topic": "t", "kafka.bootstrap.servers": ""},
     "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"),
])
def test_bad_sink_options_are_named(columns, options, message) -> None:
    with pytest.raises(OptionError) as caught:
        sink_options({**BOOTSTRAP, **options}, schema(*columns))
    assert str(caught.value) == message


def test_exactly_once_keeps_its_progress_on_the_topic_or_the_progress_topic() -> None:
    value_and_topic = schema(("value", StringType()), ("topic", StringType()))
    by_option = sink_options({**BOOTSTRAP, "topic": "out", "exactlyOnce": "TRUE"},
                             schema(("value", StringType())))
    assert (by_option.exactly_once, by_option.progress_topic) == (True, "out")
    by_column = sink_options({**BOOTSTRAP, "exactlyOnce": "true", "progressTopic": "marks"},
                             value_and_topic)
    assert (by_column.topic, by_column.progress_topic) == (None, "marks")
    plain = sink_options({**BOOTSTRAP}, value_and_topic)
    assert (plain.exactly_once, plain.progress_topic) == (False, None)
