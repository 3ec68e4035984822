"""TLS contexts of listeners, rebuilt when their keystore or truststore changes on disk.

A certificate rotated by replacing the files is served to the next connection, without a
restart: each new connection asks for the context, which looks at the files' modification
times at most once per `CHECK_INTERVAL_S` and rebuilds when they changed. A rebuild that
fails (a half-written file) keeps the previous context and logs why.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import time

from moldau.broker.security.keystores import (
    Setting,
    SettingName,
    file_stamp,
    load_keystore,
    load_truststore,
    store_files,
)
from moldau.config import ConfigError

log = logging.getLogger("moldau.broker.security")

CHECK_INTERVAL_S = 1.0
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


class ListenerTls:
    """The current server context of one listener."""

    def __init__(self, listener: str, setting: Setting, name: SettingName) -> None:
        self.listener = listener
        self._setting = setting
        self._name = name
        self._files = store_files(setting)
        self._stamp = file_stamp(self._files)
        self._context = build_context(setting, name, server=True)
        self._checked = time.monotonic()

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if self._files and now - self._checked >= CHECK_INTERVAL_S:
            self._checked = now
            stamp = file_stamp(self._files)
            if stamp != self._stamp:
                self._reload(stamp)
        return self._context

    def _reload(self, stamp: tuple[tuple[int, int], ...]) -> None:
        try:
            self._context = build_context(self._setting, self._name, server=True)
        except (ConfigError, ssl.SSLError, OSError) as exc:
            log.warning("Keeping the previous TLS keystore of listener %s: %s",
                        self.listener, exc)
            return
        self._stamp = stamp
        log.info("Listener %s reloaded its TLS keystore after it changed on disk",
                 self.listener)
