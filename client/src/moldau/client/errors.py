"""Typed client exceptions: one class per Kafka error code, plus the client's own conditions.

Every class derives from `moldau.errors.KafkaError` and carries `code` and `retriable` as
Kafka defines them, so callers can catch a specific condition
(`except UnknownTopicOrPartitionError`) or a whole family (`except KafkaError`, checking
`.retriable`). The per-code classes are generated from kio's `ErrorCode` enum.
"""

from __future__ import annotations

from typing import Any, ClassVar

from moldau.errors import ErrorCode, KafkaError

__all__ = [
    "BufferExhaustedError",
    "ClientClosedError",
    "CommitFailedError",
    "ConcurrentModificationError",
    "DisconnectedError",
    "ErrorCode",
    "IllegalStateError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "NoOffsetForPartitionError",
    "ProtocolError",
    "RecordTooLargeError",
    "SerializationError",
    "TransactionAbortedError",
    "WakeupError",
    "error_class",
    "error_for",
]


class _CodedError(KafkaError):
    """Base of the generated classes: the code comes from the class, not the caller."""

    code_value: ClassVar[ErrorCode] = ErrorCode.unknown_server_error
    retriable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *args: Any) -> None:
        super().__init__(self.code_value, message)
        self.args = (message or self.code_value.name, *args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


def _class_name(code: ErrorCode) -> str:
    name = code.name.removesuffix("_exception")
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_BY_CODE: dict[int, type[_CodedError]] = {}


def _generate() -> None:
    for code in ErrorCode:
        if code is ErrorCode.none:
            continue
        name = _class_name(code)
        cls = type(name, (_CodedError,), {
            "code_value": code, "retriable": bool(code.retriable), "__module__": __name__,
            "__doc__": f"Kafka error {code.value} ({code.name.upper()})."})
        globals()[name] = cls
        __all__.append(name)
        _BY_CODE[int(code)] = cls


_generate()


def error_class(code: int | ErrorCode) -> type[_CodedError]:
    """The exception class for a Kafka error code (UnknownServerError for unknown codes)."""
    return _BY_CODE.get(int(code), _BY_CODE[int(ErrorCode.unknown_server_error)])


def error_for(code: int | ErrorCode, message: str | None = None) -> KafkaError:
    """An exception instance for a non-zero error code from a response."""
    return error_class(code)(message)


# Aliases for names other clients use; the generated names are the canonical ones.
NetworkError: type[_CodedError] = _BY_CODE[int(ErrorCode.network_exception)]
RequestTimedOutError: type[_CodedError] = _BY_CODE[int(ErrorCode.request_timed_out)]
MessageTooLargeError: type[_CodedError] = _BY_CODE[int(ErrorCode.message_too_large)]
UnknownServerError: type[_CodedError] = _BY_CODE[int(ErrorCode.unknown_server_error)]
# Kafka raises RecordTooLargeException, with MESSAGE_TOO_LARGE's code, for oversized records.
RecordTooLargeError = MessageTooLargeError


class DisconnectedError(NetworkError):  # type: ignore[misc,valid-type]
    """The connection to a broker was lost (or timed out) before the response arrived."""

    def __init__(self, message: str | None = None, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class ProtocolError(DisconnectedError):
    """The broker sent bytes that break the protocol (e.g. an unexpected correlation id);
    the connection is closed."""


class KafkaTimeoutError(_CodedError, TimeoutError):
    """An operation did not finish within its configured time (max.block.ms,
    delivery.timeout.ms, default.api.timeout.ms, ...)."""

    code_value = ErrorCode.request_timed_out
    retriable = True


class BufferExhaustedError(KafkaTimeoutError):
    """The producer could not get buffer memory within max.block.ms."""


class NoBrokersAvailableError(_CodedError):
    """No broker address is known, so no request can be sent anywhere."""

    code_value = ErrorCode.broker_not_available


class IllegalStateError(_CodedError):
    """The client is used in a way its state does not allow."""


class ClientClosedError(IllegalStateError):
    """The client was closed; no further operations are possible."""


class SerializationError(_CodedError):
    """A key or value could not be serialized."""


class CommitFailedError(_CodedError):
    """An offset commit failed for good: the group rebalanced and the partitions may now
    belong to another member (Kafka's CommitFailedException). Poll again to rejoin."""

    code_value = ErrorCode.illegal_generation


class NoOffsetForPartitionError(_CodedError):
    """A partition has no committed offset and auto.offset.reset is none."""

    code_value = ErrorCode.offset_out_of_range


class WakeupError(_CodedError):
    """A blocking consumer call was interrupted by `wakeup()` from another thread."""


class ConcurrentModificationError(IllegalStateError):
    """The consumer was used from a second thread while another was inside it."""


class TransactionAbortedError(_CodedError):
    """A record was still waiting to be sent when its transaction was aborted (Kafka's
    TransactionAbortedException): it was never written."""
