"""Kafka wire protocol: framing, headers and the API version table."""
