"""Every request frame that once broke the fuzz contract (fuzz/regressions/frames), sent to a
real broker over a socket: each gets an answer or a closed connection within seconds, the
broker keeps serving, and it logs no traceback (checked when the broker stops)."""

from __future__ import annotations

import struct
import time

import pytest

from e2e import wire
from e2e.wire import Closed, Conn
from fuzz.corpus import regressions_dir, stored_inputs

pytestmark = pytest.mark.timeout(120)

ANSWER_TIMEOUT = 5.0
PROBE_ID = 0x7E000000

REGRESSIONS = list(stored_inputs(regressions_dir("frames")))


@pytest.mark.parametrize(("path", "frame"), [pytest.param(path, data, id=path.name[:12])
                                              for path, data in REGRESSIONS])
def test_regression_frame_is_answered_or_closes_the_connection(module_broker, path, frame):
    started = time.monotonic()
    with Conn(module_broker.bootstrap, timeout=ANSWER_TIMEOUT) as conn:
        conn.send(wire.frame(frame) + wire.api_versions_request(0, PROBE_ID))
        try:
            while struct.unpack(">i", conn.recv_frame()[:4])[0] != PROBE_ID:
                pass
            outcome = "answered"
        except (Closed, ConnectionResetError):
            outcome = "closed"
    elapsed = time.monotonic() - started
    assert elapsed < ANSWER_TIMEOUT, f"{path.name}: {outcome} only after {elapsed:.1f} s"
    assert module_broker.alive, module_broker.tail()
    # The broker still answers a fresh connection.
    with Conn(module_broker.bootstrap, timeout=ANSWER_TIMEOUT) as conn:
        conn.send(wire.api_versions_request(0, PROBE_ID + 1))
        assert struct.unpack(">i", conn.recv_frame()[:4])[0] == PROBE_ID + 1
