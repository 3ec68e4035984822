"""Keystores and truststores read as Kafka configures them: PEM files, KIP-651 inline PEM and
PKCS12; errors name the key."""

import ssl

import pytest

from e2e.certs import PASSWORD, CertAuthority
from moldau.config import ConfigError
from moldau.security.tls import build_context

DEFAULTS = {"ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"], "ssl.client.auth": "none",
            "ssl.cipher.suites": [], "ssl.keystore.type": "PEM",
            "ssl.truststore.type": "PEM", "ssl.endpoint.identification.algorithm": "https"}


@pytest.fixture(scope="module")
def ca():
    return CertAuthority()


def context(**settings):
    values = {**DEFAULTS, **settings}
    return build_context(values.get, lambda key: key, server=True)


def test_pem_file_inline_pem_and_pkcs12_all_load(ca, tmp_path):
    server = ca.issue("localhost", server=True)
    context(**{"ssl.keystore.location": str(ca.write_pem_keystore(server, tmp_path / "k.pem"))})
    context(**{"ssl.keystore.certificate.chain": server.cert_pem.decode(),
               "ssl.keystore.key": server.encrypted_key_pem("kp").decode(),
               "ssl.key.password": "kp", "ssl.truststore.certificates": ca.cert_pem.decode()})
    pkcs = context(**{"ssl.keystore.type": "PKCS12", "ssl.keystore.password": PASSWORD,
                      "ssl.keystore.location": str(ca.write_pkcs12(server, tmp_path / "k.p12")),
                      "ssl.client.auth": "required",
                      "ssl.truststore.location": str(ca.write_ca(tmp_path / "ca.pem"))})
    assert pkcs.verify_mode == ssl.CERT_REQUIRED
    assert pkcs.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(("settings", "named"), [
    ({"ssl.keystore.location": "/no/such/file"}, "ssl.keystore.location"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "wrong"},
     "ssl.keystore.password"),
    ({"ssl.keystore.certificate.chain": "not pem", "ssl.keystore.key": "not pem"},
     "ssl.keystore.key"),
    ({"ssl.cipher.suites": ["NO-SUCH-CIPHER"]}, "ssl.cipher.suites"),
])
def test_unreadable_stores_name_the_key(ca, tmp_path, settings, named):
    server = ca.issue("localhost", server=True)
    if settings.get("ssl.keystore.type") == "PKCS12":
        settings["ssl.keystore.location"] = str(ca.write_pkcs12(server, tmp_path / "k.p12"))
    elif "ssl.keystore.location" not in settings and "ssl.keystore.key" not in settings:
        settings["ssl.keystore.location"] = str(ca.write_pem_keystore(server, tmp_path / "k"))
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")) as error:
        context(**settings)
    assert "\n" not in str(error.value)
