"""Kafka errors as Python exceptions, carrying Kafka's own error codes (from kio)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """An error that maps onto a Kafka error code on the wire."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"KafkaError({self.code.name}, {self.message!r})"
