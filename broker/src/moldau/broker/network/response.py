"""Responses as a list of byte chunks and file regions, sent with zero-copy sendfile."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol


class FileRegion(Protocol):
    """A region of a file to send straight from the page cache (the log's FileSlice)."""

    @property
    def file(self) -> BinaryIO: ...
    @property
    def position(self) -> int: ...
    @property
    def size(self) -> int: ...
    def read(self) -> bytes: ...


Chunk = bytes | FileRegion


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
            await _send_region(loop, writer, part)
    if pending:
        writer.write(b"".join(pending) if len(pending) > 1 else pending[0])
    await writer.drain()


async def _send_region(loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter,
                       region: FileRegion) -> None:
    # No asyncio fallback: it seeks the shared segment file object, which races with other
    # connections. Without native sendfile (e.g. TLS), copy the region with pread instead.
    if writer.transport.is_closing():
        raise ConnectionResetError("the client closed the connection")
    if writer.get_extra_info("sslcontext") is not None:
        # TLS encrypts in user space: the region goes through the transport in one read.
        writer.write(region.read())
        return
    try:
        await loop.sendfile(writer.transport, region.file, region.position, region.size,
                            fallback=False)
    except asyncio.SendfileNotAvailableError:
        writer.write(region.read())
    except RuntimeError as exc:
        if writer.transport.is_closing():  # closed by the client during the send
            raise ConnectionResetError(str(exc)) from None
        raise
