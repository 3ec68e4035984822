"""Kafka codecs: round trips, interoperability with other clients' codecs, error handling."""

from __future__ import annotations

import gzip
import os
import struct
import time

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import Compression
from moldau.records.compression import (
    LZ4_FRAME_HEADER,
    XERIAL_HEADER,
    codec_name,
    compress,
    decompress,
)

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]

TEXT = b"".join(b'{"id": %d, "name": "user-%d", "status": "active"}\n' % (i, i % 97)
                for i in range(5000))
PAYLOADS = {
    "empty": b"",
    "one-byte": b"x",
    "text": TEXT,
    "random": os.urandom(150_000),  # incompressible: lz4 stores such blocks raw
    "zeros": bytes(300_000),
}

# What each other client's codec module can read and write (kafka-python's kafka.codec).
OTHER_DECODERS = {
    Compression.GZIP: kafka_codec.gzip_decode,
    Compression.SNAPPY: kafka_codec.snappy_decode,
    Compression.LZ4: kafka_codec.lz4_decode,
    Compression.ZSTD: kafka_codec.zstd_decode,
}
OTHER_ENCODERS = {
    Compression.GZIP: kafka_codec.gzip_encode,
    Compression.SNAPPY: kafka_codec.snappy_encode,
    Compression.LZ4: kafka_codec.lz4_encode,
    Compression.ZSTD: kafka_codec.zstd_encode,
}


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
@pytest.mark.parametrize("name", PAYLOADS)
def test_round_trip(codec: int, name: str) -> None:
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(bytearray(packed))) == data


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
@pytest.mark.parametrize("name", ["one-byte", "text", "random"])
def test_other_clients_read_ours(codec: int, name: str) -> None:
    data = PAYLOADS[name]
    assert bytes(OTHER_DECODERS[codec](compress(codec, data))) == data


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
@pytest.mark.parametrize("name", ["one-byte", "text", "random"])
def test_we_read_other_clients(codec: int, name: str) -> None:
    data = PAYLOADS[name]
    assert decompress(codec, OTHER_ENCODERS[codec](data)) == data


def test_none_codec_passes_through() -> None:
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, bytearray(b"abc")) == b"abc"
    assert codec_name(Compression.NONE) == "none"


# --- snappy framing -------------------------------------------------------------------------


def test_snappy_writes_xerial_framing_like_java() -> None:
    packed = compress(Compression.SNAPPY, TEXT)
    assert packed[:16] == XERIAL_HEADER == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    # [int32 length][raw block] chunks of at most 32 KiB of input each
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(packed[pos + 4:pos + 4 + length])
        pos += 4 + length
    assert pos == len(packed)
    assert len(blocks) == -(-len(TEXT) // (32 * 1024))
    assert b"".join(snappy.uncompress(b) for b in blocks) == TEXT


def test_snappy_reads_raw_blocks_as_librdkafka_writes_them() -> None:
    raw = snappy.compress(TEXT)  # a single raw block, no framing
    assert decompress(Compression.SNAPPY, raw) == TEXT
    assert decompress(Compression.SNAPPY, kafka_codec.snappy_encode(
        TEXT, xerial_compatible=False)) == TEXT


def test_snappy_reads_xerial_with_odd_version_fields() -> None:
    # Some producers write the version ints little-endian; readers ignore them.
    body = compress(Compression.SNAPPY, TEXT)[16:]
    odd = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + body
    assert decompress(Compression.SNAPPY, odd) == TEXT


# --- lz4 framing ----------------------------------------------------------------------------


def test_lz4_frame_header_is_the_java_clients() -> None:
    packed = compress(Compression.LZ4, TEXT)
    # magic, FLG: version 1 + independent blocks, BD: 64 KiB, header checksum
    assert packed[:7] == LZ4_FRAME_HEADER
    reference = lz4.frame.compress(TEXT, block_linked=False, content_checksum=False,
                                   block_checksum=False, store_size=False,
                                   block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert reference[:7] == LZ4_FRAME_HEADER
    assert packed[4] & 0x20  # block independence: the Java reader insists on it


@pytest.mark.parametrize("options", [
    {},  # python-lz4 defaults: linked blocks, content size stored
    {"content_checksum": True, "block_checksum": True},
    {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "block_linked": False},
])
def test_lz4_reads_any_valid_frame(options: dict[str, object]) -> None:
    assert decompress(Compression.LZ4, lz4.frame.compress(TEXT, **options)) == TEXT


def test_lz4_reads_cramjam_frames_with_block_checksums() -> None:
    # aiokafka writes these (FLG 0x70)
    comp = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
    comp.compress(TEXT)
    frame = bytes(comp.finish())
    assert frame[4] == 0x70
    assert decompress(Compression.LZ4, frame) == TEXT


def test_zstd_reads_frames_with_and_without_content_size() -> None:
    with_size = zstandard.ZstdCompressor().compress(TEXT)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)
    assert decompress(Compression.ZSTD, with_size) == TEXT
    assert decompress(Compression.ZSTD, streamed) == TEXT


def test_gzip_matches_stdlib() -> None:
    assert gzip.decompress(compress(Compression.GZIP, TEXT)) == TEXT
    assert decompress(Compression.GZIP, gzip.compress(TEXT, compresslevel=1)) == TEXT


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(KafkaError) as err:
        compress(codec, b"abc")
    assert err.value.code == ErrorCode.unsupported_compression_type
    with pytest.raises(KafkaError) as err:
        decompress(codec, b"abc")
    assert err.value.code == ErrorCode.unsupported_compression_type
    with pytest.raises(KafkaError):
        codec_name(codec)


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped"])
def test_corrupt_input(codec: int, damage: str) -> None:
    packed = bytearray(compress(codec, TEXT))
    if damage == "garbage":
        data = bytes(b"\x00\xff garbage that no codec accepts \xff" * 3)
    elif damage == "truncated":
        data = bytes(packed[:len(packed) // 2])
    else:
        # Damage the first block's length field (or the header for formats without one).
        index = {Compression.GZIP: 3, Compression.SNAPPY: 17,
                 Compression.LZ4: 9, Compression.ZSTD: 4}[codec]
        packed[index] ^= 0xFF
        data = bytes(packed)
    with pytest.raises(KafkaError) as err:
        decompress(codec, data)
    assert err.value.code == ErrorCode.corrupt_message


def test_xerial_chunk_running_past_the_end() -> None:
    packed = compress(Compression.SNAPPY, TEXT)
    bad = packed[:16] + struct.pack(">i", len(packed)) + packed[20:]
    with pytest.raises(KafkaError) as err:
        decompress(Compression.SNAPPY, bad)
    assert err.value.code == ErrorCode.corrupt_message


@pytest.fixture(scope="module")
def bombs() -> dict[int, bytes]:
    zeros = bytes(16 * 1024 * 1024)
    return {codec: compress(codec, zeros) for codec in CODECS}


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
def test_decompression_bomb_is_bounded(codec: int, bombs: dict[int, bytes]) -> None:
    packed = bombs[codec]
    assert len(packed) < 1024 * 1024
    start = time.perf_counter()
    with pytest.raises(KafkaError) as err:
        decompress(codec, packed, max_size=1024 * 1024)
    assert err.value.code == ErrorCode.message_too_large
    # Stops at the limit rather than inflating all 16 MiB first.
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("codec", CODECS, ids=codec_name)
def test_limit_is_exact(codec: int) -> None:
    packed = compress(codec, TEXT)
    assert decompress(codec, packed, max_size=len(TEXT)) == TEXT
    with pytest.raises(KafkaError) as err:
        decompress(codec, packed, max_size=len(TEXT) - 1)
    assert err.value.code == ErrorCode.message_too_large


def test_raw_snappy_declaring_a_huge_length_is_refused_up_front() -> None:
    # The raw format starts with the uncompressed length: 2 GiB here, with no data behind it.
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x08])
    with pytest.raises(KafkaError) as err:
        decompress(Compression.SNAPPY, claim + b"\x00" * 10, max_size=1 << 20)
    assert err.value.code == ErrorCode.message_too_large


def test_growing_output_beyond_the_first_guess() -> None:
    # Highly compressible input needs several doublings of the scratch buffer.
    data = b"abcd" * (4 * 1024 * 1024)
    for codec in (Compression.GZIP, Compression.LZ4, Compression.ZSTD):
        assert decompress(codec, compress(codec, data)) == data
