"""Keystores and truststores as Kafka configures them, read into PEM for Python's ssl.

`ssl.keystore.type` PEM: a file holding the private key and the certificate chain, or the
same given inline (KIP-651, `ssl.keystore.key` and `ssl.keystore.certificate.chain`).
PKCS12: a file opened with `ssl.keystore.password`. Truststores likewise, with the PEM
certificates inline in `ssl.truststore.certificates`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from moldau.config import ConfigError

# A listener's value of a setting and the name it came from (for errors).
Setting = Callable[[str], Any]
SettingName = Callable[[str], str]


@dataclass(frozen=True)
class KeyMaterial:
    chain_pem: bytes
    key_pem: bytes  # unencrypted PKCS8


def _password(value: Any) -> bytes | None:
    return str(value).encode() if value else None


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ConfigError(f"Invalid value {path} for configuration {key}: "
                          f"{exc.strerror or exc}") from None


def _pem_certificates(data: bytes, key: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(f"Invalid value for configuration {key}: no PEM certificate "
                          "found") from None
    return certificates


def _certificates_pem(certificates: list[x509.Certificate]) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certificates)


def _key_pem(private_key: Any) -> bytes:
    return private_key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())


def _store_type(setting: Setting, name: SettingName, store: str) -> str:
    key = f"ssl.{store}.type"
    kind = str(setting(key) or "PEM").upper()
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"Invalid value {kind} for configuration {name(key)}: Moldau reads "
                          "PKCS12 and PEM stores")
    return kind


def _open_pkcs12(setting: Setting, name: SettingName, store: str) -> tuple[Any, Any, list]:
    """(private key, certificate, other certificates) of a PKCS12 key- or truststore."""
    location = setting(f"ssl.{store}.location")
    data = _read(location, name(f"ssl.{store}.location"))
    try:
        key, certificate, extra = pkcs12.load_key_and_certificates(
            data, _password(setting(f"ssl.{store}.password")))
    except ValueError:
        raise ConfigError(f"Invalid value for configuration {name(f'ssl.{store}.password')}: "
                          f"the PKCS12 {store} {location} cannot be opened with it") from None
    return key, certificate, list(extra)


def load_keystore(setting: Setting, name: SettingName) -> KeyMaterial:
    """The certificate chain and private key a TLS endpoint presents."""
    key_password = _password(setting("ssl.key.password"))
    location = setting("ssl.keystore.location")
    if _store_type(setting, name, "keystore") == "PKCS12":
        if not location:
            raise ConfigError(f"Missing configuration {name('ssl.keystore.location')}: "
                              "a PKCS12 keystore is a file")
        private_key, certificate, extra = _open_pkcs12(setting, name, "keystore")
        if private_key is None or certificate is None:
            raise ConfigError(f"Invalid value {location} for configuration "
                              f"{name('ssl.keystore.location')}: no private key and "
                              "certificate in the keystore")
        return KeyMaterial(_certificates_pem([certificate, *extra]), _key_pem(private_key))
    if location:
        data = _read(location, name("ssl.keystore.location"))
        key_source, chain_source = data, data
        key_name = chain_name = name("ssl.keystore.location")
    else:
        key_source = str(setting("ssl.keystore.key") or "").encode()
        chain_source = str(setting("ssl.keystore.certificate.chain") or "").encode()
        key_name = name("ssl.keystore.key")
        chain_name = name("ssl.keystore.certificate.chain")
    try:
        private_key = serialization.load_pem_private_key(key_source, key_password)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Invalid value for configuration {key_name}: no readable PEM "
                          f"private key ({_reason(exc)}; ssl.key.password decrypts an "
                          "encrypted key)") from None
    chain = _pem_certificates(chain_source, chain_name)
    return KeyMaterial(_certificates_pem(chain), _key_pem(private_key))


def load_truststore(setting: Setting, name: SettingName) -> bytes | None:
    """The trusted certificates as PEM, or None when no truststore is configured."""
    location = setting("ssl.truststore.location")
    inline = setting("ssl.truststore.certificates")
    if location and _store_type(setting, name, "truststore") == "PKCS12":
        _key, certificate, extra = _open_pkcs12(setting, name, "truststore")
        return _certificates_pem([c for c in (certificate, *extra) if c is not None])
    if location:
        return _certificates_pem(_pem_certificates(
            _read(location, name("ssl.truststore.location")), name("ssl.truststore.location")))
    if inline:
        return _certificates_pem(_pem_certificates(
            str(inline).encode(), name("ssl.truststore.certificates")))
    return None


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.rstrip(".")


def store_files(setting: Setting) -> list[str]:
    """The files a TLS context was built from, watched for changes."""
    return [path for path in (setting("ssl.keystore.location"),
                              setting("ssl.truststore.location")) if path]


def file_stamp(paths: list[str]) -> tuple[tuple[int, int], ...]:
    """Modification time and size of each file (missing files count as a change too)."""
    stamps = []
    for path in paths:
        try:
            stat = os.stat(path)
            stamps.append((stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append((-1, -1))
    return tuple(stamps)
