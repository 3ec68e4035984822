"""Where each target's stored inputs live, and how they are named.

    fuzz/corpus/TARGET/       seeds made from real client traffic (python -m fuzz.capture)
    fuzz/regressions/TARGET/  inputs that once broke a contract, kept so they never do again

A stored input is named by the SHA-1 of its bytes, as libFuzzer names what it writes, so the
same input is never stored twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def corpus_dir(target: str) -> Path:
    return ROOT / "corpus" / target


def regressions_dir(target: str) -> Path:
    return ROOT / "regressions" / target


def input_name(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def stored_inputs(directory: Path) -> Iterator[tuple[Path, bytes]]:
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                yield path, path.read_bytes()
