"""Small text files kept next to the logs, in Kafka's formats, always replaced atomically.

Offset checkpoint (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`):

    0                       <- version
    2                       <- number of entries
    orders 0 1500           <- topic, partition, offset
    orders 1 1432

Leader epoch checkpoint (`leader-epoch-checkpoint` in a partition directory): the same framing
with "epoch startOffset" lines. Partition metadata (`partition.metadata`):

    version: 0
    topic_id: <topic id, url-safe base64 without padding>
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed."""


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` so a crash leaves either the old or the new content."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def _write_lines(path: str, lines: Iterable[str]) -> None:
    body = list(lines)
    text = f"{VERSION}\n{len(body)}\n" + "".join(line + "\n" for line in body)
    atomic_write(path, text.encode())


def _read_lines(path: str, parse: Callable[[list[str]], T], fields: int) -> list[T] | None:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    try:
        if len(lines) < 2 or int(lines[0]) != VERSION:
            raise CheckpointError(f"{path}: unsupported version line {lines[:1]}")
        count = int(lines[1])
        body = [line for line in lines[2:] if line.strip()]
        if count != len(body):
            raise CheckpointError(f"{path}: expected {count} entries, found {len(body)}")
        out = []
        for line in body:
            parts = line.split()
            if len(parts) != fields:
                raise CheckpointError(f"{path}: malformed line {line!r}")
            out.append(parse(parts))
        return out
    except ValueError as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: {e}") from e


def write_offsets(path: str, offsets: Mapping[tuple[str, int], int]) -> None:
    _write_lines(path, (f"{topic} {partition} {offset}"
                        for (topic, partition), offset in sorted(offsets.items())))


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """Entries of an offset checkpoint; empty when the file does not exist."""
    rows = _read_lines(path, lambda p: ((p[0], int(p[1])), int(p[2])), 3)
    return dict(rows or [])


def write_epochs(path: str, entries: Iterable[tuple[int, int]]) -> None:
    _write_lines(path, (f"{epoch} {start}" for epoch, start in entries))


def read_epochs(path: str) -> list[tuple[int, int]]:
    return _read_lines(path, lambda p: (int(p[0]), int(p[1])), 2) or []


def encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def decode_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


def write_partition_metadata(path: str, topic_id: uuid.UUID) -> None:
    atomic_write(path, f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n".encode())


def read_partition_metadata(path: str) -> uuid.UUID | None:
    """The topic id stored in `partition.metadata`, or None when the file is absent."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointError(f"{path}: malformed partition metadata")
    try:
        return decode_topic_id(fields["topic_id"])
    except ValueError as e:
        raise CheckpointError(f"{path}: bad topic id {fields['topic_id']!r}") from e


def remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
