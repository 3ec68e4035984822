"""Make the shared helpers in offsets_node.py importable from the test modules here, and
give tests a node with real `__consumer_offsets` logs."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from offsets_node import OffsetsNode  # noqa: E402


@pytest.fixture
def node(tmp_path):
    node = OffsetsNode(tmp_path)
    yield node
    node.close()
