"""A missing system tool fails the fault tests with one line naming it and its package."""

from __future__ import annotations

import pytest

from e2e.chaos import tools


def test_a_missing_tool_is_named_with_its_package() -> None:
    assert tools.missing({"sh": "dash", "ip": "iproute2"}) is None
    line = tools.missing({"sh": "dash", "no-such-tool-here": "some-package"})
    assert line == ("the fault-injection suite needs no-such-tool-here (Debian package "
                    "some-package): run `make tools`")
    with pytest.raises(pytest.fail.Exception) as failed:
        tools.require({"no-such-tool-here": "some-package", "nor-this": "other"})
    assert str(failed.value) == (
        "the fault-injection suite needs no-such-tool-here, nor-this (Debian packages other, "
        "some-package): run `make tools`")
