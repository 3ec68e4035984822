"""Helpers for the partition log tests: build batches, append them, open logs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from moldau.broker.log.config import LogConfig
from moldau.broker.log.log import AppendInfo, PartitionLog
from moldau.records.batch import BatchHeader, parse_header
from moldau.records.codec import build_batch

# Small segments and indexes so that rolls and sparse lookups happen within a few batches;
# no deletion delay so that files disappear right away.
SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, file_delete_delay_ms=0,
                  retention_ms=-1, segment_ms=10**12)


def make_batch(count: int = 1, *, ts: int = 1_000, value: bytes = b"value", key: bytes | None =
               None, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
               timestamps: Sequence[int] | None = None, compression: int = 0,
               transactional: bool = False) -> bytes:
    stamps = list(timestamps) if timestamps is not None else [ts + i for i in range(count)]
    records = [(key, value + str(i).encode(), None, stamp) for i, stamp in enumerate(stamps)]
    return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, compression=compression,
                       is_transactional=transactional)


def headers_of(buf: bytes | bytearray) -> list[BatchHeader]:
    out = []
    pos = 0
    while pos < len(buf):
        h = parse_header(buf, pos)
        out.append(h)
        pos += h.size
    return out


def append(plog: PartitionLog, *batches: bytes, epoch: int = 0,
           log_append_time: int | None = None) -> AppendInfo:
    buf = bytearray(b"".join(batches))
    return plog.append_as_leader(buf, headers_of(buf), leader_epoch=epoch,
                                 log_append_time_ms=log_append_time)


def open_log(path: Path | str, config: LogConfig = SMALL, *, clean: bool = True,
             recovery_point: int = 0, log_start_offset: int = 0, **kwargs: object
             ) -> PartitionLog:
    return PartitionLog.open(str(path), "orders", 0, config, recovery_point=recovery_point,
                             log_start_offset=log_start_offset, clean_shutdown=clean,
                             **kwargs)  # type: ignore[arg-type]


def with_offsets(batch: bytes, base_offset: int) -> bytes:
    """`batch` as the log stores it: baseOffset patched, leader epoch 0."""
    buf = bytearray(batch)
    buf[0:8] = base_offset.to_bytes(8, "big", signed=True)
    buf[12:16] = (0).to_bytes(4, "big")
    return bytes(buf)


def segment_files(path: Path | str, suffix: str = ".log") -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(suffix))


def config(**changes: object) -> LogConfig:
    return replace(SMALL, **changes)  # type: ignore[arg-type]
