"""Index files, checkpoint files, the leader epoch cache and partition metadata."""

from __future__ import annotations

import random
import uuid

import pytest

from moldau.broker.log.checkpoint import (
    CheckpointError,
    decode_topic_id,
    encode_topic_id,
    read_epochs,
    read_offsets,
    read_partition_metadata,
    write_epochs,
    write_offsets,
    write_partition_metadata,
)
from moldau.broker.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from moldau.broker.log.leader_epoch import LeaderEpochCache


def test_offset_index_lookup_matches_brute_force(tmp_path):
    path = str(tmp_path / "00000000000000001000.index")
    idx = OffsetIndex(path, 1000, 1 << 20)
    rng = random.Random(1)
    entries = []
    offset, pos = 1000, 0
    for _ in range(500):
        offset += rng.randrange(1, 50)
        pos += rng.randrange(1, 4000)
        entries.append((offset, pos))
        idx.append(offset, pos)
    idx.append(entries[-1][0], entries[-1][1] + 5)  # not increasing: ignored
    assert len(idx) == 500
    for target in range(990, offset + 100, 7):
        expected = max((p for o, p in entries if o <= target), default=0)
        assert idx.lookup(target) == expected
    idx.flush()
    idx.close()
    loaded = OffsetIndex(path, 1000, 1 << 20)
    loaded.load(pos + 1)
    assert [loaded.lookup(o) for o, _ in entries] == [p for _, p in entries]
    assert loaded.last_entry == entries[-1]
    loaded.truncate_to_position(entries[100][1])
    assert len(loaded) == 100
    reread = OffsetIndex(path, 1000, 1 << 20)
    reread.load(pos + 1)
    assert reread.last_entry == entries[99]
    reread.close()
    loaded.close()


@pytest.mark.parametrize("damage", ["torn", "unordered", "past_end"])
def test_offset_index_sanity_check(tmp_path, damage):
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(str(path), 0, 1024)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.close()
    data = path.read_bytes()
    segment_size = 1000
    if damage == "torn":
        data += b"\x00\x01"
    elif damage == "unordered":
        data = data[8:16] + data[:8] + data[16:]
    else:
        segment_size = 450
    path.write_bytes(data)
    with pytest.raises(IndexCorruptError):
        OffsetIndex(str(path), 0, 1024).load(segment_size)


def test_time_index(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    idx = TimeIndex(path, 0, 1200)
    idx.maybe_append(100, 0)
    idx.maybe_append(100, 5)  # not larger: skipped
    idx.maybe_append(300, 7)
    idx.maybe_append(250, 9)  # smaller: skipped
    idx.maybe_append(500, 12)
    assert len(idx) == 3
    assert idx.lookup_before(50) == 0
    assert idx.lookup_before(100) == 0
    assert idx.lookup_before(101) == 0
    assert idx.lookup_before(300) == 0
    assert idx.lookup_before(301) == 7
    assert idx.lookup_before(10_000) == 12
    idx.close()
    again = TimeIndex(path, 0, 1200)
    again.load()
    assert again.last_entry == (500, 12)
    again.truncate_to_offset(12)
    assert again.last_entry == (300, 7)
    again.close()
    (tmp_path / "00000000000000000000.timeindex").write_bytes(b"\x00" * 13)
    with pytest.raises(IndexCorruptError):
        TimeIndex(path, 0, 1200).load()


def test_offset_checkpoint_round_trip(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    assert read_offsets(path) == {}
    offsets = {("orders", 0): 15, ("orders", 1): 0, ("my.topic_x-y", 12): 2**40}
    write_offsets(path, offsets)
    assert read_offsets(path) == offsets
    text = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "3"]
    assert "orders 0 15" in text.splitlines()
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    write_offsets(path, {})
    assert read_offsets(path) == {}


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\norders 0 5\n", "0\n1\norders x 5\n",
                                  "0\n1\norders 0\n", ""])
def test_malformed_checkpoint_is_an_error(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        read_offsets(str(path))


def test_epoch_checkpoint_and_cache(tmp_path):
    write_epochs(str(tmp_path / "e"), [(1, 0), (4, 100)])
    assert read_epochs(str(tmp_path / "e")) == [(1, 0), (4, 100)]
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(0, 10)  # same epoch: no new entry
    cache.assign(2, 50)
    cache.assign(1, 60)  # older epoch: ignored
    cache.assign(5, 80)
    assert cache.entries == [(0, 0), (2, 50), (5, 80)]
    assert cache.end_offset_for(0, 200) == (0, 50)
    assert cache.end_offset_for(1, 200) == (0, 50)
    assert cache.end_offset_for(3, 200) == (2, 80)
    assert cache.end_offset_for(5, 200) == (5, 200)
    assert cache.end_offset_for(6, 200) == (-1, -1)
    assert LeaderEpochCache(str(tmp_path)).entries == cache.entries
    cache.truncate_from_end(60)
    assert cache.entries == [(0, 0), (2, 50)]
    cache.truncate_from_start(55)
    assert cache.entries == [(2, 55)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(2, 55)]


def test_partition_metadata(tmp_path):
    topic_id = uuid.uuid4()
    assert decode_topic_id(encode_topic_id(topic_id)) == topic_id
    assert len(encode_topic_id(topic_id)) == 22
    path = str(tmp_path / "partition.metadata")
    assert read_partition_metadata(path) is None
    write_partition_metadata(path, topic_id)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n"
    assert read_partition_metadata(path) == topic_id
    (tmp_path / "partition.metadata").write_text("version: 0\ntopic_id: !!\n")
    with pytest.raises(CheckpointError):
        read_partition_metadata(path)
