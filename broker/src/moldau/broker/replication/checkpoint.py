"""High watermarks on disk: Kafka's `replication-offset-checkpoint`, one file per log dir.

The format is the offset checkpoint of broker/log/checkpoint.py ("topic partition offset"
lines). After a restart a replica starts from the checkpointed high watermark, clamped to its
log, rather than from the log end: records above it were never known to be committed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from moldau.broker.log.checkpoint import CheckpointError, read_offsets, write_offsets

log = logging.getLogger("moldau.broker.replication")

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]


def read_high_watermarks(log_dirs: Iterable[str]) -> dict[TopicPartition, int]:
    """Every log dir's checkpoint merged (a partition lives in one dir only)."""
    found: dict[TopicPartition, int] = {}
    for log_dir in log_dirs:
        path = os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT)
        try:
            found.update(read_offsets(path))
        except CheckpointError as exc:
            # Starting from the log start is safe: the high watermark rises again as the
            # in-sync replicas are seen to have the records.
            log.warning("%s; high watermarks in %s start at the log start", exc, log_dir)
    return found


def write_high_watermarks(by_dir: Mapping[str, Mapping[TopicPartition, int]]) -> None:
    """Replace each log dir's checkpoint with the high watermarks of its partitions."""
    for log_dir, offsets in by_dir.items():
        if os.path.isdir(log_dir):
            write_offsets(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT), offsets)
