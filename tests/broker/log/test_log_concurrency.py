"""Appends, reads, flushes and retention from several threads at once."""

from __future__ import annotations

import random
import threading

from log_helpers import append, config, headers_of, make_batch, open_log

from moldau.records.batch import compute_crc


def test_parallel_appends_reads_and_retention(tmp_path):
    plog = open_log(tmp_path / "orders-0", config(segment_bytes=2000, retention_bytes=20_000,
                                                    flush_messages=50))
    errors: list[BaseException] = []
    done = threading.Event()

    def producer(n: int) -> None:
        try:
            for i in range(150):
                append(plog, make_batch(1 + i % 3, value=b"w" * (n * 10 + 5)))
                plog.high_watermark = plog.log_end_offset
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def consumer() -> None:
        rng = random.Random(3)
        try:
            while not done.is_set():
                start, end = plog.log_start_offset, plog.high_watermark
                if end <= start:
                    continue
                offset = rng.randrange(start, end)
                try:
                    result = plog.read(offset, 5000, max_offset=plog.high_watermark,
                                       min_one_batch=True)
                except Exception as e:  # retention may have moved the start meanwhile
                    if offset >= plog.log_start_offset:
                        raise AssertionError(f"read at {offset} failed: {e!r}") from e
                    continue
                data = result.read_bytes()
                pos = 0
                for h in headers_of(data):
                    if pos + h.size > len(data):
                        break
                    assert compute_crc(data, pos, h.size) == h.crc
                    pos += h.size
                if data:
                    assert headers_of(data)[0].last_offset >= offset
        except BaseException as e:
            errors.append(e)

    def cleaner() -> None:
        try:
            while not done.is_set():
                plog.apply_retention(0)
                plog.flush()
        except BaseException as e:
            errors.append(e)

    producers = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    others = [threading.Thread(target=consumer), threading.Thread(target=consumer),
              threading.Thread(target=cleaner)]
    for t in producers + others:
        t.start()
    for t in producers:
        t.join()
    done.set()
    for t in others:
        t.join()
    assert not errors, errors
    # Offsets are contiguous from the log start to the end, in every remaining segment.
    expected = plog.segment_base_offsets[0]
    for base in plog.segment_base_offsets:
        data = plog.read_batches(base, 1 << 20)
        for h in headers_of(data):
            assert h.base_offset == expected
            expected = h.next_offset
    assert expected == plog.log_end_offset == 4 * (50 * 1 + 50 * 2 + 50 * 3)
    plog.close()
