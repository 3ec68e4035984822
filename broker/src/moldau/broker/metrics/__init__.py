"""What the broker measures and serves over HTTP: Prometheus metrics under Kafka's (Strimzi's
JMX exporter) and kafka-exporter's names, and the liveness and readiness probes."""
