"""A driver shows a new epoch at once but acts in it only once its quorum-state write is done:
a node killed during the write restarts in the epoch before, having done nothing in the new
one (the chaos checker's epoch-went-back rule relies on this)."""

import asyncio
import threading

import pytest

from moldau.broker.raft.driver import RaftDriver
from moldau.broker.raft.messages import VoteRequest
from moldau.broker.raft.quorum_store import QuorumStateStore
from moldau.broker.raft.state import RaftConfig, Role

pytestmark = pytest.mark.timeout(30)


class Recorder:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


class NoStateMachine:
    def apply(self, offset, payload):
        pass

    def snapshot(self):
        return b""

    def load(self, data):
        pass


async def wait_until(predicate, what, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_candidacy_sends_no_vote_request_before_its_vote_is_written(tmp_path):
    async def main():
        transport = Recorder()
        driver = RaftDriver(3, (1, 2, 3), str(tmp_path), NoStateMachine(), transport,
                            config=RaftConfig(election_timeout_ms=50))
        released = threading.Event()
        save = driver.store.save

        def slow_save(state):
            released.wait(20)  # a slow fsync on a busy disk
            save(state)

        driver.store.save = slow_save
        await driver.start()
        try:
            await wait_until(lambda: driver.epoch == 1, "the candidacy")
            assert driver.role is Role.CANDIDATE  # shown at once ...
            await asyncio.sleep(0.3)
            # ... but neither on disk nor acted on: a kill now leaves nothing of epoch 1.
            assert QuorumStateStore(driver.store.path).load() is None
            assert transport.sent == []
            released.set()
            await wait_until(lambda: transport.sent, "the vote requests")
            persisted = QuorumStateStore(driver.store.path).load()
            assert (persisted.epoch, persisted.voted_for) == (1, 3)
            assert {(m.dst, m.candidate_epoch) for m in transport.sent
                    if isinstance(m, VoteRequest)} == {(1, 1), (2, 1)}
        finally:
            released.set()
            await driver.close()

    asyncio.run(main())
