"""Make the helpers in this directory (fake_broker.py) and the end-to-end broker helper
(e2e.conftest.Broker) importable from the test modules here."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.append(ROOT)
