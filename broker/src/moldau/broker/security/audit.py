"""Authentication outcomes: failures logged with the peer, both counted per listener
(Kafka's failed-authentication-total and successful-authentication-total)."""

from __future__ import annotations

import logging
from collections import Counter

log = logging.getLogger("moldau.broker.security")


class AuthenticationLog:
    def __init__(self) -> None:
        self.failed: Counter[str] = Counter()
        self.succeeded: Counter[str] = Counter()

    def failure(self, listener: str, peer: str, reason: str) -> None:
        log.warning("Failed authentication with /%s on listener %s (%s)", peer, listener,
                    reason)
        self.failed[listener] += 1

    def success(self, listener: str) -> None:
        self.succeeded[listener] += 1
