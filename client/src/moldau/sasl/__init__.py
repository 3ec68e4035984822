"""SASL pieces both ends use: Kafka's JAAS config syntax and SCRAM (RFC 5802, RFC 7677)."""
