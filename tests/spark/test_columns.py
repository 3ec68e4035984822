"""Record batches decoded into columns in bulk, checked against the record decoder the
client uses (decode_records), over varied records, codecs and timestamp types."""

from __future__ import annotations

import random

import pytest
from pyspark_moldau.columns import InvalidRecordsError, decode_batches

from moldau.client import FetchedBatch
from moldau.records.batch import HEADER_SIZE, parse_header
from moldau.records.codec import build_batch, decode_records, records_section


def varied(count: int, seed: int) -> list[tuple]:
    """(key, value, headers, timestamp): null, empty, short (inline) and long keys and
    values, up to sizes whose lengths take three varint bytes; headers on some."""
    rng = random.Random(seed)
    sizes = [0, 1, 11, 12, 13, 100, 300, 70000]
    out = []
    for i in range(count):
        key = None if i % 5 == 0 else rng.randbytes(rng.choice(sizes[:6]))
        value = None if i % 7 == 3 else rng.randbytes(rng.choice(sizes))
        headers = [("h", rng.randbytes(3)), ("empty", None)] if i % 4 == 1 else []
        # Out of order and far apart: deltas of one to several varint bytes.
        out.append((key, value, headers, 1_700_000_000_000 + rng.randint(-10**7, 10**7)))
    return out


def fetched(batch: bytes, base_offset: int, first_offset: int) -> FetchedBatch:
    header = parse_header(batch)._replace(base_offset=base_offset)
    if header.compression:
        section = records_section(batch, header)
        return FetchedBatch("t", 0, header, section, 0, len(section), first_offset)
    # Uncompressed: the section inside the fetched bytes, as the consumer hands it over.
    return FetchedBatch("t", 0, header, batch, HEADER_SIZE, len(batch), first_offset)


@pytest.mark.parametrize("compression", [0, 1, 4])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_columns_match_the_record_decoder(compression, log_append_time) -> None:
    inputs = [varied(40, 1), varied(1, 2), varied(25, 3)]
    raw = [build_batch(records, compression=compression,
                       timestamp_type_log_append=log_append_time) for records in inputs]
    bases = [100, 140, 141]
    # The first batch is read from offset 110 on (poll() returned the ten before).
    batches = [fetched(b, base, max(base, 110)) for b, base in zip(raw, bases, strict=True)]
    columns = decode_batches(batches, with_headers=True)
    want = []
    for batch, base in zip(raw, bases, strict=True):
        header = parse_header(batch)
        for record in decode_records(batch):
            offset = base + record.offset_delta
            if offset >= 110:
                ts = header.max_timestamp if log_append_time else \
                    header.base_timestamp + record.timestamp_delta
                want.append((offset, ts, record.key, record.value, record.headers))
    got = list(zip(columns.offsets.tolist(), columns.timestamps.tolist(),
                   columns.keys.to_pylist(), columns.values.to_pylist(), columns.headers,
                   strict=True))
    assert got == want
    assert columns.log_append_time.tolist() == [log_append_time] * len(want)


def test_batches_in_one_buffer_are_decoded_together() -> None:
    first, second = build_batch(varied(30, 4)), build_batch(varied(20, 5))
    data = first + second  # as in one fetch response
    batches = [FetchedBatch("t", 0, parse_header(data, 0), data, HEADER_SIZE, len(first), 0),
               FetchedBatch("t", 0, parse_header(data, len(first))._replace(base_offset=30),
                            data, len(first) + HEADER_SIZE, len(data), 30)]
    columns = decode_batches(batches, with_headers=False)
    assert columns.offsets.tolist() == list(range(50))
    assert columns.values.to_pylist() == [r[1] for r in varied(30, 4) + varied(20, 5)]
    assert columns.headers is None


def test_records_that_do_not_tile_the_section_are_refused() -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 20, [], 1)] * 3))
    header = parse_header(batch)
    with pytest.raises(InvalidRecordsError, match="records end at byte"):
        decode_batches([FetchedBatch("t", 0, header._replace(record_count=2), bytes(batch),
                                     HEADER_SIZE, len(batch), 0)], with_headers=False)
    batch[HEADER_SIZE] = 0x05  # the first record's length: -3
    with pytest.raises(InvalidRecordsError):
        decode_batches([FetchedBatch("t", 0, header, bytes(batch), HEADER_SIZE, len(batch), 0)],
                       with_headers=False)
