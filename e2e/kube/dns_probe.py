"""Ask a DNS server for the A records of a name over UDP: `dns_probe.py SERVER NAME`.

Prints one address a line; exits 1 when there is no answer. The host cannot resolve cluster
names through its own resolver, so the test bed asks CoreDNS directly.
"""

from __future__ import annotations

import random
import socket
import struct
import sys

TYPE_A = 1
CLASS_IN = 1


def build_query(name: str, query_id: int) -> bytes:
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)  # recursion desired
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.rstrip(".").split("."))
    return header + labels + b"\0" + struct.pack("!HH", TYPE_A, CLASS_IN)


def skip_name(packet: bytes, offset: int) -> int:
    while True:
        length = packet[offset]
        if length & 0xC0 == 0xC0:  # a compression pointer ends the name
            return offset + 2
        if length == 0:
            return offset + 1
        offset += 1 + length


def parse_addresses(packet: bytes, query_id: int) -> list[str]:
    answer_id, _flags, questions, answers = struct.unpack("!HHHH", packet[:8])
    if answer_id != query_id:
        return []
    offset = 12
    for _ in range(questions):
        offset = skip_name(packet, offset) + 4
    addresses = []
    for _ in range(answers):
        offset = skip_name(packet, offset)
        rtype, rclass, _ttl, length = struct.unpack("!HHIH", packet[offset:offset + 10])
        offset += 10
        if rtype == TYPE_A and rclass == CLASS_IN and length == 4:
            addresses.append(socket.inet_ntoa(packet[offset:offset + 4]))
        offset += length
    return addresses


def resolve(server: str, name: str, timeout: float = 2.0) -> list[str]:
    query_id = random.randrange(1 << 16)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(build_query(name, query_id), (server, 53))
        packet, _ = sock.recvfrom(4096)
    return parse_addresses(packet, query_id)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: dns_probe.py SERVER NAME", file=sys.stderr)
        return 2
    try:
        addresses = resolve(argv[0], argv[1])
    except OSError as exc:
        print(f"dns_probe: {argv[0]}: {exc}", file=sys.stderr)
        return 1
    for address in addresses:
        print(address)
    return 0 if addresses else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
