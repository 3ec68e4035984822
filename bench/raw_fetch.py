"""A bare Fetch reader: how fast a broker's fetch path can hand one partition to a socket.

    python -m bench.raw_fetch HOST:PORT TOPIC OFFSETS [PASSES]   (prints bytes and seconds)

Reads offsets [0, OFFSETS) of partition 0 (PASSES times over, default 1) with plain Fetch v4
requests on one socket, one in flight, each asking for up to 50 MiB. The records are not
decoded: the reader takes each response into one buffer with `recv_into`, as the loopback
test's receiver does, and reads only the batch headers to know where the next fetch starts.
What it measures is therefore the broker's side, with the same receiving loop as the
machine's loopback limit, whereas real consumers spend CPU on every record. Fetch v4 is the
oldest version Kafka 4 still serves, and it has no fetch sessions, so both brokers answer
the same request.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

FETCH, VERSION = 1, 4
MAX_BYTES = 50 * 1024 * 1024  # below Kafka's fetch.max.bytes (55 MiB), so never capped
CLIENT_ID = b"bench-raw-fetch"
# Record batch header: baseOffset int64, batchLength int32, then the fields up to
# lastOffsetDelta int32 at byte 23.
BATCH_OVERHEAD = 12
LAST_OFFSET_DELTA_AT = 23


def fetch_request(correlation_id: int, topic: bytes, offset: int) -> bytes:
    body = struct.pack(">hhih", FETCH, VERSION, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    body += struct.pack(">iiiib", -1, 500, 1, MAX_BYTES, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">ih", 1, len(topic)) + topic
    body += struct.pack(">iiqi", 1, 0, offset, MAX_BYTES)
    return struct.pack(">i", len(body)) + body


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    while view:
        count = sock.recv_into(view)
        if not count:
            raise ConnectionError("the broker closed the connection")
        view = view[count:]


def next_offset(records: memoryview, offset: int) -> int:
    """The offset after the last whole batch in `records` (`offset` when there is none)."""
    position = 0
    while position + BATCH_OVERHEAD <= len(records):
        base, length = struct.unpack_from(">qi", records, position)
        end = position + BATCH_OVERHEAD + length
        if end > len(records):
            break  # a partial batch at the end of the response
        (delta,) = struct.unpack_from(">i", records, position + LAST_OFFSET_DELTA_AT)
        offset = base + delta + 1
        position = end
    return offset


def read_partition(address: tuple[str, int], topic: str, end: int,
                   passes: int = 1) -> tuple[int, float]:
    """(bytes of records received, seconds) for reading offsets [0, end) `passes` times."""
    name = topic.encode()
    buffer = bytearray(MAX_BYTES + 1024 * 1024)
    size = bytearray(4)
    received = 0
    correlation_id = 0
    with socket.create_connection(address) as sock:
        started = time.monotonic()
        for _ in range(passes):
            offset = 0
            while offset < end:
                correlation_id += 1
                sock.sendall(fetch_request(correlation_id, name, offset))
                recv_exactly(sock, memoryview(size))
                (length,) = struct.unpack(">i", size)
                if length > len(buffer):
                    buffer = bytearray(length)
                frame = memoryview(buffer)[:length]
                recv_exactly(sock, frame)
                records, error = parse_response(frame, correlation_id)
                if error:
                    raise RuntimeError(f"Fetch at offset {offset} failed with error code {error}")
                received += len(records)
                offset, before = next_offset(records, offset), offset
                if offset == before:
                    raise RuntimeError(f"no whole batch at offset {offset} (end {end})")
        elapsed = time.monotonic() - started
    return received, elapsed


def parse_response(frame: memoryview, correlation_id: int) -> tuple[memoryview, int]:
    """(records, error code) of the one partition in a Fetch v4 response."""
    got, _throttle, _topics, name_length = struct.unpack_from(">iiih", frame, 0)
    if got != correlation_id:
        raise RuntimeError(f"correlation id {got}, expected {correlation_id}")
    position = 14 + name_length + 4  # past the topic name and the partition count
    _partition, error, _hw, _lso, aborted = struct.unpack_from(">ihqqi", frame, position)
    position += 26 + 16 * max(aborted, 0)
    (length,) = struct.unpack_from(">i", frame, position)
    position += 4
    return frame[position:position + max(length, 0)], error


def main() -> None:
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    host, port = sys.argv[1].rsplit(":", 1)
    passes = int(sys.argv[4]) if len(sys.argv) == 5 else 1
    received, elapsed = read_partition((host, int(port)), sys.argv[2], int(sys.argv[3]),
                                       passes)
    print(received, elapsed, flush=True)


if __name__ == "__main__":
    main()
