"""The fuzz targets: each module has `check(data: bytes) -> None`, which feeds one input to
the broker's own code and lets anything but the documented errors escape.

An escaping exception is a finding: atheris stops and saves the input, and the replay tests
(tests/fuzz/) run every stored input through the same `check`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

NAMES = ("frames", "batches", "sasl")

Check = Callable[[bytes], None]


def load(name: str) -> ModuleType:
    if name not in NAMES:
        raise ValueError(f"unknown fuzz target {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"fuzz.targets.{name}")


class ContractViolation(AssertionError):
    """The code under test answered, but wrongly (a property that must hold did not)."""
