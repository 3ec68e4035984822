"""Every stored fuzz input (the seed corpus and the regressions) keeps its target's contract,
and the seed corpus covers what it claims: every API version the broker advertises, produce
batches of every codec from several clients, transaction markers and SASL exchanges."""

from __future__ import annotations

from collections import Counter

import pytest

import moldau.broker.handlers.apis  # noqa: F401
from fuzz.corpus import corpus_dir, regressions_dir, stored_inputs
from fuzz.targets import NAMES, load
from fuzz.targets import batches as batches_target
from fuzz.targets import frames as frames_target
from fuzz.targets import sasl as sasl_target
from moldau.broker.handlers.api_versions import unsupported_version_response
from moldau.broker.handlers.registry import APIS, decode_frame
from moldau.broker.log.validation import validate_records
from moldau.errors import KafkaError
from moldau.records.batch import parse_header
from moldau.records.codec import iter_batches
from moldau.records.control import read_end_txn_marker


def _inputs(kind) -> list:
    return [pytest.param(target, path, data, id=f"{target}/{path.name[:12]}")
            for target in NAMES for path, data in stored_inputs(kind(target))]


@pytest.mark.parametrize(("target", "path", "data"), _inputs(regressions_dir))
def test_regression_inputs_keep_the_contract(target, path, data):
    load(target).check(data)


def test_every_target_replays_its_whole_corpus():
    for target in NAMES:
        check = load(target).check
        inputs = list(stored_inputs(corpus_dir(target)))
        assert inputs, f"no seed corpus for {target} in {corpus_dir(target)}"
        for path, data in inputs:
            try:
                check(data)
            except Exception as exc:
                raise AssertionError(f"{target} seed {path.name}: {exc!r}") from exc


def test_frame_seeds_are_requests_of_every_advertised_version():
    seen = set()
    for path, data in stored_inputs(corpus_dir("frames")):
        decoded = decode_frame(data, frames_target._CONNECTION, unsupported_version_response)
        assert isinstance(decoded, frames_target.Decoded), f"{path.name} is not a request"
        seen.add((decoded.header.api_key, decoded.header.api_version))
    advertised = {(key, version) for key, entry in APIS.items()
                  for version in range(entry.min_version, entry.max_version + 1)}
    assert advertised <= seen, f"not seeded: {sorted(advertised - seen)}"


def test_batch_seeds_hold_every_codec_and_transaction_markers():
    codecs: Counter[int] = Counter()
    markers = transactional = 0
    for path, data in stored_inputs(corpus_dir("batches")):
        records = data[1:]
        header = parse_header(records)
        if header.is_control:
            assert read_end_txn_marker(records, header) is not None, path.name
            markers += 1
            continue
        buf = bytearray(records)
        try:
            validate_records(buf, batches_target.topic_config(data[0]), deep=True,
                             now_ms=batches_target.clock_for(buf), produce_version=12)
        except KafkaError as exc:
            raise AssertionError(f"seed {path.name} is refused: {exc!r}") from None
        for _, h in iter_batches(records):
            codecs[h.compression] += 1
            transactional += h.is_transactional
    # Four clients produced with each codec; at least two of them are distinct seeds.
    assert {codec: n >= 2 for codec, n in codecs.items()} == dict.fromkeys(range(5), True), \
        codecs
    assert markers >= 2 and transactional >= 2, (markers, transactional)


def test_sasl_seeds_cover_plain_and_both_scram_mechanisms():
    modes = {data[0] & 0x03 for _, data in stored_inputs(corpus_dir("sasl"))}
    assert modes >= {0, 1, 2}, modes
    assert all(len(sasl_target.tokens(data[1:])) >= 1
               for _, data in stored_inputs(corpus_dir("sasl")))
