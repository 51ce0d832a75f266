"""Run pytest on worker test modules inside each Horovod rank: ``run_pytest.py FILE...``.

The project's pytest settings are left out (they collect the whole repository); each rank
runs the given files, in order, and exits with pytest's status.
"""

import sys
from pathlib import Path

import pytest

here = Path(__file__).parent
args = [
    "-c",
    "/dev/null",
    "--rootdir",
    str(here),
    "--confcutdir",
    str(here),
    "-p",
    "no:cacheprovider",
    "-q",
]
sys.exit(pytest.main([*args, *(str(here / f) for f in sys.argv[1:])]))
