"""Make the shared helpers in harness.py importable from the test modules here."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
