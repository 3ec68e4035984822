"""Who a forwarded request came from, as an Envelope (KIP-590) carries it to the controller.

A broker forwards a client's admin request wrapped in an Envelope with the client's principal
(Kafka's DefaultPrincipalData: a version, then type, name and whether a delegation token
authenticated it) and its address (the raw IPv4 or IPv6 bytes), so that the active controller
authorizes the client, not the forwarding broker.
"""

from __future__ import annotations

import ipaddress
import struct

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.serial import entity_reader

from moldau.broker.security.principal import host_address
from moldau.protocol.messages import encode_entity

_VERSION = struct.Struct(">h")
_read_principal = entity_reader(DefaultPrincipalData)


def principal_bytes(principal: str) -> bytes:
    kind, _, name = principal.partition(":")
    data = DefaultPrincipalData(type_=kind, name=name, token_authenticated=False)
    return _VERSION.pack(0) + encode_entity(data)


def principal_of(data: bytes) -> str:
    """`Type:name` from DefaultPrincipalData bytes; ValueError when they are not that."""
    if len(data) < _VERSION.size or _VERSION.unpack_from(data)[0] != 0:
        raise ValueError("unknown principal data version")
    try:
        decoded, _ = _read_principal(data, _VERSION.size)
    except Exception as exc:  # the native reader raises several types
        raise ValueError(f"undecodable principal data: {exc}") from None
    return f"{decoded.type_}:{decoded.name}"


def address_bytes(host: str) -> bytes:
    """A client's address as Java's InetAddress.getAddress() gives it (empty if unknown)."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def host_of(data: bytes) -> str:
    if len(data) not in (4, 16):
        raise ValueError(f"an address of {len(data)} bytes")
    return host_address(str(ipaddress.ip_address(data)))
