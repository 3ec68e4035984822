"""What every workload's client threads share: a topic made to survive one lost replica,
one stop event, a lock over the history, and the client errors kept for the report."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from e2e.test_cluster_failover import create_topic


def create_replicated_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Replication factor 3, min.insync.replicas 2: an acknowledged write is on two nodes."""
    create_topic(bootstrap, topic, partitions, 3, {"min.insync.replicas": "2"})


@dataclass(kw_only=True)
class ClientThreads:
    errors: list[str] = field(default_factory=list)  # client errors, for the report
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _spawn(self, target: Callable[..., None], *args: object, name: str) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=name)
        thread.start()
        self._threads.append(thread)

    def _error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text)

    def stop(self, timeout: float) -> None:
        """Ask every thread to finish; one still running after `timeout` is reported with
        its stack."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive() and thread.ident is not None:
                frame = sys._current_frames().get(thread.ident)
                stack = "".join(traceback.format_stack(frame)) if frame else ""
                self._error(f"{thread.name} still running {timeout:g} s after stop\n{stack}")
