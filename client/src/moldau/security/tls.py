"""TLS contexts from Kafka's ssl.* settings, for a listener or for a client towards one.

Python's ssl reads key material only from files, so a keystore given inline or as PKCS12 is
written to a private temporary file for the moment it is loaded.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from moldau.config import ConfigError
from moldau.security.keystores import Setting, SettingName, load_keystore, load_truststore

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


def build_context(setting: Setting, name: SettingName, *, server: bool) -> ssl.SSLContext:
    """An SSLContext from Kafka's ssl.* settings (a server's, or a client's towards one)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    versions = sorted(_VERSIONS[v] for v in setting("ssl.enabled.protocols"))
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = setting("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise ConfigError(f"Invalid value {','.join(ciphers)} for configuration "
                              f"{name('ssl.cipher.suites')}: no cipher suite known") from None
    trusted = load_truststore(setting, name)
    if server:
        context.verify_mode = _CLIENT_AUTH[setting("ssl.client.auth")]
    else:
        context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
        if not context.check_hostname:
            context.verify_mode = ssl.CERT_REQUIRED
    if trusted is not None:
        context.load_verify_locations(cadata=trusted.decode("ascii"))
    elif not server:
        context.load_default_certs()
    if server or setting("ssl.keystore.location") or setting("ssl.keystore.certificate.chain"):
        _load_key_material(context, setting, name)
    return context


def _load_key_material(context: ssl.SSLContext, setting: Setting,
                       name: SettingName) -> None:
    material = load_keystore(setting, name)
    # ssl reads key material only from files: a private one, removed at once.
    with tempfile.TemporaryDirectory(prefix="moldau-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(material.key_pem + material.chain_pem)
        try:
            context.load_cert_chain(path)
        except ssl.SSLError as exc:
            raise ConfigError(f"Invalid value for configuration "
                              f"{name('ssl.keystore.location')}: the private key does not "
                              f"match the certificate ({exc.reason})") from None
