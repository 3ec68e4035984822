"""`python -m bench`: Moldau and Apache Kafka side by side (see bench/harness.py)."""

import sys

from bench.harness import main

sys.exit(main())
