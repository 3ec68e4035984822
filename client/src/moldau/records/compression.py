"""Kafka's record batch codecs, by the id a batch's attributes carry, on top of cramjam.

- gzip (1): an ordinary gzip member.
- snappy (2): the Java client writes snappy-java's "xerial" stream (a 16-byte header, then
  ``[int32 length][raw snappy block]`` chunks); librdkafka and others write one raw snappy
  block. Both are read; the xerial stream is written, since every client can read it.
- lz4 (3): the LZ4 *frame* format. Written with independent 64 KiB blocks and no checksums, as
  the Java client writes it (its reader refuses linked blocks); any valid frame is read.
- zstd (4): a standard zstd frame.

Decompression is bounded: output goes into a buffer no larger than ``max_size`` and the codec
stops as soon as it would overflow, so a small "bomb" never turns into a large allocation.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable

import cramjam

from moldau.errors import ErrorCode, KafkaError
from moldau.records.batch import Compression

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LZ4_FRAME_HEADER",
    "XERIAL_HEADER",
    "codec_name",
    "compress",
    "decompress",
]

Buffer = bytes | bytearray | memoryview

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Magic, then format version 1 and minimum compatible version 1, as snappy-java writes them.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_HEADER_SIZE = len(XERIAL_HEADER)  # 16
# snappy-java's default block size; also what the Java client ends up using.
XERIAL_BLOCK_SIZE = 32 * 1024

# Kafka's default levels (zstd 3; gzip 6 is the Deflater default). cramjam's own zstd default
# (11) is far slower than what producers use.
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3

_NAMES = {
    Compression.NONE: "none",
    Compression.GZIP: "gzip",
    Compression.SNAPPY: "snappy",
    Compression.LZ4: "lz4",
    Compression.ZSTD: "zstd",
}

# A decompression scratch buffer per thread: reusing it avoids zero-filling a fresh buffer
# for every batch. Larger ones are not kept, so one big batch does not pin memory.
_SCRATCH_KEEP = 8 * 1024 * 1024
_local = threading.local()


def codec_name(codec: int) -> str:
    try:
        return _NAMES[codec]
    except KeyError:
        raise _unsupported(codec) from None


def _unsupported(codec: int) -> KafkaError:
    return KafkaError(ErrorCode.unsupported_compression_type,
                      f"Unknown compression type id: {codec}")


def _corrupt(codec: int, detail: object) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message,
                      f"Failed to decompress {_NAMES.get(codec, codec)} record data: {detail}")


def _too_large(max_size: int) -> KafkaError:
    # MESSAGE_TOO_LARGE makes the Java producer split the batch and retry, which is what helps.
    return KafkaError(ErrorCode.message_too_large,
                      f"Decompressed record data exceeds the limit of {max_size} bytes")


# --- compression ----------------------------------------------------------------------------


def compress(codec: int, data: Buffer, *, level: int | None = None) -> bytes:
    """Compress a batch's records section with the codec id `codec` (0 returns it unchanged).

    `level` applies to gzip and zstd; lz4 always uses the fast block compressor (as
    librdkafka does by default) and snappy has no levels.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.LZ4:
        return _lz4_frame_compress(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL if level is None else level))
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL if level is None else level))
    raise _unsupported(codec)


def _xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: enough for an LZ4 frame descriptor."""
    mask = 0xFFFFFFFF
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        (k,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + k * p3) & mask, 17) * p4) & mask
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & mask, 11) * p1) & mask
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    return h ^ (h >> 16)


# The frame header the Java client writes: FLG = version 1 with independent blocks and no
# checksums, BD = 64 KiB blocks, then the descriptor's checksum byte. Written by hand because
# cramjam's frame encoder always sets block checksums and links blocks by default, and the
# Java reader refuses linked blocks.
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_DESCRIPTOR = b"\x60\x40"
LZ4_FRAME_HEADER = (_LZ4_MAGIC + _LZ4_DESCRIPTOR
                    + bytes([(_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF]))
_LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"


def _lz4_frame_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [LZ4_FRAME_HEADER]
    pack = struct.Struct("<I").pack
    for start in range(0, len(view), _LZ4_BLOCK_SIZE):
        chunk = view[start:start + _LZ4_BLOCK_SIZE]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(pack(len(block)))
            parts.append(bytes(block))
        else:
            # Incompressible: stored as is, flagged by the length's high bit.
            parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED_BLOCK))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    pack = struct.Struct(">i").pack
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# --- decompression --------------------------------------------------------------------------


def decompress(codec: int, data: Buffer, *,
               max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a batch's records section.

    Raises KafkaError: UNSUPPORTED_COMPRESSION_TYPE for an unknown codec id, CORRUPT_MESSAGE
    for data the codec rejects, MESSAGE_TOO_LARGE when the output would exceed `max_size`.
    """
    if codec == Compression.NONE:
        if len(data) > max_size:
            raise _too_large(max_size)
        return bytes(data)
    if codec == Compression.LZ4:
        return _bounded(codec, cramjam.lz4.decompress_into, data, max_size)
    if codec == Compression.ZSTD:
        return _bounded(codec, cramjam.zstd.decompress_into, data, max_size)
    if codec == Compression.SNAPPY:
        if len(data) >= XERIAL_HEADER_SIZE and data[:8] == XERIAL_MAGIC:
            return _xerial_decompress(data, max_size)
        return _snappy_raw_decompress(data, max_size)
    if codec == Compression.GZIP:
        return _bounded(codec, cramjam.gzip.decompress_into, data, max_size)
    raise _unsupported(codec)


def _scratch(size: int) -> bytearray:
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(size)
        if size <= _SCRATCH_KEEP:
            _local.buf = buf
    return buf


def _bounded(codec: int, decompress_into: Callable[[Buffer, memoryview], int], data: Buffer,
             max_size: int) -> bytes:
    """Decompress into a scratch buffer, doubling it on overflow up to `max_size`.

    cramjam's ``*_into`` functions fail with "failed to write whole buffer" once the output
    buffer is full, without producing the rest, which is what bounds the work and memory.
    """
    kept = getattr(_local, "buf", None)
    # A first guess that fits typical ratios, so most batches decompress in one pass.
    size = min(max_size, max(len(data) * 4 + 65536, len(kept) if kept is not None else 0))
    while True:
        buf = _scratch(size)
        # Slicing to exactly `size` makes the limit exact even when the scratch is larger.
        view = memoryview(buf)[:size]
        try:
            n = decompress_into(data, view)
        except cramjam.DecompressionError as exc:
            if "failed to write whole buffer" not in str(exc):
                raise _corrupt(codec, exc) from None
            if size >= max_size:
                raise _too_large(max_size) from None
            size = min(max_size, size * 2)
            continue
        finally:
            view.release()
        return bytes(memoryview(buf)[:n])


def _snappy_raw_decompress(data: Buffer, max_size: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as exc:
        raise _corrupt(Compression.SNAPPY, exc) from None
    # A raw block states its length up front, so the check happens before any work.
    if size > max_size:
        raise _too_large(max_size)
    out = bytearray(size)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as exc:
        raise _corrupt(Compression.SNAPPY, exc) from None
    if n != size:
        raise _corrupt(Compression.SNAPPY, "short block")
    return bytes(out)


def _xerial_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    end = len(view)
    pos = XERIAL_HEADER_SIZE
    blocks: list[memoryview] = []
    sizes: list[int] = []
    total = 0
    # First pass: frame the chunks and add up their stated sizes, so the limit is enforced
    # before anything is decompressed.
    while pos < end:
        if end - pos < 4:
            raise _corrupt(Compression.SNAPPY, "truncated xerial chunk length")
        (length,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise _corrupt(Compression.SNAPPY, f"xerial chunk length {length} out of range")
        block = view[pos:pos + length]
        pos += length
        if not length:
            continue
        try:
            size = cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as exc:
            raise _corrupt(Compression.SNAPPY, exc) from None
        total += size
        if total > max_size:
            raise _too_large(max_size)
        blocks.append(block)
        sizes.append(size)
    out = bytearray(total)
    outview = memoryview(out)
    at = 0
    try:
        for block, size in zip(blocks, sizes, strict=True):
            n = cramjam.snappy.decompress_raw_into(block, outview[at:at + size])
            if n != size:
                raise _corrupt(Compression.SNAPPY, "short block")
            at += n
    except cramjam.DecompressionError as exc:
        raise _corrupt(Compression.SNAPPY, exc) from None
    finally:
        outview.release()
    return bytes(out)
