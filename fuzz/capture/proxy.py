"""A recording TCP proxy: relays each client connection to the broker and keeps every frame
that passes, in each direction, in the order it passed.

Kafka frames are a 4-byte big-endian size and that many bytes; the proxy splits both
streams on those sizes without interpreting anything else, so clients and broker see the
bytes unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_CHUNK = 65536

TO_BROKER = "request"
TO_CLIENT = "response"


@dataclass(frozen=True, slots=True)
class Frame:
    connection: int  # which client connection, numbered in accept order
    direction: str  # TO_BROKER or TO_CLIENT
    data: bytes  # the frame without its size prefix


class RecordingProxy:
    """Listens on a free loopback port; each accepted connection is relayed to `upstream`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frames: list[Frame] = []
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._stopped = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> RecordingProxy:
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        self._server.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._acceptor.join(5)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            broker.settimeout(None)
            connection = next(self._ids)
            with self._lock:
                self._sockets += [client, broker]
            for source, sink, direction in ((client, broker, TO_BROKER),
                                            (broker, client, TO_CLIENT)):
                threading.Thread(target=self._pump, args=(connection, source, sink, direction),
                                 daemon=True).start()

    def _pump(self, connection: int, source: socket.socket, sink: socket.socket,
              direction: str) -> None:
        pending = bytearray()
        try:
            while True:
                chunk = source.recv(_CHUNK)
                if not chunk:
                    break
                sink.sendall(chunk)
                pending += chunk
                self._take_frames(connection, direction, pending)
        except OSError:
            pass
        finally:
            for sock in (sink, source):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _take_frames(self, connection: int, direction: str, pending: bytearray) -> None:
        while len(pending) >= _SIZE.size:
            (size,) = _SIZE.unpack_from(pending)
            if size < 0 or len(pending) < _SIZE.size + size:
                return
            data = bytes(pending[_SIZE.size:_SIZE.size + size])
            del pending[:_SIZE.size + size]
            with self._lock:
                self.frames.append(Frame(connection, direction, data))
