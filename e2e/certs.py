"""Certificates made for a test: a CA, a server certificate for 127.0.0.1/localhost, client
certificates, expired ones; written as PEM and PKCS12 keystores as Kafka configures them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-store-secret"
_DAY = datetime.timedelta(days=1)


def _name(common_name: str, unit: str = "Moldau") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "CZ"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Test"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    def encrypted_key_pem(self, password: str) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


class CertAuthority:
    """A certificate authority that issues server and client certificates."""

    def __init__(self, name: str = "Moldau Test CA") -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        self.issued = Issued(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self.issued.cert_pem

    def issue(self, common_name: str, *, server: bool = False, unit: str = "Moldau",
              expired: bool = False, client: bool = False) -> Issued:
        """A certificate for a server, or a client, or (server and client) a node that is
        both, as the nodes of a quorum with client authentication are."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 10 * _DAY)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, unit))
                   .issuer_name(self.issued.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        if client or not server:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return Issued(key, builder.sign(self.issued.key, hashes.SHA256()))

    def write_pem_keystore(self, issued: Issued, path: Path) -> Path:
        """Kafka's PEM keystore file: the private key, then the certificate chain."""
        path.write_bytes(issued.key_pem + issued.cert_pem + self.cert_pem)
        return path

    def write_pkcs12(self, issued: Issued, path: Path, password: str = PASSWORD) -> Path:
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"moldau", issued.key, issued.cert, [self.issued.cert],
            serialization.BestAvailableEncryption(password.encode())))
        return path

    def write_ca(self, path: Path) -> Path:
        path.write_bytes(self.cert_pem)
        return path

    def write_client_files(self, issued: Issued, directory: Path, name: str) -> dict[str, str]:
        """Separate PEM files for clients that want them (librdkafka, aiokafka)."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_bytes(issued.cert_pem)
        key.write_bytes(issued.key_pem)
        return {"cert": str(cert), "key": str(key)}
