"""Security pieces both ends use: Kafka's JAAS config syntax, SCRAM (RFC 5802, RFC 7677),
and TLS contexts from Kafka's ssl.* settings."""
