"""A small asyncio server speaking Kafka framing, for network-layer tests.

It answers ApiVersions itself (with the versions a test chooses) and queues every other
request; the test decides when and how to answer, so responses can be delayed, reordered,
mislabelled or never sent.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

from moldau.protocol.build import build
from moldau.protocol.messages import (
    decode_request,
    encode_response,
    is_flexible_request,
    parse_header,
    parse_header_prefix,
    response_class,
)

API_VERSIONS = 18
DEFAULT_VERSIONS = {0: (3, 12), 3: (0, 12), 18: (0, 4)}


@dataclass
class FakeRequest:
    conn: FakeConnection
    api_key: int
    version: int
    correlation_id: int
    body: Any
    size: int

    async def reply(self, data: dict[str, Any], *, correlation_id: int | None = None) -> None:
        await self.conn.send_response(self.api_key, self.version,
                                      self.correlation_id if correlation_id is None
                                      else correlation_id, data)


@dataclass
class FakeConnection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def send_response(self, api_key: int, version: int, correlation_id: int,
                            data: dict[str, Any]) -> None:
        body = build(response_class(api_key, version), data)
        self.writer.write(encode_response(correlation_id, body,
                                          header_v0=api_key == API_VERSIONS))
        await self.writer.drain()

    def close(self) -> None:
        self.writer.close()


class FakeBroker:
    def __init__(self, versions: dict[int, tuple[int, int]] | None = None, *,
                 api_versions_max: int = 4) -> None:
        self.versions = dict(DEFAULT_VERSIONS if versions is None else versions)
        self.api_versions_max = api_versions_max
        self.requests: asyncio.Queue[FakeRequest] = asyncio.Queue()
        self.api_versions_seen: list[int] = []
        self.connections: list[FakeConnection] = []
        self.reading = asyncio.Event()
        self.reading.set()
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for conn in self.connections:
            conn.close()
        assert self.server is not None
        self.server.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _api_keys(self) -> list[dict[str, int]]:
        return [{"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(self.versions.items())]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = FakeConnection(reader, writer)
        self.connections.append(conn)
        try:
            while True:
                await self.reading.wait()
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = parse_header_prefix(frame)
                if api_key == API_VERSIONS:
                    self.api_versions_seen.append(version)
                    if version > self.api_versions_max:
                        await conn.send_response(API_VERSIONS, 0, correlation_id, {
                            "error_code": 35, "api_keys": self._api_keys()})
                        continue
                    await conn.send_response(API_VERSIONS, version, correlation_id, {
                        "error_code": 0, "api_keys": self._api_keys()})
                    continue
                header = parse_header(frame, is_flexible_request(api_key, version))
                try:
                    body = decode_request(api_key, version, frame, header.size)
                except Exception:
                    body = None
                await self.requests.put(FakeRequest(conn, api_key, version, correlation_id,
                                                    body, size))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            conn.closed.set()
            writer.close()


def metadata_response(cluster_id: str, port: int) -> dict[str, Any]:
    return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None}],
            "cluster_id": cluster_id, "controller_id": 1, "topics": []}
