"""One handler per Kafka API, as Kafka's KafkaApis dispatches them (see apis.py)."""
