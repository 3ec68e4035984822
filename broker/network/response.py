"""Responses as a list of byte chunks and file regions, sent with zero-copy sendfile."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A region of a segment file, sent straight from the page cache."""

    file: BinaryIO
    position: int
    size: int


Chunk = bytes | FileSlice


@dataclass(slots=True)
class Response:
    """A framed response. `parts` already include the 4-byte size prefix."""

    parts: Sequence[Chunk]

    @classmethod
    def of(cls, frame: bytes) -> Response:
        return cls((frame,))

    @classmethod
    def framed(cls, parts: Sequence[Chunk]) -> Response:
        """Prefix unframed `parts` with their total size."""
        size = sum(len(part) if isinstance(part, bytes) else part.size for part in parts)
        return cls((struct.pack(">i", size), *parts))


async def send_response(loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter,
                        response: Response) -> None:
    pending: list[bytes] = []
    for part in response.parts:
        if isinstance(part, bytes):
            pending.append(part)
            continue
        if pending:
            writer.write(b"".join(pending))
            pending.clear()
        if part.size:
            # Uses os.sendfile when the transport allows it; falls back to read+write.
            await loop.sendfile(writer.transport, part.file, part.position, part.size)
    if pending:
        writer.write(b"".join(pending) if len(pending) > 1 else pending[0])
    await writer.drain()
