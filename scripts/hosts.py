#!/usr/bin/env python3
"""Emulated hosts on one Linux machine (``horovod_prague.bench.hosts``): up N | run -- CMD |
shape RATE | down | status | spec. Run as root, with the project's Python or any Python 3."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from horovod_prague.bench.hosts import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
