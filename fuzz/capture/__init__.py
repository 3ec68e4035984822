"""Seeds for the fuzz targets from real client traffic.

`python -m fuzz.capture` (`make fuzz-corpus`) starts a Moldau broker behind a recording
proxy, drives it with confluent-kafka, kafka-python, aiokafka and Apache Kafka's Java tools,
and rewrites fuzz/corpus/ from what the clients sent (and, for control batches, what the
broker served them).
"""
