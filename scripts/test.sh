#!/usr/bin/env bash
# Set everything up (idempotent), then run the linter and the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -k smart
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.11 || command -v python3)
"$PYTHON" scripts/bootstrap.py
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3
echo "ruff: $(ruff --version)"
ruff check .
exec python -m pytest "$@"
