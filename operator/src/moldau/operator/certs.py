"""X.509 for a cluster's TLS: certificate authorities and the certificates they sign (pure).

A CA is renewed with its own key and subject, so that whatever it signed before the renewal
and after verifies against either of its certificates: a renewal changes no trust and needs
no broker restarted. Keys are RSA 2048 (every client reads it), stored as unencrypted PKCS#8
PEM ("BEGIN PRIVATE KEY"), which Kafka's PEM keystores (KIP-651), librdkafka and Python's ssl
all read. Bad PEM raises ValueError with a one-line message.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "io.moldau"
KEY_SIZE = 2048
# Pods' and clients' clocks may run a little behind the operator's: a certificate is valid
# from a few minutes before it was made, so that none is refused as "not yet valid".
BACKDATE = timedelta(minutes=5)
# X.509's upper bound on a common name (ub-common-name).
MAX_COMMON_NAME = 64

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert: bytes
    key: bytes


def utc(now: datetime | None = None) -> datetime:
    """`now` (the clock when None) in UTC, to the second as certificates hold it; a naive
    datetime is taken as UTC."""
    moment = datetime.now(UTC) if now is None else now
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0)


def new_ca(common_name: str, validity_days: int, now: datetime | None = None) -> Issued:
    """A self-signed CA with a new key: O=io.moldau, CN=common_name."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    subject = _name(common_name, ORGANIZATION)
    return Issued(_ca_certificate(key, subject, validity_days, utc(now)), _key_pem(key))


def renew_ca(ca: Issued, validity_days: int, now: datetime | None = None) -> Issued:
    """The CA's next certificate: the same key and subject, a new serial number and dates."""
    cert, key = _certificate(ca.cert), _private_key(ca.key)
    if not _same_key(cert, key):
        raise ValueError("the CA key is not the key of the CA certificate")
    return Issued(_ca_certificate(key, cert.subject, validity_days, utc(now)), ca.key)


def issue(ca: Issued, common_name: str, *, validity_days: int, dns_names: Sequence[str] = (),
          ip_addresses: Sequence[str] = (), server: bool = False, client: bool = False,
          organization: str | None = ORGANIZATION, now: datetime | None = None) -> Issued:
    """A certificate with a new key, signed by `ca`, for TLS servers and/or clients, valid for
    `validity_days` but never beyond the CA certificate. With organization=None the subject is
    CN=common_name alone (a user's principal is then `User:CN=<name>`)."""
    if not (server or client):
        raise ValueError(f"a certificate for {common_name!r} must be for a server or a client")
    ca_cert, ca_key = _certificate(ca.cert), _private_key(ca.key)
    moment = utc(now)
    expires = min(moment + timedelta(days=validity_days), ca_cert.not_valid_after_utc)
    if expires <= moment:
        raise ValueError(f"the CA certificate {ca_cert.subject.rfc4514_string()} expired on "
                         f"{ca_cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC")
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name, organization))
               .issuer_name(ca_cert.subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(moment - BACKDATE)
               .not_valid_after(expires)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, key_encipherment=True, content_commitment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=False,
                   crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False)
               .add_extension(_authority_key_id(ca_cert), critical=False))
    alternative = [x509.DNSName(name) for name in dns_names] + [
        x509.IPAddress(_ip(address)) for address in ip_addresses]
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def not_after(cert_pem: bytes) -> datetime:
    return _certificate(cert_pem).not_valid_after_utc


def not_before(cert_pem: bytes) -> datetime:
    return _certificate(cert_pem).not_valid_before_utc


def due_for_renewal(cert_pem: bytes, renewal_days: int, now: datetime | None = None) -> bool:
    """Within `renewal_days` of its expiry, or expired."""
    return utc(now) >= not_after(cert_pem) - timedelta(days=renewal_days)


def names(cert_pem: bytes) -> frozenset[str]:
    """The certificate's subject alternative names: DNS names and IP addresses."""
    try:
        san = _certificate(cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    return frozenset(san.get_values_for_type(x509.DNSName)) | frozenset(
        str(address) for address in san.get_values_for_type(x509.IPAddress))


def ip_name(address: str) -> str:
    """An IP address as names() gives it back (its canonical form)."""
    return str(_ip(address))


def issued_by(cert_pem: bytes, ca_cert_pem: bytes) -> bool:
    """Whether the CA certificate's key signed the certificate (and its subject is the
    certificate's issuer)."""
    try:
        _certificate(cert_pem).verify_directly_issued_by(_certificate(ca_cert_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether the private key is the one of the certificate. Only its public half is looked
    at: the full check of an RSA key (~40 ms) is left to where it signs."""
    return _same_key(_certificate(cert_pem), _private_key(key_pem, check=False))


def private_key(pem: bytes) -> bytes:
    """The first "PRIVATE KEY" block of a PEM file (a keystore: key then chain)."""
    for block in _blocks(pem):
        if block.startswith(b"-----BEGIN PRIVATE KEY-----"):
            _private_key(block, check=False)
            return block
    raise ValueError("no PEM private key (BEGIN PRIVATE KEY) found")


def bundle(certs: Iterable[bytes]) -> bytes:
    """Certificates in one PEM file, in the order given."""
    return b"".join(cert if cert.endswith(b"\n") else cert + b"\n" for cert in certs)


def split(pem: bytes) -> list[bytes]:
    """The certificates of a PEM file, in order, each as its own PEM block (other blocks, a
    key in a keystore, are left out); ValueError when one cannot be read."""
    found = [block for block in _blocks(pem) if block.startswith(b"-----BEGIN CERTIFICATE-----")]
    for block in found:
        _certificate(block)
    return found


def without_expired(pem: bytes, now: datetime | None = None) -> bytes:
    """The bundle without its expired certificates; the very same bytes when none is."""
    moment = utc(now)
    certificates = split(pem)
    valid = [cert for cert in certificates if not_after(cert) >= moment]
    return pem if len(valid) == len(certificates) else bundle(valid)


def _blocks(pem: bytes) -> list[bytes]:
    return [match.group(0) + b"\n" for match in _PEM_BLOCK.finditer(pem)]


def _certificate(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise ValueError("not a readable PEM certificate") from None


# A CA key signs many certificates in a row (one per pod): checked once (~40 ms), not per use.
@functools.lru_cache(maxsize=8)
def _private_key(pem: bytes, check: bool = True) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None,
                                                 unsafe_skip_rsa_key_validation=not check)
    except (ValueError, TypeError):
        raise ValueError("not a readable unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"a {type(key).__name__} key, where an RSA key was expected")
    return key


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _same_key(cert: x509.Certificate, key: rsa.RSAPrivateKey) -> bool:
    return cert.public_key() == key.public_key()


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"{address!r} is not an IP address") from None


def _name(common_name: str, organization: str | None) -> x509.Name:
    if not 1 <= len(common_name) <= MAX_COMMON_NAME:
        raise ValueError(f"the common name {common_name!r} has {len(common_name)} characters; "
                         f"a certificate's holds 1 to {MAX_COMMON_NAME}")
    # Written O then CN, so that the RFC 2253 form Kafka's principals use reads
    # `CN=<name>,O=<organization>`.
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if (
        organization) else []
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _authority_key_id(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """The key id alone (no issuer and serial number), so that a certificate names every
    certificate of its CA's key as its issuer, the renewed ones too."""
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _ca_certificate(key: rsa.RSAPrivateKey, subject: x509.Name, validity_days: int,
                    now: datetime) -> bytes:
    cert = (x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + timedelta(days=validity_days))
            # pathlen 0: it signs certificates of nodes and users, never another CA.
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, key_encipherment=False, content_commitment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)
