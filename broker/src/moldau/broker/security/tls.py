"""TLS contexts of listeners, rebuilt when their keystore or truststore changes on disk.

A certificate rotated by replacing the files is served to the next connection, without a
restart: each new connection asks for the context, which looks at the files' modification
times at most once per `CHECK_INTERVAL_S` and rebuilds when they changed. A rebuild that
fails (a half-written file) keeps the previous context and logs why.
"""

from __future__ import annotations

import logging
import ssl
import time

from moldau.config import ConfigError
from moldau.security.keystores import Setting, SettingName, file_stamp, store_files
from moldau.security.tls import build_context

log = logging.getLogger("moldau.broker.security")

CHECK_INTERVAL_S = 1.0


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
