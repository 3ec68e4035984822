"""Listener security: TLS, SASL authentication and the principal of each connection."""
