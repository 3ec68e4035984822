"""The batcher that gathers the work of many Topic resources: what is submitted together
runs as one batch, one batch at a time; a resubmitted item replaces the waiting one; a
failing batch fails its callers and not the next batch."""

from __future__ import annotations

import asyncio

import pytest

from moldau.operator.topics.batcher import Batcher, BatchError


class Recorder:
    def __init__(self, fail: bool = False, pause: float = 0.0) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.running = 0
        self.most_at_once = 0
        self.fail = fail
        self.pause = pause

    async def run(self, items: list[tuple[str, int]]) -> dict[str, int]:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.batches.append(items)
            await asyncio.sleep(self.pause)
            if self.fail:
                raise RuntimeError("the cluster said no")
            return {key: value * 10 for key, value in items}
        finally:
            self.running -= 1


def batcher(recorder: Recorder, **settings: float) -> Batcher[str, tuple[str, int], int]:
    return Batcher(recorder.run, lambda item: item[0], **settings)  # type: ignore[arg-type]


def test_a_thousand_submissions_run_as_few_batches_one_at_a_time() -> None:
    async def main() -> None:
        recorder = Recorder(pause=0.05)
        gather = batcher(recorder, linger=0.05, max_items=400)
        results = await asyncio.gather(*(gather.submit((f"k{i}", i)) for i in range(1000)))
        assert results == [i * 10 for i in range(1000)]
        assert [len(b) for b in recorder.batches] == [400, 400, 200]
        assert recorder.most_at_once == 1
        await gather.close()
    asyncio.run(main())


def test_a_resubmitted_item_replaces_the_waiting_one_for_both_callers() -> None:
    async def main() -> None:
        recorder = Recorder()
        gather = batcher(recorder, linger=0.1)
        first = asyncio.create_task(gather.submit(("a", 1)))
        await asyncio.sleep(0)
        second = asyncio.create_task(gather.submit(("a", 2)))
        assert await first == await second == 20
        assert recorder.batches == [[("a", 2)]]
        await gather.close()
    asyncio.run(main())


def test_a_failing_batch_fails_its_callers_and_the_next_batch_runs() -> None:
    async def main() -> None:
        recorder = Recorder(fail=True)
        gather = batcher(recorder, linger=0.01)
        with pytest.raises(RuntimeError, match="the cluster said no"):
            await gather.submit(("a", 1))
        recorder.fail = False
        assert await gather.submit(("b", 2)) == 20
        await gather.close()
    asyncio.run(main())


def test_a_caller_giving_up_does_not_cancel_the_others() -> None:
    async def main() -> None:
        recorder = Recorder(pause=0.1)
        gather = batcher(recorder, linger=0.01)
        impatient = asyncio.create_task(gather.submit(("a", 1)))
        patient = asyncio.create_task(gather.submit(("a", 1)))
        await asyncio.sleep(0.05)
        impatient.cancel()
        assert await patient == 10
        await gather.close()
    asyncio.run(main())


def test_closing_fails_the_callers_still_waiting() -> None:
    async def main() -> None:
        recorder = Recorder(pause=5)
        gather = batcher(recorder, linger=0.01)
        running = asyncio.create_task(gather.submit(("a", 1)))
        await asyncio.sleep(0.1)
        waiting = asyncio.create_task(gather.submit(("b", 1)))
        await asyncio.sleep(0.05)
        await gather.close()
        for task in (running, waiting):
            with pytest.raises(BatchError):
                await task
    asyncio.run(main())
