"""The metadata log: an fsync'd, append-only file of metadata records.

Entry framing: length int32 | crc32c uint32 | offset int64 | epoch int32 | payload, where the
length counts everything after itself and the CRC covers offset to the end. A torn tail
(from a crash mid-write) is cut off on load. Offsets and epochs are there so the log can
become the replicated Raft log of a controller quorum without changing its format.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable

import crc32c

from moldau.broker.metadata.records import MetadataRecord, decode_record, encode_record

log = logging.getLogger("moldau.broker.metadata")

_PREFIX = struct.Struct(">iI")
_POSITION = struct.Struct(">qi")
METADATA_DIR = "__cluster_metadata-0"
LOG_FILE = "00000000000000000000.log"


class MetadataLog:
    def __init__(self, directory: str, *, file_name: str = LOG_FILE) -> None:
        """`directory` is the metadata directory itself when `file_name` is given, else
        the log dir that holds it."""
        self.directory = (directory if file_name != LOG_FILE
                          else os.path.join(directory, METADATA_DIR))
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, file_name)
        self.next_offset = 0
        self.epoch = 0
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def load(self) -> list[tuple[int, MetadataRecord]]:
        """Read every valid entry; truncate whatever follows the last valid one."""
        with open(self.path, "rb") as handle:
            data = handle.read()
        entries: list[tuple[int, MetadataRecord]] = []
        pos = 0
        while pos + _PREFIX.size <= len(data):
            length, checksum = _PREFIX.unpack_from(data, pos)
            end = pos + 4 + length
            body = data[pos + _PREFIX.size:end]
            if length < 16 or end > len(data) or crc32c.crc32c(body) != checksum:
                break
            offset, epoch = _POSITION.unpack_from(body)
            try:
                record = decode_record(body[_POSITION.size:])
            except (ValueError, KeyError, TypeError) as exc:
                log.error("Undecodable metadata record at offset %d: %s", offset, exc)
                break
            entries.append((offset, record))
            self.next_offset = offset + 1
            self.epoch = epoch
            pos = end
        if pos < len(data):
            log.warning("Truncating %d bytes of torn or corrupt tail from the metadata log",
                        len(data) - pos)
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        return entries

    def append(self, records: Iterable[MetadataRecord]) -> int:
        """Append and fsync; returns the offset of the last record written."""
        chunks = []
        for record in records:
            body = _POSITION.pack(self.next_offset, self.epoch) + encode_record(record)
            chunks.append(_PREFIX.pack(len(body) + 4, crc32c.crc32c(body)) + body)
            self.next_offset += 1
        os.write(self._fd, b"".join(chunks))
        os.fsync(self._fd)
        return self.next_offset - 1

    def close(self) -> None:
        os.close(self._fd)
