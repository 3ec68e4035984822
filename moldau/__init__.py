"""Moldau: a Kafka-compatible streaming platform."""
