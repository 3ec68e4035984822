"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them.

Kafka stores, per user and mechanism, a salt, an iteration count and the derived StoredKey and
ServerKey, never the password. Admin clients send the salted password
(AlterUserScramCredentials); the broker derives the keys from it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

# Kafka's ScramMechanism: name -> (hash, wire type, fewest iterations allowed).
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_TYPE = {wire: name for name, (_, wire) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """A malformed or failed SCRAM exchange."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash(mechanism: str) -> str:
    return MECHANISMS[mechanism][0]


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, _hash(mechanism)).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes,
                           iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_hash(mechanism), client_key).digest()
    return ScramCredential(salt, stored_key, _hmac(mechanism, salted, b"Server Key"),
                           iterations)


def new_salt() -> bytes:
    return secrets.token_bytes(32)


def new_credential(mechanism: str, password: str,
                   iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = new_salt()
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt,
                                                             iterations), salt, iterations)


def nonce() -> str:
    return base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=")


def saslname_decode(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError(f"Invalid username: {name}")
    return name.replace("=2C", ",").replace("=3D", "=")


def saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def attributes(message: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise ScramError(f"Invalid SCRAM message: {message!r}")
        values[key] = value
    return values


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def client_proof(mechanism: str, salted: bytes, auth_message: bytes) -> bytes:
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_hash(mechanism), client_key).digest()
    return _xor(client_key, _hmac(mechanism, stored_key, auth_message))


def verify_client_proof(mechanism: str, credential: ScramCredential, auth_message: bytes,
                        proof: bytes) -> bool:
    signature = _hmac(mechanism, credential.stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    client_key = _xor(proof, signature)
    computed = hashlib.new(_hash(mechanism), client_key).digest()
    return hmac.compare_digest(computed, credential.stored_key)


def server_signature(mechanism: str, server_key: bytes, auth_message: bytes) -> bytes:
    return _hmac(mechanism, server_key, auth_message)


class ScramClient:
    """The client's side of one exchange: first message, final message, server check."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.password = password
        self.client_nonce = nonce()
        self.first_bare = f"n={saslname_encode(username)},r={self.client_nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = attributes(text)
        if "e" in fields:
            raise ScramError(fields["e"])
        server_nonce, salt = fields.get("r", ""), base64.b64decode(fields.get("s", ""))
        iterations = int(fields.get("i", "0"))
        if not server_nonce.startswith(self.client_nonce) or iterations < 1:
            raise ScramError("Invalid server first message")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c=biws,r={server_nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        proof = client_proof(self.mechanism, salted, auth_message)
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = server_signature(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        fields = attributes(server_final.decode())
        if "e" in fields:
            raise ScramError(fields["e"])
        if base64.b64decode(fields.get("v", "")) != self._server_signature:
            raise ScramError("Invalid server signature in the final SCRAM message")
