"""End-to-end tests: real broker processes driven by real Kafka clients."""
